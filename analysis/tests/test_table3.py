"""Table 3 from a scaled-down sweep run by the C program: rows trained with
bin/transformer, parameter counts from `transformer params`, one row failing
on a bad config and one not run (pending); row files written by row_result.py
as the sweep job does, then table3.py."""

import csv
import statistics
import math
import os

import h5py
import pytest

from conftest import (TINY, assert_figure, cli, cli_error, parse_train_stdout, script, transformer, write_cfg,
                      write_metrics)

ROWS = {  # row -> (overrides of TINY, paper PPL, paper BLEU, paper params x10^6)
    "base": ({}, 4.92, 25.8, 65),
    "A1": ({"n_heads": "1", "d_k": "16", "d_v": "16"}, 5.29, 24.9, 0),
    "C1": ({"n_layers": "2"}, 6.11, 23.7, 36),
    "C4": ({"d_model": "8", "d_k": "4", "d_v": "4", "no_such_key": "1"}, 5.75, 24.5, 28),  # fails
    "D1": ({"dropout": "0.0"}, 5.77, 24.6, 0),  # never run: pending
}
CSV_REL = 1e-5  # the CSVs hold 6 significant digits (table3.CSV_DIGITS): half a unit is <= 5e-6
# BLEUs handed to row_result.py (the C decoder's BLEU is not in this test):
# row -> (sacreBLEU 13a, tokenised BLEU or None); C1 has no tokenised BLEU
BLEU = {"base": (12.5, 13.4), "C1": (11.0, None)}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    top = tmp_path_factory.mktemp("sweep")
    cfgdir = top / "configs"
    cfgdir.mkdir()
    truth = {}
    for row, (over, pp, pb, pm) in ROWS.items():
        keys = dict(TINY, **over, row=row, paper_ppl=pp, paper_bleu=pb, paper_params_m=pm)
        cfg = write_cfg(cfgdir / f"{row}.cfg", **keys)
        if row == "D1":
            continue
        out = top / "results" / f"{row}.h5"
        run = top / "runs" / row
        p = transformer("train", "--config", str(cfg), f"run_dir={run}", check=False)
        if p.returncode != 0:
            assert row == "C4", f"row {row} failed: {p.stderr}"
            msg = p.stderr.strip().splitlines()[-1]
            script("row_result.py", "--out", out, "--config", cfg, "--status", "failed", "--message", msg)
            truth[row] = {"message": msg}
            continue
        loss, ppl, steps = parse_train_stdout(p.stdout)
        params = int(transformer("params", "--config", str(cfg)).stdout.split("\n")[0].split()[1])
        args = ["--out", out, "--config", cfg, "--params", params]
        metrics = run / "metrics.h5"
        if metrics.exists():  # the C program's HDF5 log: steps, wall time, dev loss/PPL
            args += ["--metrics", metrics]
        else:
            args += ["--dev-ppl", ppl, "--dev-loss", loss, "--steps", steps]
        if row in BLEU:
            args += ["--dev-bleu", BLEU[row][0]]
            if BLEU[row][1] is not None:
                args += ["--dev-bleu-tok", BLEU[row][1]]
        script("row_result.py", *args)
        truth[row] = {"ppl": ppl, "loss": loss, "steps": steps, "params": params,
                      "metrics": metrics.exists(), "nll": math.log(float(ppl))}
        if metrics.exists():
            # the dev NLL is the best dev evaluation's where the log names one
            # (compare.nll): on the plateau the last need not be the best
            with h5py.File(metrics, "r") as m:
                if "best_step" in m.attrs:
                    at = list(m["dev/step"][()]).index(int(m.attrs["best_step"]))
                    truth[row]["nll"] = math.log(float(m["dev/ppl"][at]))
    p = script("table3.py", top, "--configs", cfgdir)
    assert "5 rows (3 done, 1 pending, 1 failed;" in p.stdout
    return top, truth


def read_csv(top):
    with open(top / "table3.csv") as f:
        return list(csv.DictReader(f))


def test_rows_in_paper_order_with_status(sweep):
    top, _ = sweep
    rows = read_csv(top)
    assert [r["row"] for r in rows] == ["base", "A1", "C1", "C4", "D1"]
    assert [r["status"] for r in rows] == ["done", "done", "done", "failed", "pending"]


def test_values_are_the_c_programs(sweep):
    top, truth = sweep
    for r in read_csv(top):
        row = r["row"]
        _, pp, pb, pm = ROWS[row]
        assert float(r["paper_ppl"]) == pytest.approx(pp)
        assert float(r["paper_bleu"]) == pytest.approx(pb)
        assert r["paper_params_m"] == ("" if pm == 0 else str(float(pm)))
        if r["status"] != "done":
            assert r["dev_ppl"] == r["params"] == r["dev_nll"] == ""
            continue
        t = truth[row]
        assert int(r["params"]) == t["params"]
        assert float(r["params_m"]) == pytest.approx(t["params"] / 1e6)
        # stdout prints 3 decimals; metrics.h5 holds the double
        assert float(r["dev_ppl"]) == pytest.approx(t["ppl"], abs=6e-4)
        assert float(r["dev_loss"]) == pytest.approx(t["loss"], abs=6e-5)
        assert int(r["train_steps"]) == t["steps"] == int(TINY["train_steps"])
        assert float(r["dev_nll"]) == pytest.approx(t["nll"], rel=CSV_REL)
        sacre, tok = BLEU.get(row, (None, None))
        assert r["dev_bleu"] == ("" if sacre is None else str(sacre))
        assert r["dev_bleu_tok"] == ("" if tok is None else str(tok))
        if t["metrics"]:  # 20 steps of a tiny model: still on the plateau, and the verdict says so
            assert r["verdict"] == "stuck" and "the first dev NLL" in r["verdict_reason"]
            assert float(r["tokens_seen"]) > 0  # (no matrix_params: TINY has no vocab_size key)
    # the three trained rows differ (different architectures, different PPL)
    ppls = [float(r["dev_ppl"]) for r in read_csv(top) if r["status"] == "done"]
    assert len(set(ppls)) == 3 and all(1 < p < 30 for p in ppls)


