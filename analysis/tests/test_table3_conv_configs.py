"""The converged sweep's configs (analysis/table3_conv_configs.py): every row
differs from base only in its own change (the changes written out here from
the protocol and the 8-epoch table, not read from the generator), the D rows
follow base′'s dropout, base is the pilot's chosen config with the sweep's
cap, the seeds are matched as jobs/table3-stages.sh expands them, and the
learning-rate check's configs differ from the sweep's in lr_peak only."""

import os
import pathlib
import subprocess

import pytest

from conftest import ROOT, cli, cli_error, transformer
from test_table3_conv_pilot import COMPLETE, plant_pilot

from row_result import parse_config_text

# every row's change against base, as the protocol's "Sweep" states it
CHANGES = {
    "base": {},
    "A1": {"n_heads": 1, "d_k": 128, "d_v": 128}, "A2": {"n_heads": 4, "d_k": 32, "d_v": 32},
    "A3": {"n_heads": 16, "d_k": 8, "d_v": 8}, "A4": {"n_heads": 32, "d_k": 4, "d_v": 4},
    "B1": {"d_k": 4}, "B2": {"d_k": 8},
    "C1": {"n_layers": 1}, "C2": {"n_layers": 2}, "C3": {"n_layers": 4},
    "C4": {"d_model": 64, "d_k": 8, "d_v": 8}, "C6": {"d_ff": 256}, "C7": {"d_ff": 1024},
    "D3": {"label_smoothing": 0.0}, "D4": {"label_smoothing": 0.2}, "E": {"positional": "learned"},
}
D_ROWS = {0.1: (0.0, 0.2), 0.3: (0.0, 0.4)}
OWN = ("row", "paper_ppl", "paper_bleu")  # a row's own keys, not a change
LR_ROWS = ("base", "C1", "C3", "C4", "C6", "C7")


def value(v):
    try:
        return float(v)
    except ValueError:
        return v


def load_dir(d):
    """{row: {key: value}} of the *.cfg files of d."""
    return {f[:-4]: {k: value(v) for k, v in parse_config_text((d / f).read_text(), f).items()}
            for f in sorted(os.listdir(d)) if f.endswith(".cfg")}


def diff(cfg, base):
    return {k: cfg.get(k) for k in set(cfg) | set(base) if k not in OWN and cfg.get(k) != base.get(k)}


def generate(out, dropout, peak="2e-3", cap=35400):
    cli("table3_conv_configs.py", "--dropout", dropout, "--peak", peak, "--cap", cap, "--out", out)
    return load_dir(out)


@pytest.mark.parametrize("dropout", [0.1, 0.3])
def test_rows_differ_from_base_only_in_their_change(tmp_path, dropout):
    cfgs = generate(tmp_path, dropout)
    d1, d2 = D_ROWS[dropout]
    want = dict(CHANGES, D1={"dropout": d1}, D2={"dropout": d2})
    assert set(cfgs) == set(want)
    for row, cfg in cfgs.items():
        assert diff(cfg, cfgs["base"]) == want[row], row
        assert cfg["row"] == row and cfg["seed"] == 1
    base = cfgs["base"]
    assert base["dropout"] == dropout and base["lr_peak"] == 2e-3 and base["train_steps"] == 35400
    assert (base["paper_ppl"], cfgs["A2"]["paper_ppl"], cfgs["C2"]["paper_bleu"]) == (4.92, 5.0, 25.3)


@pytest.mark.parametrize("dropout, peak", [(0.1, "2e-3"), (0.3, "1e-3")])
def test_base_is_the_pilots_config_with_the_sweeps_cap(tmp_path, dropout, peak):
    """The pilot's stopping rule and schedule, the chosen setting, the cap."""
    base = generate(tmp_path, dropout, peak, cap=36300)["base"]
    pilot = load_dir(pathlib.Path(ROOT) / "input" / "table3-m30k-conv" / "pilot")[f"d{dropout:g}-p{peak}-s1"]
    assert diff(base, pilot) == {"train_steps": 36300}
    for k, v in dict(eval_steps=300, patience=8, patience_delta=0.001, keep_best=1, ckpt_steps=300,
                     keep_ckpts=5).items():
        assert base[k] == v, k


