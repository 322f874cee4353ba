"""table3.py --protocol converged on a planted sweep of matched seeds: the
pooled interval, the paired differences, Holm, the band's counts, rho's
permutation p and bootstrap interval, the Δ over training and how each run
stopped, each against a computation written here from the protocol's text
(docs/results-multi30k/converged/protocol.md, "Analysis plan").  Tolerances,
not float equality: the tests run again with NPY_DISABLE_CPU_FEATURES."""

import csv
import itertools
import math
import os
import random
import re

import h5py
import numpy as np
import pytest

from conftest import TINY, cli, write_cfg, write_metrics

import compare
import table3

BASE_PPL = 4.92
SEED_EFFECT = {1: 0.0, 2: 0.012, 3: -0.009}
# row -> (the paper's Δ in nats, our planted Δ, amplitude of the curve's early drop,
#         seeds, the step each seed's run ended at)
ROWS = {
    "base": (0.0, 0.0, 3.4, (1, 2, 3), 1200),
    "A1": (0.10, 0.20, 3.0, (1, 2, 3), 1200),     # the paper up, ours up: yes at every band
    "B1": (0.045, 0.18, 3.4, (1, 2, 3), 1200),    # the paper up at 0.03/0.04, ≈ at 0.05
    "C1": (-0.10, 0.15, 3.8, (1, 2, 3), 1200),    # the opposite way: no
    "D1": (0.035, 0.002, 3.4, (1, 2), 900),       # 2 seeds: outside the pooled variance; stopped early
    "E": (0.0, -0.012, 3.4, (1, 2, 3), 1200),     # the paper level
    "C3": (0.06, 0.07, 2.6, (1, 2, 3), 1200),
}
# a run's own noise: fixed, so that the residual variance is known
NOISE = dict(zip(((r, s) for r in ROWS for s in (1, 2, 3)),
                 [0.004, -0.003, -0.001, 0.002, 0.005, -0.006, -0.004, 0.001, 0.003, 0.006, -0.002, -0.005,
                  0.003, -0.004, 0.0, -0.001, 0.002, -0.003, 0.005, -0.005, 0.001]))
CAP_RUN = "C3-seed3"  # reached the step cap still improving: not converged


def run_name(row, seed):
    return row if seed == 1 else f"{row}-seed{seed}"


def final_nll(row, seed):
    return 3.0 + ROWS[row][1] + SEED_EFFECT[seed] + NOISE[(row, seed)]


def best_step(row, seed):
    """Where the run's dev NLL is lowest: its last step at the cap, else
    one evaluation (300 steps) before the stop by patience."""
    last = ROWS[row][4]
    return last if run_name(row, seed) == CAP_RUN else last - 300