def md_tables(text):
    """The Markdown tables of a text: a list of dicts first cell -> {header: cell}."""
    tables, cur = [], None
    for line in text.splitlines() + [""]:
        if line.startswith("| "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cur is None:
                cur, head = {}, cells
            else:
                cur[cells[0]] = dict(zip(head, cells))
        elif line.startswith("|:--"):
            continue
        elif cur is not None:
            tables.append(cur)
            cur = None
    return tables


def test_markdown_shows_only_differences_from_base(sweep):
    top, truth = sweep
    text = (top / "table3.md").read_text()
    compare, held_out, runs = md_tables(text)
    assert list(compare) == ["base ✗", "A1 ✗", "C1 ✗", "C4 ✗", "D1"]  # ✗: a failed run in the row
    b = compare["base ✗"]
    assert (b["N"], b["d_model"], b["d_ff"], b["h"], b["d_k"], b["d_v"]) == ("1", "16", "32", "2", "8", "8")
    assert (b["P_drop"], b["eps_ls"], b["pos. emb."], b["train steps"]) == ("0.1", "0.1", "sinusoid", "20")
    a1 = compare["A1 ✗"]
    assert (a1["h"], a1["d_k"], a1["d_v"]) == ("1", "16", "16")
    assert a1["N"] == a1["d_model"] == a1["d_ff"] == a1["P_drop"] == a1["train steps"] == ""
    assert compare["C1 ✗"]["N"] == "2" and compare["C1 ✗"]["h"] == ""
    assert compare["D1"]["P_drop"] == "0" and compare["D1"]["per run (nats)"] == "pending"
    assert compare["C4 ✗"]["per run (nats)"] == "failed ✗"
    # every trained run is stuck (20 steps): shown with its NLL, left out of the statistics
    assert b["per run (nats)"] == f"{math.log(truth['base']['ppl']):.3f} ✗stuck" and b["runs"] == "0/1"
    assert b["dev NLL"] == "–" and compare["A1 ✗"]["Δ NLL vs base [95% CI]"] == "–"
    assert compare["A1 ✗"]["paper Δ"] == f"{math.log(5.29 / 4.92):+.3f}" and compare["A1 ✗"]["paper"] == "up"
    pm = truth["base"]["params"] / 1e6
    assert b["params ×10⁶"] == (f"{pm:.3g}" if pm < 1 else f"{pm:.1f}")
    assert list(held_out) == ["base", "A1", "C1", "C4", "D1"]
    assert list(runs) == ["base", "A1", "C1", "C4", "D1"]
    assert runs["base"]["verdict"] == "stuck" and runs["C4"]["verdict"] == "failed"
    assert runs["D1"]["verdict"] == "pending"
    assert "- C4: failed: " in text and "no_such_key" in text  # the failure's message
    assert "- base: stuck: dev NLL" in text
    assert "Spearman rank correlation" in text and "sacreBLEU signature" in text


def test_latex_table(sweep):
    top, _ = sweep
    tex = (top / "table3.tex").read_text()
    assert tex.count("\\begin{tabular}") == 1 and "\\bottomrule" in tex
    body = [l for l in tex.splitlines() if l.endswith("\\\\")]
    assert len(body) == 1 + 5  # a header line, five rows
    spec = tex.split("\\begin{tabular}{", 1)[1].split("}", 1)[0]
    ncols = sum(ch in "lcr" for ch in spec)
    assert ncols == 1 + 10 + 8  # row, hyperparameters, NLL, Δ, 3 directions, BLEU, Δ BLEU, p
    for l in body:
        assert l.count("&") == ncols - 1, l
    assert "A1 $\\times$" in tex and "\\Delta$ NLL [95\\% CI]" in tex


def test_plot(sweep):
    top, _ = sweep
    assert_figure(str(top / "table3"))


def test_row_result_file_format(sweep):
    top, truth = sweep
    with h5py.File(top / "results" / "base.h5", "r") as f:
        a = f.attrs
        assert a["format"] == "transformer-row-result" and a["row"] == "base" and a["status"] == "done"
        for k in ("config", "params", "train_steps", "dev_loss", "dev_ppl", "dev_bleu", "wall_seconds",
                  "paper_ppl", "paper_bleu", "paper_params_m"):
            assert k in a, k
        assert "d_model = 16" in a["config"]
        if truth["base"]["metrics"]:
            assert a["wall_seconds"] > 0
    with h5py.File(top / "results" / "C4.h5", "r") as f:
        assert f.attrs["status"] == "failed" and math.isnan(f.attrs["dev_ppl"])


def test_pending_rows_without_configs_dir_and_rows_only_in_results(sweep, tmp_path):
    top, _ = sweep
    # no configs: only the rows with result files, still in order
    cli("table3.py", top, "--configs", tmp_path, "--out", tmp_path / "t", "--no-plot")
    with open(tmp_path / "t.csv") as f:
        assert [r["row"] for r in csv.DictReader(f)] == ["base", "A1", "C1", "C4"]


def test_errors(sweep, tmp_path):
    top, _ = sweep
    script("table3.py", tmp_path / "missing", expect=2)
    bad = tmp_path / "bad"
    (bad / "results").mkdir(parents=True)
    (bad / "results" / "x.h5").write_text("not hdf5\n")
    assert "x.h5: not an HDF5 file" in cli_error("table3.py", bad, "--configs", tmp_path)
    with h5py.File(bad / "results" / "x.h5", "w") as f:  # an HDF5 file that is not a row result
        f["step"] = [1, 2, 3]
    assert "not a Table 3 row result" in cli_error("table3.py", bad, "--configs", tmp_path)
    empty = tmp_path / "empty"
    (empty / "results").mkdir(parents=True)
    assert "nothing to tabulate" in cli_error("table3.py", empty, "--configs", empty)
    cfg = top / "configs" / "base.cfg"
    p = script("row_result.py", "--out", tmp_path / "r.h5", "--config", cfg, "--status", "done", expect=2)
    assert "dev PPL" in p.stderr and not (tmp_path / "r.h5").exists()
    assert "no such file" in cli_error("row_result.py", "--out", tmp_path / "r.h5", "--config", tmp_path / "nope.cfg").lower()
    assert "not a Table 3 row result" in cli_error("row_result.py", "--show", bad / "results" / "x.h5")
    # a broken metrics log: an error for a done row, ignored when recording a failure
    (tmp_path / "m.h5").write_text("truncated")
    assert "not an HDF5 file" in cli_error("row_result.py", "--out", tmp_path / "r.h5", "--config", cfg,
                                           "--dev-ppl", "5", "--metrics", tmp_path / "m.h5")
    cli("row_result.py", "--out", tmp_path / "r.h5", "--config", cfg, "--status", "failed",
        "--message", "killed", "--metrics", tmp_path / "m.h5")
    with h5py.File(tmp_path / "r.h5", "r") as f:
        assert f.attrs["status"] == "failed" and f.attrs["message"] == "killed"


def test_sacrebleu_from_hypotheses(tmp_path, sweep):
    top, _ = sweep
    ref = tmp_path / "ref.txt"
    ref.write_text("the cat sat on the mat .\na dog runs in the park .\n")
    cli("row_result.py", "--out", tmp_path / "same.h5", "--row", "base", "--dev-ppl", "5",
           "--hyp", ref, "--ref", ref)
    with h5py.File(tmp_path / "same.h5", "r") as f:
        assert f.attrs["dev_bleu"] == pytest.approx(100.0)
        assert "13a" in f.attrs["bleu_signature"]
        assert f.attrs["dev_bleu_tok"] == pytest.approx(100.0)
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("the cat sat on a mat .\nthe dog runs in the park .\n")
    cli("row_result.py", "--out", tmp_path / "part.h5", "--row", "base", "--dev-ppl", "5",
           "--hyp", hyp, "--ref", ref)
    with h5py.File(tmp_path / "part.h5", "r") as f:
        assert 0 < f.attrs["dev_bleu"] < 100
        part, part_tok = f.attrs["dev_bleu"], f.attrs["dev_bleu_tok"]
    p = script("bleu.py", hyp, ref)
    assert p.stdout.startswith(f"sacreBLEU {part:.2f} ") and "signature: nrefs:1|" in p.stdout
    assert f"tokenised BLEU {part_tok:.2f} " in p.stdout
    hyp.write_text("one line only\n")
    assert "1 lines but the reference" in cli_error("row_result.py", "--out", tmp_path / "x.h5", "--row", "b",
                                                    "--dev-ppl", "5", "--hyp", hyp, "--ref", ref)
    assert not os.path.exists(tmp_path / "x.h5")


def test_every_script_has_help():
    for name in ("table3.py", "row_result.py", "attention.py", "curves.py", "bleu.py"):
        p = script(name, "--help", own_process=True)   # each runs as an executable
        assert p.stdout.startswith("usage: ") and ("--out" in p.stdout or name == "bleu.py"), name


def test_pending_rows_show_the_sweeps_overrides(tmp_path):
    """Rows not yet run show the settings the sweep will run them with:
    sweep.env written by jobs/table3-stages.sh (table3_prepare), overrides as
    its table3_overrides computes them (cross-checked row by row)."""
    import subprocess

    from table3 import read_sweep_env, sweep_overrides
    from row_result import parse_config_text

    cfgdir = tmp_path / "configs-src"
    cfgdir.mkdir()
    write_cfg(cfgdir / "base.cfg", **dict(TINY, row="base"))
    write_cfg(cfgdir / "C5.cfg", **dict(TINY, row="C5", d_model="64", d_k="3", d_v="32"))
    sweep = tmp_path / "sweep"
    env = dict(os.environ, TRANSFORMER_HOME=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
               TABLE3_DIR=str(cfgdir), STEPS="7", SHRINK="4", MAX_TOKENS="300", DATA="synthetic",
               EXTRA="label_smoothing=0.2 n_layers=3")
    stages = os.path.join(env["TRANSFORMER_HOME"], "jobs", "table3-stages.sh")
    bash = subprocess.run(["bash", "-c", f'. "{stages}"; table3_prepare "$1"; . "$SWEEP/sweep.env"; '
                           'for r in "${ROWS[@]}"; do table3_overrides "$SWEEP/configs/$r.cfg"; '
                           'echo "$r ${OVR[*]}"; done', "-", str(sweep)],
                          env=env, capture_output=True, text=True, check=True).stdout
    senv = read_sweep_env(str(sweep))
    assert senv["EXTRA"] == "label_smoothing=0.2 n_layers=3" and senv["UPDATE_FREQ"] == ""
    for line in bash.splitlines():
        row, *ovr = line.split(" ", 1)
        cfg = parse_config_text((sweep / "configs" / f"{row}.cfg").read_text())
        assert " ".join(f"{k}={v}" for k, v in sweep_overrides(senv, cfg)) == ovr[0], row
    cli("table3.py", sweep, "--no-plot")
    rows = {r["row"]: r for r in read_csv(sweep)}
    assert rows["base"]["status"] == rows["C5"]["status"] == "pending"
    for name, (d_model, d_ff, d_k, d_v) in {"base": (4, 8, 2, 2), "C5": (16, 8, 1, 8)}.items():
        r = rows[name]
        assert (int(r["d_model"]), int(r["d_ff"]), int(r["d_k"]), int(r["d_v"])) == (d_model, d_ff, d_k, d_v)
        assert (r["train_steps"], r["label_smoothing"], r["n_layers"]) == ("7", "0.2", "3")
    # the Markdown table: C5 differs from base in d_model, d_k, d_v only
    c5 = [l for l in (sweep / "table3.md").read_text().splitlines() if l.startswith("| C5 ")][0]
    assert [c.strip() for c in c5.strip("|").split("|")][1:11] == ["", "16", "", "", "1", "8", "", "", "", ""]


def test_scaled_schedule_and_seed_rows(tmp_path):
    """A short sweep (STEPS < 100000) warms every row up over a fifth of its
    steps at the paper's peak rate for its d_model (eq. 3: d_model^-0.5 *
    4000^-0.5), computed alike by the shell and by table3.py; SEEDS=3 adds
    base-seed2/3, and the table's notes give their spread."""
    import statistics
    import subprocess

    from table3 import read_sweep_env, sweep_overrides
    from row_result import parse_config_text

    cfgdir = tmp_path / "configs-src"
    cfgdir.mkdir()
    write_cfg(cfgdir / "base.cfg", **dict(TINY, row="base", warmup="4000", lr_factor="1", seed="1"))
    write_cfg(cfgdir / "big.cfg", **dict(TINY, row="big", warmup="4000", lr_factor="2"))
    sweep = tmp_path / "sweep"
    home = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    env = dict(os.environ, TRANSFORMER_HOME=home, TABLE3_DIR=str(cfgdir), STEPS="3000", SEEDS="3",
               DATA="synthetic")
    stages = os.path.join(home, "jobs", "table3-stages.sh")
    bash = subprocess.run(["bash", "-c", f'. "{stages}"; table3_prepare "$1"; . "$SWEEP/sweep.env"; '
                           'for r in "${ROWS[@]}"; do table3_overrides "$SWEEP/configs/$r.cfg"; '
                           'echo "$r ${OVR[*]}"; done', "-", str(sweep)],
                          env=env, capture_output=True, text=True, check=True).stdout
    senv = read_sweep_env(str(sweep))
    rows = dict(line.split(" ", 1) for line in bash.splitlines())
    assert sorted(rows) == ["base", "base-seed2", "base-seed3", "big"]
    for row, ovr in rows.items():
        cfg = parse_config_text((sweep / "configs" / f"{row}.cfg").read_text())
        assert " ".join(f"{k}={v}" for k, v in sweep_overrides(senv, cfg)) == ovr, row
        o = dict(w.split("=") for w in ovr.split())
        assert o["warmup"] == "600"
        peak = float(o["lr_factor"]) * 600 ** -0.5
        paper = float(cfg.get("lr_factor", 1)) * 4000 ** -0.5
        assert abs(peak / paper - 1) < 1e-5, row
        if row.startswith("base-seed"):
            assert (cfg["row"], cfg["seed"]) == (row, row[-1])
    for k, v in (("WARMUP", "100"), ("STEPS", "100000")):  # WARMUP alone; the paper's steps: no scaling
        e = dict(senv, **{k: v})
        ovr = dict(sweep_overrides(e, {"warmup": "4000"}))
        assert ovr.get("warmup") == ("100" if k == "WARMUP" else None) and "lr_factor" not in ovr
    # three base seeds: one row, the mean NLL (log space) and every seed's
    ppl = {"base": 10.0, "base-seed2": 11.0, "base-seed3": 13.0}
    for row, p in ppl.items():
        script("row_result.py", "--out", sweep / "results" / f"{row}.h5", "--config", sweep / "configs" / f"{row}.cfg",
               "--params", 100, "--dev-ppl", p, "--dev-loss", 2.0, "--steps", 3000, "--dev-bleu", p,
               "--dev-bleu-tok", p)
    cli("table3.py", sweep, "--no-plot")
    md = (sweep / "table3.md").read_text()
    nlls = [math.log(p) for p in ppl.values()]
    line = [l for l in md.splitlines() if l.startswith("| base |")][0]
    assert f"| 3/3 | {statistics.mean(nlls):.3f} | {math.exp(statistics.mean(nlls)):.2f} | " in line, line
    assert ", ".join(f"{v:.3f}" for v in nlls) in line
    assert "`STEPS=3000`" in md and "warmup over 600 steps" in md


def _healthy(s):
    """A dev NLL curve like the Multi30k pilot's (6.0 at step 100, about 3.0 at the end)."""
    return 3.0 + 3.4 * math.exp(-s / 300)


PLATEAU = 5.25  # PPL 190: where the old sweep's stuck runs sat (unigram NLL 5.94 on its data)
PLANTED = {  # row -> (dev NLL curve, training loss curve or None, expected verdict, words in the reason)
    "healthy": (_healthy, None, "healthy", "dev NLL"),
    "overfit": (lambda s: _healthy(min(s, 900)) + max(0, s - 900) * 0.0006, lambda s: _healthy(s) + 0.5,
                "healthy", "overfitting"),
    "nan": (lambda s: _healthy(s) if s < 700 else math.nan, lambda s: _healthy(s) if s < 650 else math.nan,
            "diverged", "non-finite training loss at step 650"),
    "blowup": (lambda s: _healthy(s) if s <= 600 else min(9.5, _healthy(600) + (s - 600) * 0.02),
               lambda s: _healthy(s) + 0.6 if s <= 600 else 7.5, "diverged", "above its minimum"),
    "stuck": (lambda s: max(PLATEAU, 6.0 - s / 200), None, "stuck", "only 0.69 nats below the unigram NLL 5.940"),
    "above": (lambda s: 6.5, None, "stuck", "0.56 nats above the unigram NLL 5.940"),
    "late": (lambda s: PLATEAU if s < 600 else max(4.1, PLATEAU - (s - 600) / 300), None, "stuck", "step 500"),
    "spike": (lambda s: _healthy(s) + (0.3 if s == 1000 else 0.15 if s > 1000 else 0),
              lambda s: _healthy(s) + 0.6 + (0.4 if 950 <= s <= 1050 else 0), "unstable", "step 1000"),
}


@pytest.mark.parametrize("row", PLANTED)
def test_planted_verdicts(row, tmp_path, capsys):
    """Curves planted in metrics.h5 files (the trainer's format): row_result.py
    judges each when it writes the result file; --verdict prints it."""
    dev, train, want, words = PLANTED[row]
    m = write_metrics(tmp_path / "run" / "metrics.h5", dev, train)
    out = tmp_path / f"{row}.h5"
    args = ["--out", out, "--row", row, "--set", "train_steps=1200", "--metrics", m, "--compute", "unigram_nll=5.94"]
    if row in ("nan", "blowup"):
        args += ["--status", "failed", "--dev-ppl", "nan"]
    cli("row_result.py", *args)
    capsys.readouterr()
    cli("row_result.py", "--verdict", out)
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and line.split(" ", 1)[0] == want, line
    assert words in line, line
    with h5py.File(out, "r") as f:
        assert f.attrs["verdict"] == want and f.attrs["format_version"] == 2
        assert f["curves/dev_nll"].dtype == "float32" and f["curves/dev_nll"].compression == "gzip"
        assert len(f["curves/train_loss"]) == 24 and len(f["curves/dev_step"]) == 12


def test_stuck_without_unigram_uses_the_first_evaluation(tmp_path, capsys):
    m = write_metrics(tmp_path / "metrics.h5", PLANTED["stuck"][0])
    cli("row_result.py", "--out", tmp_path / "s.h5", "--row", "s", "--metrics", m)
    capsys.readouterr()
    cli("row_result.py", "--verdict", tmp_path / "s.h5")
    assert capsys.readouterr().out.startswith("stuck ")
    m = write_metrics(tmp_path / "metrics.h5", _healthy)
    cli("row_result.py", "--out", tmp_path / "h.h5", "--row", "h", "--metrics", m)
    cli("row_result.py", "--verdict", tmp_path / "h.h5")
    assert capsys.readouterr().out.startswith("healthy ")


def test_verdict_of_a_run_the_trainer_stopped(tmp_path, capsys):
    """The trainer stops before logging a non-finite loss: its message, not
    the curves, says the run diverged. Empty --compute values are unknowns."""
    m = write_metrics(tmp_path / "metrics.h5", _healthy, steps=300)
    msg = "train: error: step 301: the training loss is nan (not finite): training stopped"
    cli("row_result.py", "--out", tmp_path / "d.h5", "--row", "d", "--set", "train_steps=1200", "--metrics", m,
        "--status", "failed", "--message", msg, "--compute", "threads=", "--compute", "host_cpu=")
    capsys.readouterr()
    cli("row_result.py", "--verdict", tmp_path / "d.h5")
    assert capsys.readouterr().out == f"diverged {msg}\n"
    with h5py.File(tmp_path / "d.h5", "r") as f:
        assert f.attrs["threads"] == -1 and f.attrs["host_cpu"] == ""
    assert "threads: 'two' is not an integer" in cli_error("row_result.py", "--out", tmp_path / "e.h5", "--row", "e", "--dev-ppl", "5",
                                    "--compute", "threads=two")
    assert "KEY one of" in cli_error("row_result.py", "--out", tmp_path / "e.h5", "--row", "e", "--dev-ppl", "5",
                                     "--compute", "gpus=2")


def test_tokens_seen_logged_or_from_the_rate(tmp_path):
    """tokens_seen: /train/tokens where logged, tokens/s x interval where a
    row has NaN (a log begun by an older version); epochs and FLOPs from it."""
    import numpy as np

    def seen(**kw):
        m = write_metrics(tmp_path / "metrics.h5", _healthy, steps=200, **kw)  # 4 log rows of 50 steps, 15 s
        cli("row_result.py", "--out", tmp_path / "r.h5", "--row", "r", "--metrics", m,
            "--compute", "epoch_tokens=1000", "--compute", "threads=0",
            "--set", "n_layers=1", "--set", "d_model=4", "--set", "d_ff=8", "--set", "n_heads=2",
            "--set", "d_k=2", "--set", "d_v=2", "--set", "vocab_size=10", "--compute", "mean_len=5")
        with h5py.File(tmp_path / "r.h5", "r") as f:
            return {k: f.attrs[k] for k in ("tokens_seen", "epochs", "matrix_params", "train_flops", "threads")}

    assert seen()["tokens_seen"] == pytest.approx(4 * 6000 * 15)  # rate x time only
    got = seen(tokens=[100.0, 200.0, np.nan, 400.0])
    assert got["tokens_seen"] == pytest.approx(700 + 6000 * 15) and got["epochs"] == pytest.approx(got["tokens_seen"] / 1000)
    # 1 layer, d_model 4, d_ff 8, h 2, d_k = d_v = 2, V 10: attention 4*2*6 + 2*2*4 = 64, FFN 64,
    # encoder 128 + decoder 192 + output 40 = 360; attention FLOPs 18 * 1 * 2 * 4 * 5 = 720 per token
    assert got["matrix_params"] == 360 and got["train_flops"] == pytest.approx((6 * 360 + 720) * got["tokens_seen"])
    assert got["threads"] == -1  # threads=0: not known


def test_verdict_thresholds_are_the_module_constants():
    """A late dev rise just over / under UNSTABLE_DEV_NATS, with the training loss rising too."""
    import numpy as np

    import verdict as v

    steps = np.arange(100, 1201, 100.0)
    base = np.array([_healthy(s) for s in steps])
    for extra, want in ((v.UNSTABLE_DEV_NATS + 0.02, "unstable"), (v.UNSTABLE_DEV_NATS - 0.02, "healthy")):
        dev = base.copy()
        dev[-1] = dev[:-1].min() + extra
        ts = np.arange(50, 1201, 50.0)
        tl = np.array([_healthy(s) + 0.6 for s in ts])
        tl[-3:] += 0.5
        c = {"train_step": ts, "train_loss": tl, "dev_step": steps, "dev_loss": dev + 0.5, "dev_nll": dev}
        assert v.verdict(c, 5.94, 1200)[0] == want, (extra, v.verdict(c, 5.94, 1200))
    dev = base.copy()
    dev[-1] = dev[:-1].min() + v.DIVERGE_DEV_NATS + 0.01
    c = {"train_step": steps, "train_loss": base + 0.6, "dev_step": steps, "dev_loss": dev, "dev_nll": dev}
    assert v.verdict(c, 5.94, 1200)[0] == "diverged"
    assert v.verdict({}, None, None)[0] == "unknown"


def _ending_at(final):
    """A healthy dev NLL curve (pilot-like) that ends at `final` nats at step 1200."""
    return lambda s: final + 3.4 * (math.exp(-s / 300) - math.exp(-4))


# row -> (paper PPL, final dev NLL per run); names as jobs/table3-stages.sh gives them
PROTOCOL_ROWS = {
    "base": (4.92, {"base": 3.00, "base-seed2": 3.02, "base-seed3": 2.99}),
    "D4": (5.47, {"D4": 3.20, "D4-seed2": 3.22}),          # planted +0.2 nats; the paper: up
    "A3": (4.91, {"A3": 3.01, "A3-seed2": 2.99, "A3-seed3": 3.005}),  # null; the paper: ≈
    "D3": (4.67, {"D3": 2.85, "D3-seed2": 2.86}),          # planted -0.15; the paper: down
    "B1": (5.16, {"B1": 2.90, "B1-seed2": 2.91}),          # planted -0.1; the paper: up
    "C3": (4.88, {"C3": None, "C3-rerun": 3.00}),          # diverged, then a healthy rerun
}


def _noisy(refs, keep, seed):
    import random

    rng = random.Random(seed)
    words = "ein eine der die das mann frau hund läuft steht rot blau".split()
    return [" ".join(w if rng.random() < keep else rng.choice(words) for w in r.split()) for r in refs]


@pytest.fixture(scope="module")
def protocol_sweep(tmp_path_factory):
    """A sweep of result files as the new protocol writes them: curves in
    metrics.h5, test2016 hypotheses, seeds and a rerun."""
    import random

    top = tmp_path_factory.mktemp("protocol")
    (top / "configs").mkdir()
    rng = random.Random(7)
    words = "ein mann eine frau hund läuft sitzt auf dem der die im park straße wasser".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 12))) for _ in range(150)]
    (top / "ref.txt").write_text("\n".join(refs) + "\n")
    base_hyp = _noisy(refs, 0.8, 1)
    for row, (paper, runs) in PROTOCOL_ROWS.items():
        for k, (run, final) in enumerate(runs.items()):
            cfg = write_cfg(top / "configs" / f"{run}.cfg", **dict(TINY, row=run, paper_ppl=paper,
                                                                    train_steps=1200, seed=k + 1))
            curve = _ending_at(final) if final else (lambda s: 3.5 if s < 700 else 9.0)
            m = write_metrics(top / "runs" / run / "metrics.h5", curve)
            hyp = base_hyp if row in ("base", "A3") else _noisy(refs, 0.5 if row == "D4" else 0.75, 10 + k)
            (top / f"{run}.hyp").write_text("\n".join(hyp) + "\n")
            cli("row_result.py", "--out", top / "results" / f"{run}.h5", "--config", cfg, "--metrics", m,
                "--hyp-set", "test2016.final", top / f"{run}.hyp", top / "ref.txt",
                "--compute", "device=cpu", "--compute", "threads=1", "--compute", "lr_rule=fixed peak 1e-3",
                "--compute", "unigram_nll=5.94")
    cli("table3.py", top)
    with open(top / "table3-rows.csv") as f:
        lines = f.read().splitlines()
    rows = {r["row"]: r for r in csv.DictReader(l for l in lines if not l.startswith("#"))}
    return top, rows, lines[-1]


