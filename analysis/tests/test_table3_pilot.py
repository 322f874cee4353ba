"""The pilot of a scaled Table 3 (analysis/table3_pilot.py): planted settings
whose seeds agree, disagree, or sit on the plateau; the rule picks the first."""

import math

from conftest import TINY, cli, cli_error, write_cfg, write_metrics


def _curve(final):
    return lambda s: final + 3.4 * (math.exp(-s / 300) - math.exp(-4))


# (lr_peak, warmup) -> final dev NLL per seed (None: stuck on the plateau)
PLANTED = {
    (1e-3, 400): (2.80, 2.82),    # seeds agree: chosen
    (2e-3, 400): (2.70, 2.90),    # lower mean, but seeds 0.2 nats apart
    (5e-4, 800): (2.60, None),    # one seed never leaves the plateau
}


def _pilot(top):
    (top / "configs").mkdir()
    for (peak, warm), finals in PLANTED.items():
        for seed, final in enumerate(finals, 1):
            run = f"p{peak:g}-w{warm}-s{seed}"
            cfg = write_cfg(top / "configs" / f"{run}.cfg",
                            **dict(TINY, row=run, lr_peak=peak, warmup=warm, seed=seed, train_steps=1200))
            curve = _curve(final) if final else (lambda s: 5.8)
            m = write_metrics(top / "runs" / run / "metrics.h5", curve)
            cli("row_result.py", "--out", top / "results" / f"{run}.h5", "--config", cfg, "--metrics", m,
                "--compute", "unigram_nll=5.94")
    return top


def test_pilot_picks_the_setting_whose_seeds_agree(tmp_path, capsys):
    top = _pilot(tmp_path)
    cli("table3_pilot.py", top, "--no-plot")
    md = (top / "pilot.md").read_text()
    assert "Chosen: peak 0.001, warmup 400." in md, md
    row = {l.split("|")[1].strip(): l for l in md.splitlines() if l.startswith("| 0")}
    assert "(chosen)" in row["0.001 **(chosen)**"]
    assert "0.200" in row["0.002"] and "healthy, healthy" in row["0.002"]
    assert "stuck" in row["0.0005"] and "never" in row["0.0005"]


def test_pilot_nothing_meets_a_tight_rule(tmp_path):
    top = _pilot(tmp_path)
    cli("table3_pilot.py", top, "--no-plot", "--tol", "0.001")
    assert "No setting meets the rule." in (top / "pilot.md").read_text()


def test_pilot_errors(tmp_path):
    assert "no results/*.h5" in cli_error("table3_pilot.py", tmp_path)
    top = _pilot(tmp_path)
    assert "--last" in cli_error("table3_pilot.py", top, "--last", "0")