def curve(row, seed):
    """The run's dev NLL as a function of the step: falling to final_nll at
    its best step, then 0.002 nats higher (what patience stopped on)."""
    amp, end, best = ROWS[row][2], final_nll(row, seed), best_step(row, seed)
    return lambda s: end + (amp * (math.exp(-s / 300) - math.exp(-best / 300)) if s <= best else 0.002)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    top = tmp_path_factory.mktemp("converged")
    (top / "configs").mkdir()
    rng = random.Random(3)
    words = "ein mann eine frau hund läuft sitzt auf dem der die im park straße wasser".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 12))) for _ in range(120)]
    (top / "ref.txt").write_text("\n".join(refs) + "\n")
    for k, (row, (paper_d, _, _, seeds, steps)) in enumerate(ROWS.items()):
        for seed in seeds:
            run = run_name(row, seed)
            cfg = write_cfg(top / "configs" / f"{run}.cfg", **dict(TINY, row=run, seed=seed, train_steps=1200,
                                                                   paper_ppl=BASE_PPL * math.exp(paper_d)))
            m = write_metrics(top / "runs" / run / "metrics.h5", curve(row, seed), steps=steps)
            with h5py.File(m, "a") as f:  # how the trainer says it ended (docs/metrics.md)
                if run == CAP_RUN:
                    f.attrs["stopped_by"], f.attrs["best_step"] = "train_steps", 1200
                else:
                    f.attrs["stopped_by"], f.attrs["stop_step"], f.attrs["best_step"] = "patience", steps, steps - 300
                assert f.attrs["best_step"] == best_step(row, seed)
            keep = 0.9 - 0.02 * k - 0.03 * seed
            hyp = [" ".join(w if rng.random() < keep else rng.choice(words) for w in r.split()) for r in refs]
            (top / f"{run}.hyp").write_text("\n".join(hyp) + "\n")
            # the job's dev PPL: `transformer eval` of the best checkpoint, printed to 3 decimals
            cli("row_result.py", "--out", top / "results" / f"{run}.h5", "--config", cfg, "--metrics", m,
                "--dev-ppl", f"{math.exp(final_nll(row, seed)):.3f}",
                "--hyp-set", "test2016.avg5", top / f"{run}.hyp", top / "ref.txt", "--compute", "unigram_nll=5.94")
    cli("table3.py", top, "--protocol", "converged")
    with open(top / "table3-rows.csv") as f:
        lines = f.read().splitlines()
    rows = {r["row"]: r for r in csv.DictReader(l for l in lines if not l.startswith("#"))}
    comments = [l for l in lines if l.startswith("#")]
    return top, rows, comments


def residual_variance(table):
    """The two-way ANOVA's residual mean square, by sums of squares:
    SS_total - SS_rows - SS_seeds over (R - 1)(S - 1)."""
    R, S = len(table), len(table[0])
    grand = sum(map(sum, table)) / (R * S)
    ss_total = sum((y - grand) ** 2 for row in table for y in row)
    ss_rows = S * sum((sum(row) / S - grand) ** 2 for row in table)
    ss_seeds = R * sum((sum(row[j] for row in table) / R - grand) ** 2 for j in range(S))
    return (ss_total - ss_rows - ss_seeds) / ((R - 1) * (S - 1)), (R - 1) * (S - 1)


T975 = {1: 12.706, 2: 4.303, 3: 3.182, 10: 2.228, 12: 2.179, 8: 2.306}  # two-sided 95% t, textbook tables


def pooled_expectation(values, row):
    """(Δ, half-width, pairs, df) of row against base from {row: {seed: value}}."""
    complete = [r for r in values if set(values[r]) >= set(values["base"])]
    table = [[values[r][s] for s in sorted(values["base"])] for r in complete]
    var, df = residual_variance(table)
    d = [values[row][s] - values["base"][s] for s in sorted(set(values[row]) & set(values["base"]))]
    return sum(d) / len(d), T975[df] * math.sqrt(2 * var / len(d)), len(d), df


def nll_values():
    return {row: {s: final_nll(row, s) for s in ROWS[row][3]} for row in ROWS}


def test_pooled_interval_of_paired_differences(sweep):
    """Δ = the mean of the matched pairs; interval t_df sqrt(2σ²/S) with σ²
    of the six complete rows (df = 5 x 2 = 10); D1's two pairs use it too."""
    _, rows, comments = sweep
    for row in ROWS:
        if row == "base":
            continue
        d, half, pairs, df = pooled_expectation(nll_values(), row)
        assert df == 10
        r = rows[row]
        assert int(r["pairs"]) == pairs == len(ROWS[row][3])
        assert float(r["d_nll"]) == pytest.approx(d, abs=1e-5)
        assert float(r["lo"]) == pytest.approx(d - half, abs=2e-5) and float(r["hi"]) == pytest.approx(d + half, abs=2e-5)
    assert any(c.startswith("# pooled nll ") and c.endswith("df 10 rows 6 seeds 3") for c in comments)