def test_configs_cite_the_protocol_and_load(tmp_path):
    """Each header names its row and the protocol; the trainer accepts every
    row (base′ has the pilot's parameter count, 1,639,936)."""
    generate(tmp_path, 0.1)
    for f in sorted(tmp_path.glob("*.cfg")) + sorted(tmp_path.glob("lr-check/*/*.cfg")):
        text = f.read_text()
        assert text.startswith(f"# Converged Table 3 on Multi30k, row {f.stem}: "), f
        assert "docs/results-multi30k/converged/protocol.md" in text.split("\nrow =")[0], f
    p = transformer("params", "--config", str(tmp_path / "base.cfg"))
    assert "params 1639936" in p.stdout
    for f in sorted(tmp_path.glob("*.cfg")):
        transformer("params", "--config", str(f))


def test_seeds_are_matched(tmp_path):
    """jobs/table3-stages.sh expands seeds.txt: seed s of every row has
    seed = s and differs from base's seed s only in the row's change."""
    src = tmp_path / "src"
    cfgs = generate(src, 0.1)
    sweep = tmp_path / "sweep"
    (sweep / "configs").mkdir(parents=True)
    for row in cfgs:
        (sweep / "configs" / f"{row}.cfg").write_text((src / f"{row}.cfg").read_text())
    subprocess.run(["bash", "-c", f'. jobs/table3-stages.sh && SWEEP="{sweep}" && table3_seed_rows "{src}"'],
                   cwd=ROOT, check=True, timeout=60)
    runs = load_dir(sweep / "configs")
    want = dict(CHANGES, D1={"dropout": 0.0}, D2={"dropout": 0.2})
    assert len(runs) == 3 * len(want) == 54
    for row in cfgs:
        for s in (1, 2, 3):
            name = row if s == 1 else f"{row}-seed{s}"
            base = runs["base" if s == 1 else f"base-seed{s}"]
            assert runs[name]["seed"] == s and base["seed"] == s, name
            assert diff(runs[name], base) == want[row], name
    order = [l for l in (src / "order.txt").read_text().splitlines() if not l.startswith("#")]
    assert sorted(order) == sorted(runs) and order[:3] == ["base", "base-seed2", "base-seed3"]
    assert {o.split("-")[0] for o in order[-12:]} == {"A2", "A3", "B2", "C2"}


def test_learning_rate_check(tmp_path):
    """base, C1, C3, C4, C6, C7 at half and twice the peak: the sweep's
    config of the row with lr_peak changed, seed 1, no seeds.txt."""
    cfgs = generate(tmp_path, 0.1)
    for name, rate in (("half", 1e-3), ("twice", 4e-3)):
        d = tmp_path / "lr-check" / name
        check = load_dir(d)
        assert sorted(check) == sorted(LR_ROWS) and not (d / "seeds.txt").exists()
        for row, cfg in check.items():
            assert diff(cfg, cfgs[row]) == {"lr_peak": rate} and cfg["seed"] == 1, (name, row)


def test_from_the_pilot_and_refusals(tmp_path):
    """--pilot takes the choice and cap of a complete pilot (P_drop 0.1, peak
    2e-3, best steps 21900 and 22500: cap 36300); wrong settings refused."""
    top = plant_pilot(tmp_path / "pilot", COMPLETE)
    cli("table3_conv_configs.py", "--pilot", top, "--out", tmp_path / "out")
    base = load_dir(tmp_path / "out")["base"]
    assert (base["dropout"], base["lr_peak"], base["train_steps"]) == (0.1, 2e-3, 36300)
    assert "1.5 x best_step 22500" in (tmp_path / "out" / "base.cfg").read_text()
    out = str(tmp_path / "x")
    assert "D rows are fixed for 0.1, 0.3 only" in cli_error("table3_conv_configs.py", "--dropout", "0.2",
                                                              "--peak", "2e-3", "--cap", "35400", "--out", out)
    assert "multiple of 300" in cli_error("table3_conv_configs.py", "--dropout", "0.1", "--peak", "2e-3",
                                          "--cap", "35000", "--out", out)
    assert "not both" in cli_error("table3_conv_configs.py", "--pilot", top, "--cap", "35400", "--out", out)
    assert "all of --dropout" in cli_error("table3_conv_configs.py", "--dropout", "0.1", "--out", out)