def test_protocol_planted_effects(protocol_sweep):
    """Δ dev NLL intervals: the planted +0.2 excludes 0 (and is positive),
    the null row includes 0 and is reported as an equivalence bound."""
    _, rows, _ = protocol_sweep
    d4, a3 = rows["D4"], rows["A3"]
    base = statistics.mean([3.00, 3.02, 2.99])
    assert float(d4["d_nll"]) == pytest.approx(3.21 - base, abs=1e-4)
    assert 0 < float(d4["lo"]) < 0.2 < float(d4["hi"]) and d4["ours_dir"] == "up"
    assert float(a3["lo"]) < 0 < float(a3["hi"]) and a3["ours_dir"] == "≈"
    assert float(a3["equiv"]) == pytest.approx(max(-float(a3["lo"]), float(a3["hi"])))
    assert rows["D3"]["ours_dir"] == "down" and float(rows["D3"]["hi"]) < 0
    assert rows["base"]["n_used"] == "3" and rows["base"]["d_nll"] == ""


def test_protocol_bootstrap_and_holm(protocol_sweep):
    _, rows, _ = protocol_sweep
    a3, d4 = rows["A3"], rows["D4"]
    # identical hypotheses: Δ BLEU 0, p = 1; much worse ones: a significant negative Δ
    assert a3["bleu_set"] == "test2016.final" and float(a3["d_bleu"]) == 0 and float(a3["bleu_p"]) == 1
    assert float(d4["d_bleu"]) < -5 and float(d4["bleu_hi"]) < 0 and float(d4["bleu_p"]) < 0.01
    for r in rows.values():
        if r["p"]:
            assert float(r["p_holm"]) >= float(r["p"])