def test_per_row_paired_t_interval(sweep):
    """Beside the pooled interval: the row's own paired t, df = pairs - 1."""
    _, rows, _ = sweep
    v = nll_values()
    for row in ("A1", "D1"):
        d = [v[row][s] - v["base"][s] for s in ROWS[row][3]]
        m, sd = sum(d) / len(d), math.sqrt(sum((x - sum(d) / len(d)) ** 2 for x in d) / (len(d) - 1))
        half = T975[len(d) - 1] * sd / math.sqrt(len(d))
        assert float(rows[row]["pt_lo"]) == pytest.approx(m - half, abs=1e-3 * max(half, 1e-3) + 2e-5)
        assert float(rows[row]["pt_hi"]) == pytest.approx(m + half, abs=1e-3 * max(half, 1e-3) + 2e-5)


def test_holm_of_the_pooled_p(sweep):
    """p Holm: Holm's step-down of the rows' pooled p, by hand."""
    _, rows, _ = sweep
    names = [r for r in ROWS if r != "base"]
    p = {r: float(rows[r]["p"]) for r in names}
    running, want = 0.0, {}
    for k, r in enumerate(sorted(names, key=p.get)):
        running = max(running, min(1.0, (len(names) - k) * p[r]))
        want[r] = running
    for r in names:
        assert float(rows[r]["p_holm"]) == pytest.approx(want[r], rel=1e-4, abs=1e-9)


def protocol_agreement(paper_d, d, lo, hi, p_holm, band):
    """The plan's rule, from its text: an effect agrees when its Holm p < 0.05
    and the sign matches; where the paper is level (|Δ| ≤ band) when our
    interval lies inside ±band."""
    if abs(paper_d) <= band:
        return "yes" if max(abs(lo), abs(hi)) <= band else "not yes"
    return "yes" if p_holm < 0.05 and (d > 0) == (paper_d > 0) else "not yes"


def test_agreement_at_each_band(sweep):
    _, rows, comments = sweep
    for band in (0.03, 0.04, 0.05):
        yes = 0
        for row in ROWS:
            if row == "base":
                continue
            r = rows[row]
            want = protocol_agreement(ROWS[row][0], *(float(r[k]) for k in ("d_nll", "lo", "hi", "p_holm")), band)
            assert (r[f"agree_{band:g}"] == "yes") == (want == "yes"), (row, band, r[f"agree_{band:g}"])
            yes += want == "yes"
        assert any(c.startswith(f"# band {band:g} yes={yes} ") for c in comments), (band, yes, comments)
    a1, b1, c1 = rows["A1"], rows["B1"], rows["C1"]
    assert a1["agree_0.03"] == a1["agree_0.04"] == a1["agree_0.05"] == "yes"
    assert c1["agree_0.04"] == "no" and b1["agree_0.04"] == "yes" and b1["agree_0.05"] == "no"
    assert rows["D1"]["agree_0.03"] == "sign" and rows["D1"]["agree_0.04"] == "yes"
    assert a1["agree"] == a1["agree_0.04"]


def test_seed_level_bleu(sweep):
    """The BLEU of each run's test2016.avg5, paired and pooled as the NLL."""
    from row_result import read_result

    top, rows, comments = sweep
    bleu = {row: {s: read_result(str(top / "results" / f"{run_name(row, s)}.h5"))["bleu"]["test2016.avg5"][0]
                  for s in ROWS[row][3]} for row in ROWS}
    for row in ("A1", "C1", "D1"):
        d, half, pairs, _ = pooled_expectation(bleu, row)
        r = rows[row]
        assert int(r["sbleu_pairs"]) == pairs
        assert float(r["sbleu_d"]) == pytest.approx(d, abs=1e-4)
        assert float(r["sbleu_hi"]) - float(r["sbleu_lo"]) == pytest.approx(2 * half, rel=2e-3)
    assert any(c.startswith("# pooled bleu ") and c.endswith("df 10 rows 6 seeds 3") for c in comments)


