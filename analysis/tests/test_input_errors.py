"""Inputs a user can get wrong, run as a user would (a subprocess): each is
exit 2 with one stderr line 'error: THING: PROBLEM' naming the file or
option, and an output that existed before is byte-identical after."""

import math
import os
import shutil

import h5py
import pytest

from conftest import ROOT, TINY, cli, script, write_cfg, write_metrics
from test_heads import make_file

CONV = os.path.join(ROOT, "docs", "results-multi30k", "converged", "sweep")


def one_line(p, *names):
    """The error line of a refused run; it names each of names."""
    line = p.stderr.strip()
    for n in names:
        assert str(n) in line, f"{n} not named in {line!r}"
    return line


def usage_error(name, *args, option):
    """An option refused by its argparse type: exit 2, the option named on
    argparse's error line, no traceback (argparse prints its usage above)."""
    p = _run(name, *args)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    errs = [l for l in p.stderr.splitlines() if "error: " in l]
    assert len(errs) == 1 and f"argument {option}" in errs[0], p.stderr
    return errs[0]


def _run(name, *args):
    import subprocess
    import sys

    from conftest import ANALYSIS

    return subprocess.run([sys.executable, os.path.join(ANALYSIS, name), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def snapshot(*paths):
    return {str(p): open(p, "rb").read() for p in paths}


def result_file(top, run="r1", **extra):
    """A done row result with curves: SWEEP/results/RUN.h5 (as table3_pilot's tests)."""
    cfg = write_cfg(top / "configs" / f"{run}.cfg" if (top / "configs").is_dir() else top / f"{run}.cfg",
                    **dict(TINY, row=run, lr_peak=1e-3, warmup=400, seed=1, train_steps=1200, **extra))
    m = write_metrics(top / "runs" / run / "metrics.h5", lambda s: 2.8 + 3.4 * math.exp(-s / 300))
    out = top / "results" / f"{run}.h5"
    cli("row_result.py", "--out", out, "--config", cfg, "--metrics", m, "--compute", "unigram_nll=5.94")
    return out


# class 2: an output under a regular file

def test_output_under_a_regular_file(tmp_path):
    (tmp_path / "file").write_text("x\n")
    f = make_file(tmp_path / "h.h5")
    for name, args, out in (("heads.py", ["heatmap", f, "--out", tmp_path / "file" / "x"], "x_importance.png"),
                            ("heads.py", ["table", f, "--out", tmp_path / "file" / "x"], "x_table.md"),
                            ("row_result.py", ["--out", tmp_path / "file" / "r.h5", "--row", "r", "--status",
                                               "failed"], "r.h5")):
        p = script(name, *args, expect=2)
        one_line(p, os.path.join(tmp_path, "file", out), f"{tmp_path / 'file'} is not a directory")
    assert sorted(os.listdir(tmp_path)) == ["file", "h.h5"]
    assert (tmp_path / "file").read_text() == "x\n"
