"""Training curves from the metrics logs the C program writes (RUN_DIR/metrics.h5)."""

import os

import h5py
import numpy as np
import pytest

import curves as C
from conftest import TINY, assert_figure, assert_public, cli_error, script, transformer


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    top = tmp_path_factory.mktemp("curves")
    out = []
    for name, lr in (("lr1", "1"), ("lr2", "2")):
        run = top / name
        transformer("train", f"run_dir={run}", f"lr_factor={lr}", *[f"{k}={v}" for k, v in TINY.items()])
        if not (run / "metrics.h5").exists():
            pytest.skip("bin/transformer does not write run_dir/metrics.h5 yet (HDF5 issue)")
        out.append(run)
    return top, out


def test_read_metrics_equals_the_file(runs):
    _, (run, _) = runs
    m = C.read_metrics(str(run / "metrics.h5"))
    with h5py.File(run / "metrics.h5", "r") as f:
        np.testing.assert_array_equal(m["step"], f["train/step"][()])
        np.testing.assert_array_equal(m["loss"], f["train/loss"][()])
        np.testing.assert_array_equal(m["dev_ppl"], f["dev/ppl"][()])
    steps = int(TINY["train_steps"])
    log, ev = int(TINY["log_steps"]), int(TINY["eval_steps"])
    assert list(m["step"]) == list(range(log, steps + 1, log))
    # an evaluation every eval_steps and one at the end
    assert list(m["dev_step"])[:steps // ev] == list(range(ev, steps + 1, ev))
    # eq. 3 with lr_factor 1
    d = int(TINY["d_model"])
    w = int(TINY["warmup"])
    lr = [d ** -0.5 * min(s ** -0.5, s * w ** -1.5) for s in m["step"]]
    np.testing.assert_allclose(m["lr"], lr, rtol=1e-6)
    assert np.all(np.diff(m["elapsed"]) >= 0) and np.all(m["tokens_per_s"] > 0)


def test_two_runs_in_one_figure(runs, tmp_path):
    _, (r1, r2) = runs
    p = script("curves.py", r1, r2, "--labels", "lr x1", "lr x2", "--out", tmp_path / "c")
    assert_figure(str(tmp_path / "c_steps"))
    assert_figure(str(tmp_path / "c_time"))
    m = [C.read_metrics(str(r / "metrics.h5")) for r in (r1, r2)]
    fig = C.plot_figure(m, ["a", "b"], "step")
    loss_ax, lr_ax, ppl_ax, tput_ax = fig.axes[:4]
    assert len(loss_ax.lines) == 2 and len(ppl_ax.lines) == 2
    np.testing.assert_array_equal(loss_ax.lines[1].get_xdata(), m[1]["step"])
    np.testing.assert_array_equal(lr_ax.lines[1].get_ydata(), m[1]["lr"])
    # run 2 has twice the learning rate of run 1 at every step
    np.testing.assert_allclose(lr_ax.lines[1].get_ydata(), 2 * lr_ax.lines[0].get_ydata(), rtol=1e-6)
    fig = C.plot_figure(m, ["a", "b"], "time")
    np.testing.assert_allclose(fig.axes[0].lines[0].get_xdata(), m[0]["elapsed"])  # seconds for short runs
    assert fig.axes[2].get_xlabel() == "wall time (s)"
    assert "c_steps.png" in p.stdout
    assert len(labelled_yticks(ppl_ax)) >= 2, "the dev perplexity panel has no numbers on its y axis"


def labelled_yticks(ax):
    """The y tick labels (major and minor) drawn inside the axis with a text."""
    ax.figure.canvas.draw()
    lo, hi = sorted(ax.get_ylim())
    out = []
    for minor in (False, True):
        for t in ax.yaxis.get_ticklabels(minor=minor):
            if t.get_visible() and t.get_text().strip() and lo <= t.get_position()[1] <= hi:
                out.append(t.get_text())
    return out


@pytest.mark.parametrize("ppl", [(1.5, 1.2, 1.08), (12.0, 6.0, 4.5), (300.0, 40.0, 9.0, 4.2), (2e4, 3.0)])
def test_perplexity_axis_has_numbers(ppl):
    """Whatever the range, small (a log axis shows no tick there) or several decades."""
    n = len(ppl)
    m = {k: np.arange(1.0, n + 1) for k in ("step", "loss", "lr", "tokens_per_s", "elapsed")}
    m.update(dev_step=np.arange(1.0, n + 1), dev_elapsed=np.arange(1.0, n + 1), dev_loss=np.log(ppl),
             dev_ppl=np.array(ppl))
    fig = C.plot_figure([m], [""], "step")
    ppl_ax = fig.axes[2]
    labels = labelled_yticks(ppl_ax)
    assert len(labels) >= 2, f"dev perplexity {ppl}: y tick labels {labels}"
    if max(ppl) >= 10 * min(ppl):
        assert ppl_ax.get_yscale() == "log"


def test_outputs_are_0644(runs, tmp_path):
    """Figures, tables and row results get open()'s mode (0666 - umask), not mkstemp's 0600."""
    import common
    import row_result

    _, (r1, _) = runs
    old = os.umask(0o022)
    try:
        common.write_atomic(str(tmp_path / "t.md"), "x\n")
        row_result.write_result(str(tmp_path / "r.h5"), {"format": "x"})
        script("curves.py", r1, "--out", tmp_path / "c")
        for f in ("t.md", "r.h5", "c_steps.png", "c_steps.pdf"):
            assert os.stat(tmp_path / f).st_mode & 0o777 == 0o644, f
        os.umask(0o077)   # a stricter umask is respected, as open() does
        common.write_atomic(str(tmp_path / "u.md"), "x\n")
        assert os.stat(tmp_path / "u.md").st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
    assert_public(str(tmp_path / "t.md"))


def test_errors(runs, tmp_path):
    top, (r1, r2) = runs
    p = script("curves.py", tmp_path, expect=2)
    assert "no metrics.h5" in p.stderr
    assert "2 runs" in cli_error("curves.py", r1, r2, "--labels", "only one")
    with h5py.File(tmp_path / "metrics.h5", "w") as f:   # HDF5, but not a metrics log
        f["sentences/0/cross"] = np.zeros((1, 1, 2, 2), np.float32)
    assert "not a training metrics log" in cli_error("curves.py", tmp_path)