def test_rank_correlation_permutation_and_bootstrap(sweep):
    """ρ's permutation p against every permutation (6 rows: 720), and the
    bootstrap interval around ρ."""
    import stats

    _, rows, comments = sweep
    names = [r for r in ROWS if r != "base"]
    ours, paper = [float(rows[r]["d_nll"]) for r in names], [ROWS[r][0] for r in names]
    rho = stats.spearman(ours, paper)
    exact = np.mean([abs(stats.spearman(ours, [paper[i] for i in perm])) >= abs(rho) - 1e-12
                     for perm in itertools.permutations(range(len(names)))])
    line = next(c for c in comments if c.startswith("# spearman_p "))
    p, lo, hi = map(float, re.fullmatch(r"# spearman_p (\S+) permutations 10000; bootstrap 95% \[(\S+), (\S+)\]",
                                        line).groups())
    assert p == pytest.approx(exact, abs=0.02)
    assert -1 <= lo <= rho <= hi <= 1


def test_delta_over_training(sweep):
    """PREFIX-delta.csv: each row's mean Δ over matched seeds at every dev
    evaluation, from the planted curves; D1 stops at 900 (its runs stopped)."""
    top, _, _ = sweep
    with open(top / "table3-delta.csv") as f:
        got = list(csv.DictReader(f))
    for row in ("A1", "C1", "D1"):
        mine = [g for g in got if g["row"] == row]
        assert [int(g["step"]) for g in mine] == list(range(100, ROWS[row][4] + 1, 100))
        for g in mine:
            s = int(g["step"])
            want = np.mean([curve(row, k)(s) - curve("base", k)(s) for k in ROWS[row][3]])
            assert float(g["d_nll"]) == pytest.approx(want, abs=1e-5) and int(g["pairs"]) == len(ROWS[row][3])
    from conftest import assert_figure
    assert_figure(str(top / "table3-delta"))


def test_how_each_run_stopped(sweep):
    """best_step, stop_step, stopped_by from the trainer; the cap run is flagged."""
    top, _, _ = sweep
    with open(top / "table3.csv") as f:
        runs = {r["row"]: r for r in csv.DictReader(f)}
    assert (runs["A1"]["stopped_by"], runs["A1"]["stop_step"], runs["A1"]["best_step"]) == ("patience", "1200", "900")
    assert runs["A1"]["converged"] == "yes" and runs["D1-seed2"]["stop_step"] == "900"
    cap = runs[CAP_RUN]
    assert (cap["stopped_by"], cap["stop_step"], cap["converged"]) == ("train_steps", "", "no: cap, best at the end")
    md = (top / "table3.md").read_text()
    assert "no: cap, best at the end" in md and "| band (nats) |" in md and "0.04 (primary)" in md
    assert "(R − 1)(S − 1) = 10 degrees of freedom" in md and "permutation p" in md


def test_a_rerun_stands_for_its_runs_seed_unmatched():
    """A rerun trains with seed + 100 (jobs/table3-stages.sh rerun_config), a
    seed no row uses: it pairs with base's run of its run's seed, and the pair
    is counted unmatched.  (With the old seed + 1 it took seed 2's place.)"""
    run = lambda name, seed, v: {"row": name, "cfg": {"seed": str(seed)}, "v": v}
    base = {"used": [run("base", 1, 3.0), run("base-seed2", 2, 3.1), run("base-seed3", 3, 3.2)]}
    row = {"used": [run("X-rerun", 101, 3.5), run("X-seed2", 2, 3.3), run("X-seed3-rerun", 103, 3.6)]}
    assert {k: r["row"] for k, r in compare.matched_runs(row).items()} == {
        1: "X-rerun", 2: "X-seed2", 3: "X-seed3-rerun"}
    pool = {"var": 0.01, "df": 4}
    c = compare.paired_comparison(row, base, lambda r: r["v"], pool)
    assert c["n"] == 3 and c["unmatched"] == 2
    assert c["paired"]["diff"] == pytest.approx(((3.5 - 3.0) + (3.3 - 3.1) + (3.6 - 3.2)) / 3)
    cells = table3._paired_cells(c, 3)
    assert cells[3] == "3 (2 unmatched)"


