"""Inputs a user can get wrong, run as a user would: the script's command
line (conftest.script, in this process; run_py, a real subprocess, where
the interpreter matters).  Each is exit 2 with one stderr line 'error:
THING: PROBLEM' naming the file or option, and an output that existed
before is byte-identical after."""

import json
import math
import os
import shutil
import stat
import subprocess

import h5py
import numpy as np
import pytest

from conftest import ANALYSIS, ROOT, TINY, cli, script, transformer, write_cfg, write_metrics
from test_heads import make_file

CONV = os.path.join(ROOT, "docs", "results-multi30k", "converged", "sweep")


def one_line(p, *names):
    """The error line of a refused run: exactly one stderr line, 'error: ...',
    naming each of names."""
    line = p.stderr.strip()
    assert p.stderr.count("\n") == 1 and line.startswith("error: "), p.stderr
    for n in names:
        assert str(n) in line, f"{n} not named in {line!r}"
    return line


def usage_error(name, *args, option):
    """An option refused by its argparse type: exit 2 and one line
    'error: NAME: argument OPTION: ...' (common.ArgumentParser; argparse's
    own usage block above it was dropped)."""
    p = script(name, *args, expect=2)
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"error: {name}: argument {option}"), p.stderr
    return p.stderr.strip()


def run_py(python, name, *args, env=None):
    return subprocess.run([python, os.path.join(ANALYSIS, name), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)


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


# class 1: an output that is an input, or a set of outputs half replaced

@pytest.mark.parametrize("opt", ["--config", "--metrics", "--hyp"])
def test_row_result_out_is_an_input(tmp_path, opt):
    cfg = write_cfg(tmp_path / "r.cfg", row="r")
    m = write_metrics(tmp_path / "m.h5", lambda s: 3.0)
    hyp = tmp_path / "h.txt"
    hyp.write_text("ein Hund\n")
    given = {"--config": cfg, "--metrics": m, "--hyp": hyp}
    before = snapshot(*given.values())
    p = script("row_result.py", "--out", given[opt], "--config", cfg, "--metrics", m, "--hyp", hyp,
               "--ref", hyp, "--status", "done", expect=2)
    one_line(p, given[opt], "--out")
    assert snapshot(*given.values()) == before


def test_table3_converged_writes_nothing_when_a_run_lacks_curves(tmp_path):
    sweep = tmp_path / "s"
    shutil.copytree(CONV, sweep)
    with h5py.File(sweep / "results" / "base.h5", "r+") as f:
        del f["curves/dev_nll"]
    outs = [sweep / f"table3{e}" for e in (".md", ".csv", "-rows.csv", ".tex", "-delta.csv")]
    before = snapshot(*outs)
    p = script("table3.py", sweep, "--protocol", "converged", "--no-plot", expect=2)
    one_line(p, "base.h5", "dev NLL curve")
    assert snapshot(*outs) == before


def test_heads_all_writes_nothing_when_the_curves_are_damaged(tmp_path):
    f = make_file(tmp_path / "h.h5")
    with h5py.File(f, "r+") as h:
        del h["prune/importance/ppl"]
    old = tmp_path / "x_importance.png"
    old.write_bytes(b"old figure")
    p = script("heads.py", "all", f, "--out", tmp_path / "x", expect=2)
    one_line(p, "h.h5", "prune/importance/ppl")
    assert old.read_bytes() == b"old figure"
    assert sorted(os.listdir(tmp_path)) == ["h.h5", "x_importance.png"]


def test_table3_pilot_writes_nothing_when_a_curve_is_damaged(tmp_path):
    r = result_file(tmp_path)
    with h5py.File(r, "r+") as f:
        n = f["curves/dev_step"][:-2]
        del f["curves/dev_step"]
        f["curves/dev_step"] = n
    (tmp_path / "pilot.md").write_text("old pilot\n")
    p = script("table3_pilot.py", tmp_path, expect=2)
    one_line(p, "r1.h5", "dev_step")
    assert (tmp_path / "pilot.md").read_text() == "old pilot\n"
    assert not list(tmp_path.glob("pilot.p*"))


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


# class 3: text inputs

def test_text_inputs_not_utf8_or_empty(tmp_path):
    bad, empty, ok = tmp_path / "bad.txt", tmp_path / "empty.txt", tmp_path / "ok.txt"
    bad.write_bytes(b"ein \xff Hund\n")
    empty.write_bytes(b"")
    ok.write_text("ein Hund\n")
    for args, named in (([ "--hyp", bad, "--ref", ok, "--row", "r", "--dev-ppl", "5"], bad),
                        (["--config", bad, "--row", "r", "--status", "failed"], bad),
                        (["--hyp", empty, "--ref", empty, "--row", "r", "--dev-ppl", "5"], empty)):
        p = script("row_result.py", "--out", tmp_path / "r.h5", *args, expect=2)
        one_line(p, named)
    one_line(script("bleu.py", empty, empty, expect=2), empty, "empty")
    assert not (tmp_path / "r.h5").exists()


def test_table3_config_not_utf8_or_not_a_number(tmp_path):
    sweep = tmp_path / "s"
    (sweep / "configs").mkdir(parents=True)
    cfg = write_cfg(sweep / "configs" / "base.cfg", **dict(TINY, row="base"))
    cfg.write_text(cfg.read_text().replace("train_steps = 20", "train_steps = abc"))
    one_line(script("table3.py", sweep, "--no-plot", expect=2), "base.cfg", "train_steps = abc")
    cfg.write_bytes(b"row = b\xe4se\n")
    one_line(script("table3.py", sweep, "--no-plot", expect=2), "base.cfg", "UTF-8")
    write_cfg(cfg, **dict(TINY, row="base"))
    (sweep / "sweep.env").write_bytes(b"STEPS=\xff\n")
    one_line(script("table3.py", sweep, "--no-plot", expect=2), "sweep.env", "UTF-8")
    assert sorted(os.listdir(sweep)) == ["configs", "sweep.env"]


def test_table3_refuses_a_directory_that_is_no_sweep(tmp_path):
    """An empty folder, or a sweep's parent: not a sweep (no results/,
    configs/, rows.txt or sweep.env), one line, nothing written (it tabled
    the checkout's configs as pending rows into it)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    parent = tmp_path / "parent"
    (parent / "sw" / "results").mkdir(parents=True)
    for d in (empty, parent):
        one_line(script("table3.py", d, "--no-plot", expect=2), d, "not a sweep directory")
    assert os.listdir(empty) == [] and os.listdir(parent) == ["sw"]


def test_output_that_is_not_a_regular_file(tmp_path):
    """An output that exists as a FIFO or a symbolic link (to a device node,
    or to a regular file) is refused in one line and left as it was, as
    bin/transformer refuses one (the rename over it left a regular file in
    its place: heads.py --out over a device node)."""
    f = make_file(tmp_path / "h.h5")
    out = tmp_path / "o"
    out.mkdir()
    os.mkfifo(out / "x_table.md")
    one_line(script("heads.py", "table", f, "--out", out / "x", expect=2), out / "x_table.md", "a FIFO")
    (out / "y_table.md").symlink_to(os.devnull)
    one_line(script("heads.py", "table", f, "--out", out / "y", expect=2), out / "y_table.md", "symbolic link")
    real = tmp_path / "real.md"
    real.write_text("old\n")
    (out / "z_table.md").symlink_to(real)
    one_line(script("heads.py", "table", f, "--out", out / "z", expect=2), out / "z_table.md", "symbolic link")
    assert stat.S_ISFIFO(os.lstat(out / "x_table.md").st_mode) and os.path.islink(out / "y_table.md")
    assert os.path.islink(out / "z_table.md") and real.read_text() == "old\n"
    assert sorted(os.listdir(out)) == ["x_table.md", "y_table.md", "z_table.md"]


def seeds_heads_file(path):
    """A heads file with the importance curve heads_seeds.py reads."""
    import numpy as np

    make_file(path, curves=False)
    with h5py.File(path, "r+") as f:
        g = f.create_group("prune/importance")
        g.attrs["split"] = "dev"
        for k, v in (("fraction", [0, 0.25, 0.5]), ("n_pruned", [0, 1, 2]), ("sacrebleu", [30, 29.5, 25]),
                     ("d_bleu", [0, -0.5, -5]), ("d_bleu_lo", [0, -1.2, -6]), ("d_bleu_hi", [0, 0.2, -4])):
            g[k] = np.array(v, float)
    return path


def several_outputs(case, top):
    """(script, arguments, every output in the order it writes them) of a
    script that writes several files."""
    if case.startswith("table3"):
        s = top / "s"
        shutil.copytree(CONV, s)
        if case == "table3":   # 8-epoch, tables only: .tex is the last
            return ("table3.py", [s, "--configs", os.path.join(ROOT, "input", "table3"), "--no-plot"],
                    [s / f"table3{e}" for e in (".md", ".csv", "-rows.csv", ".tex")])
        return ("table3.py", [s, "--protocol", "converged"],
                [s / f"table3{e}" for e in (".md", ".csv", "-rows.csv", ".tex", "-delta.csv", "-delta.png",
                                            "-delta.pdf", ".png", ".pdf")])
    if case.startswith("heads"):
        f = make_file(top / "h.h5")
        if case == "heads-heatmap":   # savefig alone: PREFIX.png, then PREFIX.pdf
            return "heads.py", ["heatmap", f, "--out", top / "x"], [top / "x_importance.png", top / "x_importance.pdf"]
        return ("heads.py", ["all", f, "--out", top / "x"],
                [top / f"x_{n}" for n in ("importance.png", "importance.pdf", "curve.png", "curve.pdf", "table.md",
                                          "table.csv")])
    if case == "heads_seeds":
        fs = [seeds_heads_file(top / f"h{k}.h5") for k in (1, 2)]
        return "heads_seeds.py", [*fs, "--out", top / "x"], [top / f"x_seeds.{e}" for e in ("png", "pdf", "md")]
    if case == "curves":
        m = write_metrics(top / "r" / "metrics.h5", lambda s: 2.8 + 3.4 * math.exp(-s / 300))
        return ("curves.py", [m, "--out", top / "c"],
                [top / f"c_{x}.{e}" for x in ("steps", "time") for e in ("png", "pdf")])
    if case == "table3_pilot":
        result_file(top)
        return "table3_pilot.py", [top], [top / f"pilot.{e}" for e in ("md", "png", "pdf")]
    if case in ("attention-stats", "attention-evolution"):
        run = top / "run"   # a trained run's probe, and a maps file of its checkpoint
        transformer("train", f"run_dir={run}", *[f"{k}={v}" for k, v in TINY.items()],
                    "train_steps=10", "attn_steps=5", "ckpt_steps=10", "eval_steps=0")
        if case == "attention-evolution":
            return ("attention.py", ["evolution", run / "attention_probe.h5", "--out", top / "ev"],
                    [top / f"ev.{e}" for e in ("csv", "png", "pdf")])
        maps = top / "maps.h5"
        transformer("attention", "--checkpoint", str(run / "ckpt_00000010.h5"), "--data", "synthetic",
                    "--sentences", "0-1", "--output", str(maps), "--greedy")
        return ("attention.py", ["stats", maps, "--out", top / "st"],
                [top / f"st.{e}" for e in ("md", "csv", "png", "pdf")])
    if case == "attention-compare":
        s = top / "s"
        shutil.copytree(CONV, s, ignore=shutil.ignore_patterns("table3*"))
        return ("attention.py", ["compare", s, "--no-plot"],
                [s / f"attention-compare.{e}" for e in ("md", "csv")])
    assert case == "table3_conv_configs"
    import table3_conv_configs

    args = ["--dropout", "0.1", "--peak", "2e-3", "--cap", "35400", "--out", str(top / "conv")]
    a = table3_conv_configs.build_parser().parse_args(args)
    table3_conv_configs.check_setting(a)
    return "table3_conv_configs.py", args, [top / "conv" / rel for rel in table3_conv_configs.sweep_configs(a)]


@pytest.mark.parametrize("case,kind", [
    ("table3", "link"), ("table3-plot", "fifo"), ("heads-all", "fifo"), ("heads-heatmap", "fifo"),
    ("heads_seeds", "link"), ("curves", "fifo"), ("table3_pilot", "link"), ("attention-compare", "link"),
    ("attention-stats", "fifo"), ("attention-evolution", "link"),
    ("table3_conv_configs", "fifo"),
])
def test_a_bad_last_output_is_refused_before_the_first_write(tmp_path, case, kind):
    """A script that writes several files checks all of them before the
    first (common.check_outputs; a figure is PREFIX.png and PREFIX.pdf):
    a FIFO or a symbolic link planted as its last output is refused in one
    line naming it, and every other output is as it was, byte for byte, or
    still absent.  Each was checked only at its own write, so the earlier
    ones had been replaced when the last was refused."""
    name, args, outs = several_outputs(case, tmp_path)
    bad = outs[-1]
    if bad.exists():
        bad.unlink()
    bad.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        real = tmp_path / "real"
        real.write_text("old\n")
        bad.symlink_to(real)
    for p in outs[:-1]:   # old bytes, not what this run would write again
        if p.exists():
            p.write_bytes(b"old " + p.name.encode() + b"\n")
    if not any(p.exists() for p in outs[:-1]):   # and one old output among the absent ones
        outs[0].write_bytes(b"old output\n")
    before = {str(p): p.read_bytes() if p.exists() else None for p in outs[:-1]}
    listing = sorted(os.listdir(bad.parent))
    one_line(script(name, *args, expect=2), bad, "a FIFO" if kind == "fifo" else "symbolic link")
    assert {str(p): p.read_bytes() if p.exists() else None for p in outs[:-1]} == before
    assert sorted(os.listdir(bad.parent)) == listing   # no temporary left either
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(bad).st_mode)
    else:
        assert os.readlink(bad) == str(tmp_path / "real") and (tmp_path / "real").read_text() == "old\n"


# class 4: bad values that were accepted (exit 0)

def test_row_result_refuses_a_missing_dataset_and_negative_numbers(tmp_path):
    out = tmp_path / "r.h5"
    p = script("row_result.py", "--out", out, "--row", "r", "--dev-ppl", "5", "--data", tmp_path / "none.h5",
               expect=2)
    one_line(p, tmp_path / "none.h5", "no such file")
    for opt in ("--dev-ppl", "--params", "--steps"):
        usage_error("row_result.py", "--out", out, "--row", "r", "--dev-ppl", "5", opt, "-3", option=opt)
    assert not out.exists()


@pytest.mark.parametrize("name,args,option", [
    ("table3_pilot.py", ["SWEEP", "--tol", "-1"], "--tol"),
    ("table3_pilot.py", ["SWEEP", "--tol", "nan"], "--tol"),
    ("silver_align.py", ["DATA", "--out", "OUT", "--null-prior", "-1"], "--null-prior"),
    ("silver_align.py", ["DATA", "--out", "OUT", "--null-prior", "nan"], "--null-prior"),
    ("silver_align.py", ["DATA", "--out", "OUT", "--length", "nan"], "--length"),
    ("silver_align.py", ["DATA", "--out", "OUT", "--length", "-1"], "--length"),
    ("scaling_model.py", ["--tflops", "0"], "--tflops"),
    ("scaling_model.py", ["--tflops", "-5"], "--tflops"),
    ("scaling_model.py", ["--nics", "0"], "--nics"),
])
def test_options_out_of_range(tmp_path, name, args, option):
    args = [tmp_path / a if a.isupper() else a for a in args]
    usage_error(name, *args, option=option)
    assert not (tmp_path / "OUT").exists()


def test_given_directories_must_exist(tmp_path):
    sweep = tmp_path / "s"
    shutil.copytree(CONV, sweep, ignore=shutil.ignore_patterns("attention*", "table3*"))
    p = script("attention.py", "compare", sweep, "--configs", tmp_path / "none", "--out", tmp_path / "ac",
               "--no-plot", expect=2)
    one_line(p, tmp_path / "none", "--configs")
    p = script("table3_lr_check.py", sweep, "--half", tmp_path / "none", "--out", tmp_path / "lr", expect=2)
    one_line(p, tmp_path / "none", "--half")
    for peak in ("nan", "inf"):
        p = script("table3_conv_configs.py", "--dropout", "0.1", "--peak", peak, "--cap", "35400",
                   "--out", tmp_path / "cc", expect=2)
        one_line(p, "--peak", peak)
    assert sorted(os.listdir(tmp_path)) == ["s"]


def test_prune_heads_checks_its_commands_first(tmp_path):
    f = make_file(tmp_path / "h.h5", curves=False)
    (tmp_path / "c.h5").write_text("")
    with h5py.File(f, "r+") as h:   # its checkpoint found, importance from train: the curves would run
        h.attrs["checkpoint"], h.attrs["split"] = str(tmp_path / "c.h5"), "train"
    before = snapshot(f)
    exe = shutil.which("true")
    for args, named in ((["--bin", tmp_path / "none"], tmp_path / "none"),
                        (["--bin", tmp_path], tmp_path),
                        (["--bin", exe, "--launcher", "no-such-launcher-here"], "no-such-launcher-here"),
                        (["--bin", exe, "--launcher", "'"], "--launcher")):
        one_line(script("prune_heads.py", f, *args, expect=2), named)
    usage_error("prune_heads.py", f, "--bin", exe, "--seed", "-1", option="--seed")
    assert snapshot(f) == before
    # the heads file is also the output: as a symbolic link it is refused
    # before the first curve runs (a --bin that leaves a mark when called)
    mark, fake = tmp_path / "called", tmp_path / "fake-bin"
    fake.write_text(f"#!/bin/sh\ntouch {mark}\nexit 1\n")
    fake.chmod(0o755)
    link = tmp_path / "link.h5"
    link.symlink_to(f)
    one_line(script("prune_heads.py", link, "--bin", fake, expect=2), link, "symbolic link")
    assert not mark.exists() and snapshot(f) == before


# the exports (.venv-hf): a checkpoint of two steps and its dataset

HF_PY = os.path.join(ROOT, ".venv-hf", "bin", "python")


def hf_script(name, *args):
    """analysis/<name> under .venv-hf; an exit 2 must be one error line.
    Without NPY_DISABLE_CPU_FEATURES (tests/numpy_alt_simd.sh sets it for
    the analysis venv's numpy): .venv-hf's numpy, another version, warns on
    import about features it does not dispatch, lines that are not the
    script's; these tests check its error line, not its arithmetic."""
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    p = run_py(HF_PY, name, *args, env=env)
    if p.returncode == 2:
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in p.stderr, p.stderr
    return p


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """(checkpoint, dataset, a MarianMT export of it) of a model trained two steps."""
    if not os.access(HF_PY, os.X_OK):
        pytest.skip("no .venv-hf (bash tests/install-deps.sh creates it)")
    w = tmp_path_factory.mktemp("model")
    words = "a the man woman dog cat sees eats big small red blue house tree".split()
    for split, n in (("train", 300), ("dev", 8)):
        lines = [" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(3 + i % 4)) + ".\n" for i in range(n)]
        for lang in ("en", "de"):
            (w / f"{split}.{lang}").write_text("".join(lines))
    transformer("prepare", "--out", str(w / "d.h5"), "--split", "train", str(w / "train.en"), str(w / "train.de"),
                "--split", "dev", str(w / "dev.en"), str(w / "dev.de"), "vocab_size=330", "max_len=16", "--jobs", "1")
    transformer("train", f"data={w / 'd.h5'}", "vocab_size=330", "max_len=16", "n_layers=1", "d_model=16",
                "d_ff=32", "n_heads=2", "d_k=8", "d_v=8", "max_tokens=256", "train_steps=2", "warmup=1",
                "threads=1", f"run_dir={w / 'run'}")
    ck = w / "run" / "ckpt_00000002.h5"
    p = hf_script("hf_export.py", ck, w / "d.h5", w / "hf")
    assert p.returncode == 0, p.stderr
    return ck, w / "d.h5", w / "hf"


def test_hf_import_refuses_to_overwrite_its_inputs(tiny_model, tmp_path):
    hf = tiny_model[2]
    inputs = [hf / n for n in sorted(os.listdir(hf))]
    before = snapshot(*inputs)
    for args, named in (([hf / "model.safetensors"], hf / "model.safetensors"),
                        ([tmp_path / "c.h5", "--data-out", hf / "vocab.json"], hf / "vocab.json"),
                        ([tmp_path], tmp_path)):
        p = hf_script("hf_import.py", hf, *args)
        assert p.returncode == 2 and f"error: {named}: " in p.stderr, p.stderr
    assert snapshot(*inputs) == before and sorted(os.listdir(hf)) == [os.path.basename(i) for i in inputs]
    assert os.listdir(tmp_path) == []


def test_hf_export_refuses_a_non_finite_length_penalty(tiny_model, tmp_path):
    ck = tmp_path / "ck.h5"
    shutil.copy(tiny_model[0], ck)
    with h5py.File(ck, "r+") as f:
        f.attrs["config"] = f.attrs["config"] + "len_alpha = nan\n"
    p = hf_script("hf_export.py", ck, tiny_model[1], tmp_path / "hf")
    assert p.returncode == 2 and f"error: {ck}: config len_alpha = nan" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["ck.h5"]


def test_ct2_export_names_the_dataset_and_the_output(tiny_model, tmp_path):
    if hf_script("ct2_export.py", "--help").returncode:
        pytest.skip("no ctranslate2 in .venv-hf")
    ck, data = tmp_path / "ck.h5", tmp_path / "d.h5"
    shutil.copy(tiny_model[0], ck)
    with h5py.File(ck, "r+") as f:   # a checkpoint without vocab_hash: the sizes are all there is to compare
        del f.attrs["vocab_hash"]
    with h5py.File(tiny_model[1], "r") as src, h5py.File(data, "w") as f:
        for k, v in src.attrs.items():
            f.attrs[k] = v
        f["vocab/pieces"] = src["vocab/pieces"][:-5]
        f["vocab/spm_model"] = src["vocab/spm_model"][()]
    p = hf_script("ct2_export.py", ck, data, tmp_path / "ct2")
    assert p.returncode == 2 and f"error: {data}: vocabulary of 325 pieces" in p.stderr, p.stderr
    (tmp_path / "file").write_text("x\n")
    p = hf_script("ct2_export.py", tiny_model[0], tiny_model[1], tmp_path / "file" / "ct2")
    assert p.returncode == 2 and f"{tmp_path / 'file'} is not a directory" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["ck.h5", "d.h5", "file"]


def test_hf_import_refuses_heads_that_disagree_with_its_entry(tiny_model, tmp_path):
    """config.json's heads are what transformers runs; the transformer_checkpoint
    entry's n_heads is what the import wrote, unchecked (same tensor shapes)."""
    hf = tmp_path / "hf"
    shutil.copytree(tiny_model[2], hf)
    c = json.loads((hf / "config.json").read_text())
    c["encoder_attention_heads"] = c["decoder_attention_heads"] = 4
    (hf / "config.json").write_text(json.dumps(c))
    p = hf_script("hf_import.py", hf, tmp_path / "c.h5")
    assert p.returncode == 2, p.stderr
    assert "config.json" in p.stderr and "n_heads = 2, config.json's encoder_attention_heads = 4" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["hf"]


def test_hf_import_refuses_config_numbers_that_are_not_finite(tiny_model, tmp_path):
    """The export's entry with "ln_eps = nan", or a foreign config.json with
    "dropout": NaN: the import wrote them into a checkpoint that eval and
    translate then refused at load."""
    hf = tmp_path / "hf"
    for key, edit in (("ln_eps", lambda c: c["transformer_checkpoint"].update(config=c["transformer_checkpoint"]["config"] + "ln_eps = nan\n")),
                      ("dropout", lambda c: (c.pop("transformer_checkpoint"), c.update(dropout=float("nan"))))):
        shutil.rmtree(hf, ignore_errors=True)
        shutil.copytree(tiny_model[2], hf)
        c = json.loads((hf / "config.json").read_text())
        edit(c)
        (hf / "config.json").write_text(json.dumps(c))
        p = hf_script("hf_import.py", hf, tmp_path / "c.h5")
        assert p.returncode == 2 and f"config {key} = nan: not a finite number" in p.stderr, p.stderr
        assert str(hf / "config.json") in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["hf"]


def test_exports_refuse_a_symbolic_link_as_output(tiny_model, tmp_path):
    """A link to an empty directory, or a dangling one: refused before the
    work, not "cannot write: Not a directory" at the rename after it."""
    (tmp_path / "empty").mkdir()
    os.symlink("empty", tmp_path / "to_empty")
    os.symlink("nowhere", tmp_path / "dangling")
    scripts = ["hf_export.py"] + ([] if hf_script("ct2_export.py", "--help").returncode else ["ct2_export.py"])
    for name in scripts:
        for link, to in (("to_empty", "empty"), ("dangling", "nowhere")):
            p = hf_script(name, tiny_model[0], tiny_model[1], tmp_path / link)
            assert p.returncode == 2, p.stderr
            assert f"error: {tmp_path / link}: exists and is a symbolic link (to {to})" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["dangling", "empty", "to_empty"] and not os.listdir(tmp_path / "empty")
    assert os.readlink(tmp_path / "to_empty") == "empty" and os.readlink(tmp_path / "dangling") == "nowhere"


def test_ct2_export_refuses_what_it_cannot_write_as_json_or_decode_from(tiny_model, tmp_path):
    """ln_eps = nan went into config.json as NaN and exited 0: CTranslate2's
    Translator then failed to parse it.  A dataset (without the checkpoint's
    vocab_hash to compare) whose <s> sits elsewhere started every sentence
    from another piece's embedding."""
    if hf_script("ct2_export.py", "--help").returncode:
        pytest.skip("no ctranslate2 in .venv-hf")
    ck, data = tmp_path / "ck.h5", tmp_path / "d.h5"
    for key in ("ln_eps", "len_alpha"):
        shutil.copy(tiny_model[0], ck)
        with h5py.File(ck, "r+") as f:
            f.attrs["config"] = f.attrs["config"] + f"{key} = nan\n"
        p = hf_script("ct2_export.py", ck, tiny_model[1], tmp_path / "ct2")
        assert p.returncode == 2 and f"error: {ck}: config {key} = nan: not a finite number" in p.stderr, p.stderr
    shutil.copy(tiny_model[0], ck)
    with h5py.File(ck, "r+") as f:
        del f.attrs["vocab_hash"]
    with h5py.File(tiny_model[1], "r") as src, h5py.File(data, "w") as f:
        for k, v in src.attrs.items():
            f.attrs[k] = v
        pieces = src["vocab/pieces"][:]
        pieces[[1, 4]] = pieces[[4, 1]]
        f["vocab/pieces"] = pieces
        f["vocab/spm_model"] = src["vocab/spm_model"][()]
    p = hf_script("ct2_export.py", ck, data, tmp_path / "ct2")
    assert p.returncode == 2 and f"error: {data}: id 1 is " in p.stderr and "ours is '<s>'" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["ck.h5", "d.h5"]


def test_ct2_export_checks_the_learned_positions(tiny_model, tmp_path):
    """Row E's table, which ct2_export.py exports, is checked like every other
    tensor: missing was a KeyError traceback, short an export that exited 0."""
    if hf_script("ct2_export.py", "--help").returncode:
        pytest.skip("no ctranslate2 in .venv-hf")
    ck = tmp_path / "ck.h5"
    shutil.copy(tiny_model[0], ck)
    with h5py.File(ck, "r+") as f:
        f.attrs["config"] = f.attrs["config"].replace("positional = sinusoid", "positional = learned")
    p = hf_script("ct2_export.py", ck, tiny_model[1], tmp_path / "ct2")
    assert p.returncode == 2 and f"error: {ck}: checkpoint lacks params/positional_embedding" in p.stderr, p.stderr
    with h5py.File(ck, "r+") as f:
        f["params/positional_embedding"] = np.zeros((10, 16), np.float32)
    p = hf_script("ct2_export.py", ck, tiny_model[1], tmp_path / "ct2")
    assert p.returncode == 2, p.stderr
    assert f"error: {ck}: params/positional_embedding has shape [10, 16], its config says [16, 16]" in p.stderr
    assert sorted(os.listdir(tmp_path)) == ["ck.h5"]


# class 6: our own HDF5 files damaged (a dataset deleted, another shape)

def test_damaged_files_are_named(tmp_path):
    from test_silver_align import _planted_corpus

    data = tmp_path / "d.h5"
    _planted_corpus(data, n_train=20, n_dev=5)
    with h5py.File(data, "r+") as f:
        del f["splits/dev/tgt_ids"]
    one_line(script("silver_align.py", data, "--out", tmp_path / "s.h5", expect=2), data,
             "missing dataset splits/dev/tgt_ids")
    with h5py.File(data, "r+") as f:
        del f["vocab/pieces"]
    one_line(script("silver_align.py", data, "--out", tmp_path / "s.h5", expect=2), data,
             "missing dataset vocab/pieces")
    with h5py.File(data, "r+") as f:
        del f.attrs["format"]
    one_line(script("silver_align.py", data, "--out", tmp_path / "s.h5", expect=2), data,
             "not a transformer dataset")
    seeds = tmp_path / "h.h5"
    with h5py.File(seeds, "w") as f:
        g = f.create_group("prune/importance")
        for k in ("fraction", "n_pruned", "sacrebleu", "d_bleu", "d_bleu_lo", "d_bleu_hi"):
            g[k] = [0.0, 0.5, 1.0] if k != "d_bleu" else [0.0, -2.0]
    one_line(script("heads_seeds.py", seeds, "--out", tmp_path / "x", expect=2), seeds,
             "prune/importance/d_bleu has shape (2,), expected (3,)")
    sweep = tmp_path / "sw"
    shutil.copytree(CONV, sweep, ignore=shutil.ignore_patterns("attention-*", "table3*"))
    with h5py.File(sweep / "attention" / "A1.h5", "r+") as f:
        del f["cross/mean"]
    one_line(script("attention.py", "compare", sweep, "--out", tmp_path / "ac", "--no-plot", expect=2),
             "A1.h5", "missing dataset cross/mean")
    assert sorted(os.listdir(tmp_path)) == ["d.h5", "h.h5", "sw"]


def test_damaged_checkpoint_and_export_are_named(tiny_model, tmp_path):
    ck = tmp_path / "ck.h5"
    shutil.copy(tiny_model[0], ck)
    with h5py.File(ck, "r+") as f:
        f.attrs["config"] = f.attrs["config"].replace("d_model = 16", "d_model = abc")
    p = hf_script("hf_export.py", ck, tiny_model[1], tmp_path / "hf")
    assert p.returncode == 2 and f"error: {ck}: config d_model = abc" in p.stderr, p.stderr
    with h5py.File(ck, "r+") as f:
        del f["params"]
    p = hf_script("hf_export.py", ck, tiny_model[1], tmp_path / "hf")
    assert p.returncode == 2 and f"error: {ck}: missing group params" in p.stderr, p.stderr
    hf = tmp_path / "hfd"
    shutil.copytree(tiny_model[2], hf)
    c = json.loads((hf / "config.json").read_text())
    key = next(k for k, v in c.items() if isinstance(v, dict) and "config" in v)
    c[key]["config"] = c[key]["config"].replace("n_layers = 1\n", "")
    (hf / "config.json").write_text(json.dumps(c))
    p = hf_script("hf_import.py", hf, tmp_path / "c.h5")
    assert p.returncode == 2 and "config.json" in p.stderr and "n_layers = None" in p.stderr, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["ck.h5", "hfd"]