def test_protocol_agreement_and_rank_correlation(protocol_sweep):
    _, rows, spearman = protocol_sweep
    assert [rows[r]["paper_dir"] for r in ("D4", "A3", "D3", "B1", "C3")] == ["up", "≈", "down", "up", "≈"]
    assert rows["D4"]["agree"] == "yes" and rows["D3"]["agree"] == "yes" and rows["A3"]["agree"] == "yes"
    assert rows["B1"]["agree"] == "no"  # a significant effect the other way
    rho = float(spearman.split()[2])
    assert rho > 0.5 and spearman.endswith("over 5 rows")


def test_protocol_failed_run_and_its_rerun(protocol_sweep):
    top, rows, _ = protocol_sweep
    c3 = rows["C3"]
    assert (c3["n_runs"], c3["n_used"], c3["pooled"]) == ("2", "1", "1")  # the rerun alone, base's spread
    md = (top / "table3.md").read_text()
    compare, held_out, runs = md_tables(md)
    assert compare["C3 ✗"]["per run (nats)"].startswith(f"{math.log(math.exp(9.0)):.3f} ✗diverged, rerun 3.000")
    assert compare["C3 ✗"]["Δ NLL vs base [95% CI]"].endswith("†") and "† one healthy seed" in md
    names = list(runs)
    assert names[names.index("C3") + 1] == "C3-rerun" and runs["C3"]["verdict"] == "diverged"
    assert (runs["C3"]["seed"], runs["C3-rerun"]["seed"]) == ("1", "2 (rerun)")  # the configs' seeds
    assert names[:3] == ["base", "base-seed2", "base-seed3"]
    assert runs["D4"]["device"] == "cpu" and float(runs["D4"]["tokens ×10⁶"]) == pytest.approx(6000 * 360 / 1e6)
    assert md.count("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:") == 1
    assert "fixed peak 1e-3" in md and "1000 resamples" in md
    assert "Base: 3 healthy seeds, dev NLL s.d. 0.015 nats, range 0.030 nats: within the protocol's tolerance" in md
    assert_figure(str(top / "table3"))