def test_protocol_note_states_the_rerun_seed(sweep):
    """The table's protocol lines say what the job and the pairing do: a
    rerun trains with seed + 100 (the plan's "a seed no row uses"), not the
    next seed, which is another row's matched seed."""
    top, _, _ = sweep
    line = next(l for l in (top / "table3.md").read_text().splitlines() if l.startswith("- Runs per row:"))
    assert "rerun once with seed + 100 (row `<row>-rerun`)" in line and "next seed" not in line


def test_order_noise_same_seed_against_across_seeds():
    """compare.order_noise against a computation written here: each run's
    dev NLL is a trend, its seed's noise (the data order, shared by rows)
    and its own; the fluctuations are the values less the centred mean of
    5 from update 6000 on; r the plain Pearson formula over common steps."""
    rng = np.random.default_rng(7)
    steps = np.arange(300, 30001, 300)
    shared = {seed: rng.normal(0, 0.01, len(steps)) for seed in (1, 2, 3)}

    def run(row, seed, own):
        nll = 1.4 + 3 * np.exp(-steps / 3000) + shared[seed] + rng.normal(0, own, len(steps))
        return {"row": run_name(row, seed), "cfg": {"seed": seed},
                "curves": {"dev_step": steps.astype(float), "dev_nll": nll}}

    rows = [{"row": row, "used": [run(row, s, 0.004) for s in (1, 2, 3)]} for row in ("base", "A1", "C1")]

    def fluct(r):
        s, y = np.asarray(r["curves"]["dev_step"]), np.asarray(r["curves"]["dev_nll"])
        y = y[s >= 6000]
        return np.array([y[i] - sum(y[i - 2:i + 3]) / 5 for i in range(2, len(y) - 2)])

    def pearson(a, b):
        a, b = a - a.mean(), b - b.mean()
        return float((a * b).sum() / math.sqrt((a * a).sum() * (b * b).sum()))

    same = [pearson(fluct(x["used"][k]), fluct(y["used"][k])) for x, y in itertools.combinations(rows, 2)
            for k in range(3)]
    across = [pearson(fluct(s["used"][i]), fluct(s["used"][j])) for s in rows
              for i, j in itertools.combinations(range(3), 2)]
    got = compare.order_noise(rows)
    assert got["n_same"] == 9 and got["n_across"] == 9
    assert got["same_seed"] == pytest.approx(np.mean(same), abs=1e-9)
    assert got["across_seeds"] == pytest.approx(np.mean(across), abs=1e-9)
    # the planted shares: 0.01^2 / (0.01^2 + 0.004^2) = 0.86 within a seed, 0 across
    assert got["same_seed"] > 0.7 and abs(got["across_seeds"]) < 0.25
    # a run too short for the window (6 evaluations from 6000 on) counts in
    # no pair: base seed 1's two with A1 and C1, and two with its seeds
    rows[0]["used"][0]["curves"] = {"dev_step": steps[:25].astype(float), "dev_nll": np.ones(25)}
    got = compare.order_noise(rows)
    assert got["n_same"] == 7 and got["n_across"] == 7


CONVERGED_COMMITTED = ("table3.md", "table3.csv", "table3-rows.csv", "table3.tex", "table3-delta.csv")
EMBEDDED_CONVERGED = ("Rows against base (dev set, log space; best dev checkpoint; paired over matched seeds):",
                      "<!-- end of the converged table so far -->", 19)


def _converged_sweep():
    """(the committed converged sweep, the page that embeds its table)"""
    from conftest import ROOT

    sweep = os.path.join(ROOT, "docs", "results-multi30k", "converged", "sweep")
    if not os.path.isdir(os.path.join(sweep, "results")):
        pytest.skip("no committed converged sweep")
    return sweep, os.path.join(ROOT, "docs", "results-multi30k.md")


