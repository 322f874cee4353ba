"""A run that early stopping (patience, issue 42) ended is not a failure for
ending before train_steps: row_result.py reads how it ended from the
trainer's metrics.h5 attributes (docs/metrics.md) and analysis/verdict.py
judges it over the steps it ran, stuck by its best dev NLL."""

import math

import h5py

from conftest import cli, write_metrics

UNIGRAM = "unigram_nll=5.94"
PLATEAU = 5.25  # where the old sweep's stuck runs sat (0.69 nats below the unigram NLL)


def _late(s):
    """Leaves the plateau at step 600 and settles at 4.1 nats by step 945."""
    return PLATEAU if s < 600 else max(4.1, PLATEAU - (s - 600) / 300)


def _stopped(path, stop, best):
    """The attributes the trainer writes when patience ends a run (src/metrics.c)."""
    with h5py.File(path, "a") as f:
        f.attrs["stopped_by"] = "patience"
        f.attrs["stop_step"] = stop
        f.attrs["best_step"] = best
        f.attrs["best_dev_nll"] = 4.1
    return path


def _verdict(tmp_path, capsys, metrics, name):
    out = tmp_path / f"{name}.h5"
    cli("row_result.py", "--out", out, "--row", name, "--set", "train_steps=1200", "--metrics", metrics,
        "--compute", UNIGRAM)
    capsys.readouterr()
    cli("row_result.py", "--verdict", out)
    return capsys.readouterr().out, out


def test_a_stop_by_patience_is_judged_over_the_steps_run(tmp_path, capsys):
    """The same late-leaving curve, 1100 of a 1200-step cap: run to the cap
    it is stuck at 40% of it (step 480); stopped by patience at 1100 with
    its best NLL 1.84 nats below the unigram's, it is healthy and says so."""
    m = write_metrics(tmp_path / "cap" / "metrics.h5", _late, steps=1100)
    line, _ = _verdict(tmp_path, capsys, m, "cap")
    assert line.startswith("stuck "), line
    m = _stopped(write_metrics(tmp_path / "es" / "metrics.h5", _late, steps=1100), 1100, 1000)
    line, out = _verdict(tmp_path, capsys, m, "es")
    assert line.startswith("healthy ") and "stopped by patience at step 1100 (best step 1000)" in line, line
    with h5py.File(out, "r") as f:
        assert (f.attrs["stopped_by"], f.attrs["stop_step"], f.attrs["best_step"]) == ("patience", 1100, 1000)


def test_a_run_stopped_on_the_plateau_is_still_stuck(tmp_path, capsys):
    """Patience also ends a run that never left the plateau: stuck, by its best NLL."""
    m = _stopped(write_metrics(tmp_path / "p" / "metrics.h5", lambda s: max(PLATEAU, 6.0 - s / 200), steps=500),
                 500, 200)
    line, _ = _verdict(tmp_path, capsys, m, "p")
    assert line.startswith("stuck stopped by patience with its best dev NLL 5.250"), line


def test_an_overfitting_stop_is_healthy(tmp_path, capsys):
    """Dev NLL rising for the last evaluations (why patience stopped it) while
    the training loss falls: overfitting, healthy, the stop named."""
    def dev(s):
        return 3.0 + 3.4 * math.exp(-min(s, 700) / 300) + max(0, s - 700) * 0.0006

    m = _stopped(write_metrics(tmp_path / "o" / "metrics.h5", dev, lambda s: 3.6 + 3.4 * math.exp(-s / 300),
                               steps=1000), 1000, 700)
    line, _ = _verdict(tmp_path, capsys, m, "o")
    assert line.startswith("healthy ") and "overfitting" in line and "stopped by patience at step 1000" in line, line


def test_a_run_to_train_steps_records_no_stop(tmp_path, capsys):
    m = write_metrics(tmp_path / "t" / "metrics.h5", lambda s: 3.0 + 3.4 * math.exp(-s / 300))
    with h5py.File(m, "a") as f:
        f.attrs["stopped_by"] = "train_steps"
        f.attrs["stop_step"] = 1200
        f.attrs["best_step"] = 1200
    line, out = _verdict(tmp_path, capsys, m, "t")
    assert line.startswith("healthy ") and "patience" not in line, line
    with h5py.File(out, "r") as f:
        assert f.attrs["stopped_by"] == "train_steps" and f.attrs["stop_step"] == -1 and f.attrs["best_step"] == 1200


def test_the_best_step_is_the_trainers_not_the_lowest_logged(tmp_path, capsys):
    """The trainer's best step counts only a fall of more than patience_delta
    (0.001 nats): C1 of the converged sweep stopped at 35400 with its best at
    33000 and its last evaluation 0.0002 nats lower.  The verdict names the
    trainer's best step and, apart, where the lowest logged NLL lies."""
    curve = lambda s: _late(s) - (0.0002 if s == 1100 else 0.0)  # noqa: E731
    m = _stopped(write_metrics(tmp_path / "c1" / "metrics.h5", curve, steps=1100), 1100, 1000)
    line, out = _verdict(tmp_path, capsys, m, "c1")
    assert "stopped by patience at step 1100 (best step 1000, lowest dev NLL at step 1100)" in line, line
    with h5py.File(out, "r") as f:
        assert f.attrs["best_step"] == 1000