def test_agreement_rules():
    from compare import agreement, direction

    assert direction(0.01, 0.2) == "up" and direction(-0.2, -0.01) == "down" and direction(-0.1, 0.1) == "≈"
    assert direction(None, None, 0.05) == "up" and direction(None, None, -0.03) == "≈"
    assert agreement("up", 0.1, "up") == "yes" and agreement("down", -0.1, "down") == "yes"
    assert agreement("up", 0.05, "≈") == "sign" and agreement("up", -0.05, "≈") == "no (n.s.)"
    assert agreement("up", -0.1, "down") == "no" and agreement("≈", 0.1, "up") == "no"
    assert agreement("≈", 0.01, "≈", 0.03) == "yes" and agreement("–", 0.1, "up") == "–"
    # both ≈, but our interval reaches past the paper's ≈ threshold: open, not yes
    assert agreement("≈", 0.01, "≈", 0.041) == "open" and agreement("≈", 0.2, "≈", 0.49) == "open"
    assert agreement("≈", 0.01, "≈") == "open"   # no interval: no equivalence shown
    # the paper ≈ and ours significant but small: the same ±0.04-nat band
    # decides both sides (E's 3 seeds: +0.014 [+0.001, +0.026])
    assert agreement("≈", 0.014, "up", 0.026) == "yes" and agreement("≈", -0.02, "down", 0.04) == "yes"
    assert agreement("≈", 0.03, "up", 0.041) == "no" and agreement("≈", 0.08, "up", 0.09) == "no"


