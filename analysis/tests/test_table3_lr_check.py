"""table3_lr_check.py on three planted sweeps (half, chosen, twice): each row's
Δ against base at each rate is the difference of the planted best dev NLLs,
a sign that holds, one that flips outside the band and one that flips inside
it are told apart, and a row whose runs are not all in waits."""

import math

from conftest import TINY, cli, write_cfg

import table3_lr_check as lr

# run -> best dev NLL at (half, chosen, twice); None: not run yet
PLANTED = {
    "base": (3.00, 2.95, 3.05),
    "C1": (3.10, 3.06, 3.12),    # worse at every rate: holds
    "C3": (2.98, 2.90, 3.15),    # better at half and chosen, worse at twice by 0.10: flips at twice
    "C4": (3.01, 2.94, 3.06),    # +0.01 / -0.01 / +0.01: flips at half and twice, all inside ±0.04
    "C6": (3.20, 3.00, None),    # twice not run yet
    "C7": (2.90, 2.90, 2.95),
}
RATES = {"half": "1e-3", "chosen": "2e-3", "twice": "4e-3"}


def plant(top):
    dirs = {"half": top / "sweep-lr-half", "chosen": top / "sweep", "twice": top / "sweep-lr-twice"}
    for k, (rate, d) in enumerate(dirs.items()):
        (d / "configs").mkdir(parents=True)
        for run, nlls in PLANTED.items():
            if nlls[k] is None:
                continue
            cfg = write_cfg(d / "configs" / f"{run}.cfg", **dict(TINY, row=run, seed=1, lr_peak=RATES[rate]))
            cli("row_result.py", "--out", d / "results" / f"{run}.h5", "--config", cfg,
                "--dev-ppl", math.exp(nlls[k]), "--dev-loss", nlls[k] + 0.6, "--steps", 20)
    return dirs


def table_lines(text):
    return {l.split("|")[1].strip(): [c.strip() for c in l.split("|")[2:-1]]
            for l in text.splitlines() if l.startswith("| C")}


def test_deltas_and_signs(tmp_path, capsys):
    dirs = plant(tmp_path)
    cli("table3_lr_check.py", dirs["chosen"])
    text = (tmp_path / "sweep-lr-check.md").read_text()
    assert text == capsys.readouterr().out
    rows = table_lines(text)
    for row, nlls in PLANTED.items():
        if row == "base":
            continue
        for k in range(3):
            if nlls[k] is not None:
                assert float(rows[row][k]) == round(nlls[k] - PLANTED["base"][k], 3)
    assert rows["C1"][3] == "holds"
    assert rows["C3"][3] == "flips at twice"
    assert rows["C4"][3].startswith("flips at half and twice") and "inside the band" in rows["C4"][3]
    assert rows["C6"][2].startswith("– (C6 waiting") and rows["C6"][3] == "waiting"
    assert "half (0.001)" in text and "twice (0.004)" in text


def test_verdict_rules():
    assert lr.verdict({"half": (0.1, ""), "chosen": (0.2, ""), "twice": (0.05, "")}) == "holds"
    assert lr.verdict({"half": (-0.1, ""), "chosen": (0.2, ""), "twice": (0.05, "")}) == "flips at half"
    assert lr.verdict({"half": (math.nan, "x"), "chosen": (0.2, ""), "twice": (0.05, "")}) == "waiting"