def _converged_rebuild(tmp_path):
    from conftest import script

    tmp_path.mkdir(parents=True, exist_ok=True)
    sweep, page = _converged_sweep()
    script("table3.py", sweep, "--protocol", "converged", "--out", tmp_path / "table3", "--no-plot")
    return sweep, page


def test_committed_converged_table_rebuilds_from_its_result_files(tmp_path):
    """docs/results-multi30k/converged/sweep: the committed table files are
    what table3.py --protocol converged makes of the committed result files
    (so each run's commit carries its table), and the page embeds its rows
    unchanged; text equality, on any CPU."""
    from test_table3 import _rebuild_differences

    sweep, page = _converged_rebuild(tmp_path)
    assert _rebuild_differences(sweep, str(tmp_path), page, CONVERGED_COMMITTED, EMBEDDED_CONVERGED) == []


def test_committed_converged_check_fails_on_a_changed_result(tmp_path):
    """Not blind: a result file left out (a run committed without its
    table) changes the rebuilt table."""
    import shutil

    from test_table3 import _rebuild_differences

    sweep, page = _converged_sweep()   # (the committed files are compared with what the copy makes)
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    os.unlink(sorted((copy / "results").glob("C*.h5"))[-1])
    (tmp_path / "less").mkdir()
    from conftest import script
    script("table3.py", copy, "--protocol", "converged", "--out", tmp_path / "less" / "table3", "--no-plot")
    diffs = _rebuild_differences(sweep, str(tmp_path / "less"), page, CONVERGED_COMMITTED, EMBEDDED_CONVERGED)
    assert any(d.startswith("table3.md: rebuilding") for d in diffs), diffs


def test_committed_attention_comparison_rebuilds_from_its_summaries(tmp_path):
    """docs/results-multi30k/converged/sweep/attention-compare.{md,csv}: what
    attention.py compare makes of the committed attention summaries and
    result files (docs/attention.md quotes it), so each run's commit
    carries its comparison; a summary left out changes it (not blind)."""
    import shutil

    from conftest import ROOT, script

    rel = os.path.join("docs", "results-multi30k", "converged", "sweep")   # as the page's command names it
    sweep = os.path.join(ROOT, rel)
    if not os.path.exists(os.path.join(sweep, "attention-compare.md")):
        pytest.skip("no committed attention comparison")
    script("attention.py", "compare", rel, "--out", tmp_path / "ac", "--no-plot")
    for ext in ("md", "csv"):
        with open(os.path.join(sweep, f"attention-compare.{ext}")) as f:
            assert (tmp_path / f"ac.{ext}").read_text() == f.read(), f"attention-compare.{ext} does not rebuild"
    copy = tmp_path / "sweep"
    shutil.copytree(sweep, copy)
    os.unlink(sorted((copy / "attention").glob("C*.h5"))[-1])
    script("attention.py", "compare", copy, "--out", tmp_path / "less", "--no-plot")
    assert (tmp_path / "less.md").read_text() != (tmp_path / "ac.md").read_text()


def test_dev_nll_of_a_run_at_full_precision():
    """A converged run's dev NLL is its curve's value at the best step, not
    ln of the 3-decimal PPL (off by up to 1.2e-4 nats); a run without a best
    step (the 8-epoch protocol's) keeps ln of its final PPL."""
    curves = {"dev_step": np.array([300.0, 600.0, 900.0]), "dev_nll": np.array([1.52, 1.4272801, 1.4290])}
    converged = {"best_step": 600, "curves": curves, "dev_ppl": 4.167}
    assert compare.nll(converged) == pytest.approx(1.4272801, abs=1e-9)
    assert abs(compare.nll(converged) - math.log(4.167)) > 5e-5
    assert compare.nll({"best_step": None, "curves": curves, "dev_ppl": 4.167}) == pytest.approx(math.log(4.167))
    assert compare.nll({"curves": {}, "dev_ppl": 4.167}) == pytest.approx(math.log(4.167))