def test_version_1_run_stopped_by_patience_is_judged_with_its_steps(tmp_path):
    """table3.py judges a version 1 file's run from its metrics.h5 as
    row_result.py would: with the log's stop and best steps (a stop by
    patience is judged over the steps it ran, and its reason says so)."""
    sweep = tmp_path / "old"
    (sweep / "results").mkdir(parents=True)
    for row, ppl in (("base", 26.34), ("base-seed2", 27.58)):
        with h5py.File(sweep / "results" / f"{row}.h5", "w") as f:
            for k, v in (("format", "transformer-row-result"), ("row", row), ("status", "done"), ("message", ""),
                         ("config", f"row = {row}\nd_model = 64\ntrain_steps = 3000\n")):
                f.attrs.create(k, v, dtype=h5py.string_dtype("utf-8"))
            f.attrs["format_version"] = 1
            f.attrs["dev_ppl"], f.attrs["train_steps"], f.attrs["params"] = ppl, 1200, 824000
    m = sweep / "runs" / "base" / "metrics.h5"
    write_metrics(m, _healthy)
    with h5py.File(m, "r+") as f:
        f.attrs.create("stopped_by", "patience", dtype=h5py.string_dtype("utf-8"))
        f.attrs["stop_step"], f.attrs["best_step"] = 1200, 1100
    cli("table3.py", sweep, "--configs", tmp_path, "--out", tmp_path / "judged", "--no-plot")
    with open(tmp_path / "judged.csv") as f:
        runs = {r["row"]: r for r in csv.DictReader(f)}
    assert "stopped by patience at step 1200 (best step 1100," in runs["base"]["verdict_reason"], runs["base"]


