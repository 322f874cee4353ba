"""Shared fixtures of the analysis tests: the C program (bin/transformer, built
by `make`), tiny configs, and a helper to run the analysis scripts as a user
would (subprocess, checking exit code and the one-line error)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ANALYSIS = os.path.join(ROOT, "analysis")
BIN = os.environ.get("BIN", os.path.join(ROOT, "bin", "transformer"))
sys.path.insert(0, ANALYSIS)

# as tests/lib.sh: bin/transformer initialises MPI even without mpirun
MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl": "self,vader",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "OMP_NUM_THREADS": "1",
}

# a Transformer small enough to train a few steps in about a second on one core
TINY = {
    "n_layers": "1", "d_model": "16", "d_ff": "32", "n_heads": "2", "d_k": "8", "d_v": "8",
    "dropout": "0.1", "label_smoothing": "0.1", "positional": "sinusoid",
    "train_steps": "20", "warmup": "10", "log_steps": "5", "eval_steps": "10",
    "synth_train": "200", "synth_dev": "20", "max_tokens": "512", "threads": "1",
    "ckpt_minutes": "0",
}


def write_cfg(path, **keys):
    with open(path, "w") as f:
        for k, v in keys.items():
            f.write(f"{k} = {v}\n")
    return path


def transformer(*args, check=True, cwd=None):
    """Run bin/transformer; returns the CompletedProcess."""
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"{BIN} is missing: run `make` first")
    env = dict(os.environ, **MPI_ENV)
    p = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, cwd=cwd or ROOT, timeout=120)
    if check and p.returncode != 0:
        pytest.fail(f"transformer {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
    return p


def has_command(name):
    p = transformer("--help", check=False)
    return re.search(rf"^\s+{name}\s", p.stdout, re.M) is not None


def script(name, *args, expect=0, own_process=False):
    """Run analysis/<name> as its command line does; assert the exit code;
    on an expected error assert exactly one 'error: ' line on stderr.

    In this process by default (runpy, as `python analysis/NAME` runs it:
    its __main__ block, main_wrapper's exit code and one-line error), so
    that the ~110 calls of the suite do not each start an interpreter and
    import numpy, h5py and sacrebleu again (about 1 CPU s a call on the
    2 cores the tests share); own_process=True runs a real subprocess (the
    scripts as executables: test_every_script_has_help)."""
    if own_process:
        env = dict(os.environ, MPLBACKEND="Agg")
        env.pop("DISPLAY", None)
        p = subprocess.run([sys.executable, os.path.join(ANALYSIS, name), *map(str, args)],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    else:
        p = _run_in_process(name, [str(a) for a in args])
    assert p.returncode == expect, f"{name} {args}: exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    if expect == 2:
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), f"not a one-line error: {p.stderr!r}"
        assert "Traceback" not in p.stderr
    return p


def _run_in_process(name, args):
    """analysis/<name> run as __main__ with sys.argv = [path, *args] from
    ROOT, stdout and stderr captured; a CompletedProcess with the exit code
    of its SystemExit (0 when it returns).  An exception the script lets
    escape (a traceback, where a user would see one) fails the test here."""
    import contextlib
    import io
    import runpy

    path = os.path.join(ANALYSIS, name)
    out, err = io.StringIO(), io.StringIO()
    saved_argv, saved_cwd, code = sys.argv, os.getcwd(), 0
    try:
        sys.argv = [path, *args]
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(path, run_name="__main__")
            except SystemExit as e:   # as the interpreter maps sys.exit's argument
                if isinstance(e.code, int) or e.code is None:
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
    return subprocess.CompletedProcess([path, *args], code, out.getvalue(), err.getvalue())


def cli(name, *args):
    """Run analysis/<name>'s main() in this process (no interpreter start-up:
    the shared 2 cores are busy); asserts it succeeds."""
    import importlib

    mod = importlib.import_module(name[:-3] if name.endswith(".py") else name)
    rc = mod.main([str(a) for a in args])
    assert rc in (0, None)


def cli_error(name, *args):
    """Run main() in this process expecting a user error; returns 'thing: problem'."""
    import importlib

    from common import AnalysisError

    mod = importlib.import_module(name[:-3] if name.endswith(".py") else name)
    with pytest.raises(AnalysisError) as e:
        mod.main([str(a) for a in args])
    return str(e.value)


def assert_figure(prefix):
    """PREFIX.png and PREFIX.pdf exist and are real PNG / PDF files."""
    with open(prefix + ".png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", prefix + ".png is not a PNG"
    with open(prefix + ".pdf", "rb") as f:
        assert f.read(5) == b"%PDF-", prefix + ".pdf is not a PDF"
    assert os.path.getsize(prefix + ".png") > 5000
    for ext in ("png", "pdf"):
        assert_public(f"{prefix}.{ext}")


def assert_public(path):
    """path has the mode a plain open() gives: 0666 minus the umask (0644 usually),
    not tempfile's 0600."""
    m = os.umask(0o022)
    os.umask(m)
    mode = os.stat(path).st_mode & 0o777
    assert mode == 0o666 & ~m, f"{path}: mode {mode:o}, expected {0o666 & ~m:o}"


def parse_train_stdout(text):
    """The dev numbers the trainer prints: final (loss_ls, ppl) and the last step."""
    m = re.search(r"^dev final loss_ls ([0-9.]+) nll [0-9.]+ ppl ([0-9.]+)", text, re.M)
    assert m, f"no 'dev final' line in:\n{text}"
    steps = [int(s) for s in re.findall(r"^step (\d+) ", text, re.M)]
    return float(m.group(1)), float(m.group(2)), steps[-1]


def write_metrics(path, dev_nll, train_loss=None, steps=1200, log_steps=50, eval_steps=100, tokens_per_s=6000.0,
                  seconds_per_step=0.3, tokens=None):
    """A metrics.h5 in the layout of docs/metrics.md (what bin/transformer
    writes and analysis/curves.py reads), from curves given as functions of
    the step: dev_nll(step) in nats (the file stores exp of it as /dev/ppl),
    train_loss(step) (default: dev NLL + 0.6, the label-smoothing gap);
    tokens: /train/tokens per logged interval (default: not logged)."""
    import h5py
    import numpy as np

    train_loss = train_loss or (lambda s: dev_nll(s) + 0.6)
    ts = np.arange(log_steps, steps + 1, log_steps)
    ds = np.arange(eval_steps, steps + 1, eval_steps)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with h5py.File(path, "w") as f:
        f["train/step"] = ts.astype(np.int64)
        f["train/loss"] = np.array([train_loss(s) for s in ts], float)
        f["train/lr"] = np.full(len(ts), 1e-3)
        f["train/tokens_per_s"] = np.full(len(ts), float(tokens_per_s))
        f["train/elapsed_s"] = ts * seconds_per_step
        if tokens is not None:  # /train/tokens: target tokens per interval (NaN: not logged)
            f["train/tokens"] = np.asarray(tokens, float)
        nll = np.array([dev_nll(s) for s in ds], float)
        f["dev/step"] = ds.astype(np.int64)
        f["dev/loss"] = nll + 0.5
        with np.errstate(over="ignore", invalid="ignore"):
            f["dev/ppl"] = np.exp(nll)
        f["dev/tokens"] = np.full(len(ds), 21605, dtype=np.int64)
        f["dev/elapsed_s"] = ds * seconds_per_step
    return path