def test_version_1_sweep_still_tabulates(tmp_path):
    """A sweep written before format 2 (attributes only, no verdict): its
    runs count, in log space, and --verdict says unknown."""
    import io
    from contextlib import redirect_stdout

    sweep = tmp_path / "old"
    (sweep / "results").mkdir(parents=True)
    for row, ppl in (("base", 26.34), ("base-seed2", 27.58), ("base-seed3", 62.85), ("A1", 21.20)):
        with h5py.File(sweep / "results" / f"{row}.h5", "w") as f:  # as row_result.py version 1 wrote them
            for k, v in (("format", "transformer-row-result"), ("row", row), ("status", "done"), ("message", ""),
                         ("config", f"row = {row}\nd_model = 64\npaper_ppl = {5.29 if row == 'A1' else 4.92}\n"),
                         ("created", "2026-11-24T02:19:00Z")):
                f.attrs.create(k, v, dtype=h5py.string_dtype("utf-8"))
            f.attrs["format_version"] = 1
            f.attrs["dev_ppl"], f.attrs["train_steps"], f.attrs["params"] = ppl, 3000, 824000
    cli("table3.py", sweep, "--configs", tmp_path, "--no-plot")
    with open(sweep / "table3-rows.csv") as f:
        rows = {r["row"]: r for r in csv.DictReader(l for l in f if not l.startswith("#"))}
    assert rows["base"]["n_used"] == "3" and rows["A1"]["pooled"] == "1"
    # its run directories are still there: table3.py judges the curves itself
    write_metrics(sweep / "runs" / "base-seed3" / "metrics.h5", PLANTED["late"][0])
    write_metrics(sweep / "runs" / "base" / "metrics.h5", _healthy)
    cli("table3.py", sweep, "--configs", tmp_path, "--out", tmp_path / "judged")
    with open(tmp_path / "judged.csv") as f:
        runs = {r["row"]: r for r in csv.DictReader(f)}
    assert (runs["base"]["verdict"], runs["base-seed3"]["verdict"], runs["A1"]["verdict"]) == ("healthy", "stuck", "")
    assert "judged by table3.py from runs/base-seed3/metrics.h5" in runs["base-seed3"]["verdict_reason"]
    assert float(runs["base"]["tokens_seen"]) == pytest.approx(24 * 6000 * 15) and runs["A1"]["tokens_seen"] == ""
    assert f"{math.log(62.85):.3f} ✗stuck" in (tmp_path / "judged.md").read_text()
    assert float(rows["base"]["mean_nll"]) == pytest.approx(statistics.mean(map(math.log, (26.34, 27.58, 62.85))))
    assert rows["A1"]["paper_dir"] == "up" and rows["A1"]["ours_dir"] == "≈"  # base's spread swamps it
    assert "range 0.870 nats: OUTSIDE the protocol's tolerance" in (sweep / "table3.md").read_text()
    out = io.StringIO()
    with redirect_stdout(out):
        cli("row_result.py", "--verdict", sweep / "results" / "base.h5")
    assert out.getvalue().startswith("unknown ")


def test_one_dev_evaluation_is_too_short_to_judge():
    """A smoke test evaluated once, at its end, on the plateau: unknown (no
    rerun), unless it diverged; with a second evaluation it is judged."""
    import numpy as np
    import verdict as V

    one = {"train_step": [1, 2, 3], "train_loss": [6.3, 6.2, 6.1], "dev_step": [3], "dev_nll": [6.1],
           "dev_loss": [6.3]}
    assert V.verdict(one, unigram_nll=4.74)[0] == "unknown"
    two = dict(one, dev_step=[2, 3], dev_nll=[6.2, 6.1], dev_loss=[6.4, 6.3])
    assert V.verdict(two, unigram_nll=4.74)[0] == "stuck"
    bad = dict(one, dev_nll=[np.nan])
    assert V.verdict(bad, unigram_nll=4.74)[0] == "diverged"


def test_length_ratio_and_brevity_penalty(tmp_path):
    """A run whose hypotheses drop the last word of each reference: the
    ratio is (words - 1)/words summed over the sentences, its BP
    exp(1 - 1/ratio), by hand; a run equal to the references has 1 and 1."""
    from compare import length_ratio
    from row_result import read_result

    refs = ["ein mann läuft im park", "eine frau sitzt auf dem stuhl", "der hund"]
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    (tmp_path / "short.txt").write_text("\n".join(r.rsplit(" ", 1)[0] for r in refs) + "\n")
    runs = []
    for name, hyp in (("same", "ref.txt"), ("short", "short.txt")):
        cli("row_result.py", "--out", tmp_path / f"{name}.h5", "--row", name, "--dev-ppl", "5",
            "--hyp-set", "test2016.final", tmp_path / hyp, tmp_path / "ref.txt")
        runs.append(read_result(str(tmp_path / f"{name}.h5")))
    assert length_ratio(runs[:1]) == pytest.approx((1.0, 1.0))
    ratio = (4 + 5 + 1) / (5 + 6 + 2)
    assert length_ratio(runs[1:]) == pytest.approx((ratio, math.exp(1 - 1 / ratio)))
    assert length_ratio(runs) == pytest.approx(((1 + ratio) / 2, (1 + math.exp(1 - 1 / ratio)) / 2))
    assert all(math.isnan(x) for x in length_ratio([{"hyp_sets": []}]))


COMMITTED = ("table3.md", "table3.csv", "table3-rows.csv", "table3.tex")


def _committed_sweep():
    from conftest import ROOT
    sweep = os.path.join(ROOT, "docs", "results-multi30k", "sweep")
    if not os.path.isdir(os.path.join(sweep, "results")):
        pytest.skip("no committed sweep in docs/results-multi30k/sweep")
    return ROOT, sweep


EMBEDDED_8_EPOCH = ("Rows against base (dev set, log space):", "![dev NLL curves per group]", 40)


def _rebuild_differences(sweep, rebuilt, page_path, names=COMMITTED, embedded=EMBEDDED_8_EPOCH):
    """What differs between the committed table files NAMES in SWEEP and
    those table3.py rebuilt into REBUILT, and the results page's embedded
    rows (between EMBEDDED's two markers, more than its count of them)
    that are not lines of the table: a list of messages, empty when equal.
    Text equality throughout: the CSVs hold floats at the precision the
    table means (table3.CSV_DIGITS), so a last-place difference of numpy's
    SIMD sums between CPUs does not reach them (issue 41)."""
    diffs, committed = [], {}
    for name in names:
        with open(os.path.join(rebuilt, name)) as f, open(os.path.join(sweep, name)) as g:
            committed[name], new = g.read(), f.read()
        if new != committed[name]:
            line = next(i for i, (a, b) in enumerate(zip(new.splitlines() + [""], committed[name].splitlines() + [""]))
                        if a != b)
            diffs.append(f"{name}: rebuilding from the committed result files changes line {line + 1}")
    with open(page_path) as f:
        page = f.read()
    start, end, least = embedded
    if start not in page or end not in page:
        return diffs + [f"{page_path}: no embedded table between '{start}' and '{end}'"]
    embedded = page[page.index(start):page.index(end)]
    generated = set(committed["table3.md"].splitlines())
    rows = [line for line in embedded.splitlines() if line.startswith("|")]
    if len(rows) <= least:
        diffs.append(f"{page_path}: only {len(rows)} embedded table lines")
    diffs += [f"{page_path}: not a line of table3.md: {line}" for line in rows if line not in generated]
    return diffs


@pytest.fixture(scope="module")
def rebuilt_table(tmp_path_factory):
    _, sweep = _committed_sweep()
    out = tmp_path_factory.mktemp("rebuilt")
    script("table3.py", sweep, "--configs", os.path.join(sweep, "configs"), "--out", out / "table3", "--no-plot")
    return out


def test_committed_table_rebuilds_from_its_result_files(rebuilt_table):
    """docs/results-multi30k: the committed table is what table3.py makes of
    the committed result files with this code (issue 30's done-when), and
    the page embeds the generated rows unchanged, on any CPU (issue 41: the
    CSVs once carried numpy's last-place rounding)."""
    root, sweep = _committed_sweep()
    page = os.path.join(root, "docs", "results-multi30k.md")
    assert _rebuild_differences(sweep, rebuilt_table, page) == []


def _plant_digit(text, pattern):
    """TEXT with the last digit of PATTERN's first match changed (+1 mod 10)."""
    import re
    m = re.search(pattern, text)
    assert m, pattern
    k = m.end() - 1
    return text[:k] + str((int(text[k]) + 1) % 10) + text[k + 1:]


@pytest.mark.parametrize("name,pattern", [
    ("table3.md", r"\| C3 \|[^\n]*?\d\.\d{3}"),          # a shown dev NLL
    ("table3.csv", r"\nA4,[^\n]*?,done,[^\n]*?\d\.\d+"),  # a run's value, last digit
    ("table3-rows.csv", r"\nD2,[^\n]*?\d\.\d+"),
    ("table3.tex", r"\d\.\d{3}")])
def test_committed_table_check_fails_on_a_changed_digit(rebuilt_table, tmp_path, name, pattern):
    """The check above is not blind: one shown digit changed in a committed
    file (a planted copy of the sweep's table files) fails it."""
    import shutil
    root, sweep = _committed_sweep()
    for f in COMMITTED:
        shutil.copy(os.path.join(sweep, f), tmp_path / f)
    text = (tmp_path / name).read_text()
    (tmp_path / name).write_text(_plant_digit(text, pattern))
    diffs = _rebuild_differences(str(tmp_path), rebuilt_table, os.path.join(root, "docs", "results-multi30k.md"))
    assert diffs and diffs[0].startswith(f"{name}: rebuilding"), diffs
