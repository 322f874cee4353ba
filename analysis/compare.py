"""The comparisons of the Table 3 protocol (docs/results.md, "Statistics"):
runs grouped into rows (seeds, reruns), each row against base in log space
(Δ dev NLL with a Welch interval from the seeds), BLEU by paired bootstrap
on the same test sentences and over the seeds, the paper's direction against ours, Holm's
correction and the rank correlation with the paper.  Used by table3.py;
the statistics themselves are in stats.py."""

import functools
import itertools
import math
import os
import re

import numpy as np

import stats
from common import AnalysisError

FAILED = ("diverged", "stuck", "unstable")
# a paper effect this small (|ln PPL_row - ln PPL_base|, nats) is read as "≈":
# the paper's single runs do not settle it (E and A3 are "≈" in the paper's text)
PAPER_EQUIV_NATS = 0.04
EQUIV_ROWS = ("E", "A3")
# base's healthy seeds should end within this range of each other (issue 30's
# pilot criterion); the table says whether they do
BASE_TOLERANCE_NATS = 0.05
BOOTSTRAP_SETS = ("test2016.avg5", "test2016.final")  # the first both runs have
RUN_NAME = re.compile(r"(?P<row>.+?)(?:-seed(?P<seed>\d+))?(?P<rerun>-rerun)?")


def split_run(name):
    """'C3-seed2-rerun' -> ('C3', 2, True); 'base' -> ('base', 1, False)."""
    m = RUN_NAME.fullmatch(name)
    return m.group("row"), int(m.group("seed") or 1), bool(m.group("rerun"))


def is_failed(r):
    """A run the statistics leave out: status failed, or a failure verdict."""
    return r["status"] == "failed" or r.get("verdict") in FAILED


def usable(r):
    """A finished run that counts: done, not failed (a version 1 file has no
    verdict and counts), with a finite dev PPL."""
    return r["status"] == "done" and not is_failed(r) and math.isfinite(r.get("dev_ppl", math.nan))


def nll(r):
    """A run's dev NLL. With a best step (the converged protocol's runs: the
    best dev checkpoint) its curve's value there, the float32 number the
    stopping rule compared; else (the 8-epoch protocol: the final
    checkpoint) ln of the dev PPL that `transformer eval` printed to 3
    decimals.  The PPL is the same checkpoint's, but rounded: ln of it is
    off by up to 1.2e-4 nats, enough to move a paired interval's third
    decimal."""
    steps, nlls = dev_curve(r)
    hit = np.flatnonzero(steps == r.get("best_step")) if r.get("best_step") is not None else []
    if len(hit):
        return float(nlls[hit[0]])
    return math.log(r["dev_ppl"]) if r.get("dev_ppl", 0) > 0 else math.nan


def group_runs(runs):
    """Runs by row: dict row -> list of runs ordered by seed, a rerun right after its run."""
    out = {}
    for r in runs:
        out.setdefault(split_run(r["row"])[0], []).append(r)
    for v in out.values():
        v.sort(key=lambda r: split_run(r["row"])[1:])
    return out


def chosen_runs(runs):
    """Per seed the run the statistics use: the run, else its rerun when the
    run failed and the rerun did not; failed seeds are left out."""
    by_seed = {}
    for r in runs:
        _, seed, rerun = split_run(r["row"])
        by_seed.setdefault(seed, {})[rerun] = r
    out = []
    for seed in sorted(by_seed):
        first, again = by_seed[seed].get(False), by_seed[seed].get(True)
        pick = first if first is not None and usable(first) else again if again is not None and usable(again) else None
        if pick is not None:
            out.append(pick)
    return out


def direction(lo, hi, diff=None, band=PAPER_EQUIV_NATS):
    """'up' / 'down' when the interval excludes 0, else '≈' (diff alone: its
    sign, '≈' within ±band)."""
    if lo is None:
        return "–" if not math.isfinite(diff) else "≈" if abs(diff) <= band else (
            "up" if diff > 0 else "down")
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "–"
    return "up" if lo > 0 else "down" if hi < 0 else "≈"


def agreement(paper_dir, diff, ours_dir, equiv=math.nan, band=PAPER_EQUIV_NATS):
    """yes: the same direction, significant, or the paper ≈ and our whole
    interval inside ±PAPER_EQUIV_NATS (equiv: its equivalence bound), the
    band that defines the paper's ≈, whether or not ours excludes 0; open:
    the paper ≈, ours not significant but its interval wider than that band,
    so neither an effect nor an equivalence is shown; sign: the same sign,
    not significant; no: the opposite direction, significant, or a
    significant effect reaching past the band where the paper has ≈;
    no (n.s.): the opposite sign, not significant."""
    if paper_dir == "–" or ours_dir == "–" or not math.isfinite(diff):
        return "–"
    if paper_dir == "≈":
        if equiv <= band:
            return "yes"
        return "open" if ours_dir == "≈" else "no"
    if ours_dir == paper_dir:
        return "yes"
    if ours_dir != "≈":
        return "no"
    return "sign" if (diff > 0) == (paper_dir == "up") else "no (n.s.)"


def paper_delta(row, base):
    """ln(paper PPL of the row / paper PPL of base): the paper's effect in nats."""
    a, b = row.get("paper_ppl", math.nan), base.get("paper_ppl", math.nan) if base else math.nan
    return math.log(a / b) if a > 0 and b > 0 else math.nan


def mean_bleu(runs, name):
    """Mean sacreBLEU of hypothesis set name over runs that have it (NaN if none)."""
    v = [r["bleu"][name][0] for r in runs if name in r.get("bleu", {})]
    return float(np.mean(v)) if v else math.nan


def row_summary(name, runs):
    """A row's runs, the ones used, and its dev NLL over them."""
    used = chosen_runs(runs)
    v = [nll(r) for r in used]
    return {"row": name, "runs": runs, "used": used, "nlls": v, "n": len(used),
            "mean_nll": float(np.mean(v)) if v else math.nan,
            "failed": [r for r in runs if is_failed(r)], "paper_ppl": runs[0].get("paper_ppl", math.nan),
            "d_nll": math.nan, "lo": math.nan, "hi": math.nan, "p": math.nan, "pooled": False,
            "paper_d": math.nan, "paper_dir": "–", "ours_dir": "–", "agree": "–", "equiv": math.nan,
            "len_ratio": math.nan, "bp": math.nan, "d_bleu": math.nan, "bleu_lo": math.nan, "bleu_hi": math.nan, "bleu_p": math.nan, "bleu_set": ""}


def nll_comparison(s, base):
    """Δ dev NLL of row summary s against base: Welch interval, p, the
    paper's direction, ours, agreement and (for ≈ rows) the equivalence bound."""
    w = stats.welch_interval(s["nlls"], base["nlls"])
    s.update(d_nll=w["diff"], lo=w["lo"], hi=w["hi"], p=w["p"], pooled=w["pooled"])
    s["paper_d"] = paper_delta(s, base)
    s["paper_dir"] = direction(None, None, s["paper_d"])
    s["ours_dir"] = direction(s["lo"], s["hi"])
    bound = stats.equivalence_bound(s["lo"], s["hi"])
    if s["paper_dir"] == "≈" or s["row"] in EQUIV_ROWS:
        s["equiv"] = bound
    s["agree"] = agreement(s["paper_dir"], s["d_nll"], s["ours_dir"], bound)


def run_set(path, name):
    """(hypotheses, references, per-sentence statistics or None) of the
    hypothesis set name of the run file at path.  Scored once per file
    version: sacreBLEU's statistics are most of a table's time, and base's
    runs are compared with every row."""
    st = os.stat(path)
    return _run_set(path, name, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=None)
def _run_set(path, name, mtime_ns, size):  # (the file's version is part of the key)
    from bleu import sentence_stats
    from row_result import read_hyp_set

    hyp, ref = read_hyp_set(path, name)
    return hyp, ref, sentence_stats(hyp, [ref]) if hyp and len(hyp) == len(ref) else None


def bootstrap_rows(runs_a, runs_b):
    """(hypothesis set name, seed_bootstrap of BLEU: the mean over runs_a's
    runs minus the mean over runs_b's) on the first set of BOOTSTRAP_SETS
    every run has, on the same sentences; (None, None) without one."""
    for name in BOOTSTRAP_SETS:
        if not all(name in r.get("hyp_sets", ()) for r in runs_a + runs_b):
            continue
        sets = [run_set(r["path"], name) for r in runs_a + runs_b]
        refs = sets[0][1]
        if not refs or any(ref != refs or st is None for _, ref, st in sets):
            continue  # not the same sentences: no paired comparison
        st = [st for _, _, st in sets]
        return name, stats.seed_bootstrap(st[:len(runs_a)], st[len(runs_a):])
    return None, None


def length_ratio(runs):
    """(hypothesis/reference length ratio, sacreBLEU brevity penalty) on each
    run's first set of BOOTSTRAP_SETS, means over the runs that have one (NaN
    if none).  BLEU can move by length alone: BP = exp(1 - 1/ratio) below 1."""
    ratios = []
    for r in runs:
        name = next((n for n in BOOTSTRAP_SETS if n in r.get("hyp_sets", ())), None)
        st = run_set(r["path"], name)[2] if name else None
        if st is not None:
            t = st.sum(axis=0)
            ratios.append(t[0] / t[1])
    if not ratios:
        return math.nan, math.nan
    bp = [1.0 if x >= 1 else math.exp(1 - 1 / x) for x in ratios]
    return float(np.mean(ratios)), float(np.mean(bp))


def bleu_comparison(s, base):
    """BLEU of the row's used runs against base's: the difference of their
    means, over the test sentences and the seeds (stats.seed_bootstrap)."""
    s["len_ratio"], s["bp"] = length_ratio(s["used"])
    if not s["used"] or not base["used"]:
        return
    name, b = bootstrap_rows(s["used"], base["used"])
    if b:
        s.update(d_bleu=b["diff"], bleu_lo=b["lo"], bleu_hi=b["hi"], bleu_p=b["p"], bleu_set=name)


def summarize(runs, order, converged=False):
    """Row summaries (in the order of the row names 'order' gives, a sort
    key) and the overall figures: Holm-adjusted p-values, the rank
    correlation of our Δ dev NLL with the paper's over rows with both,
    agreement counts.  converged: the converged protocol's statistics
    (converged_comparisons) replace the Welch ones, and overall adds the
    rank correlation's tests, the band's sensitivity, the pooled variances
    and the data order's share of the dev noise (order_noise)."""
    groups = group_runs(runs)
    rows = [row_summary(name, groups[name]) for name in sorted(groups, key=order)]
    base = next((s for s in rows if s["row"] == "base"), None)
    others = [s for s in rows if s is not base]
    if converged and base is not None:
        check_paired_curves(others, base)   # before the seconds of scoring BLEU
    if base is not None:
        base["len_ratio"], base["bp"] = length_ratio(base["used"])
        for s in others:
            nll_comparison(s, base)
            bleu_comparison(s, base)
    for key in ("p", "bleu_p"):
        for s, q in zip(others, stats.holm([s[key] for s in others])):
            s[key + "_holm"] = q
    pools = converged_comparisons(rows, base, others) if converged and base is not None else None
    ranked = [s for s in others if math.isfinite(s["d_nll"]) and math.isfinite(s["paper_d"])]
    overall = {"spearman": stats.spearman([s["d_nll"] for s in ranked], [s["paper_d"] for s in ranked]),
               "n_ranked": len(ranked), "base": base, "agree": agreement_counts(others, "agree")}
    if converged:
        overall.update(rank_tests(ranked), pools=pools, noise=order_noise(rows),
                       bands={b: agreement_counts(others, ("agree_at", b)) for b in BANDS})
    return rows, overall


AGREEMENTS = ("yes", "sign", "open", "no", "no (n.s.)")


def agreement_counts(summaries, key):
    """{agreement: how many summaries have it} of s[key] (or s[k0][k1] for a pair)."""
    get = (lambda s: s[key]) if isinstance(key, str) else (lambda s: s.get(key[0], {}).get(key[1]))
    return {k: sum(get(s) == k for s in summaries) for k in AGREEMENTS}


# The converged protocol (docs/results-multi30k/converged/protocol.md, "Analysis plan")
BANDS = (0.03, 0.04, 0.05)  # the band's sensitivity: agreement counts at each (0.04 primary)
ALPHA = 0.05  # a Holm-corrected p below this is an effect
BLEU_SET = "test2016.avg5"  # the seed-level BLEU test's set: test2016, averaged checkpoint


def seed_of(r):
    """The seed a run trained with: its config's seed, else its name's
    (ROW-seedS; ROW is seed 1).  Matched seeds pair runs by it."""
    try:
        return int(r.get("cfg", {})["seed"])
    except (KeyError, ValueError):
        return split_run(r["row"])[1]


# a rerun trains with its run's seed + RERUN_SEED_OFFSET (jobs/table3-stages.sh
# rerun_config): a seed no row uses, so that it cannot take another run's place
RERUN_SEED_OFFSET = 100


def is_rerun(r):
    return split_run(r["row"])[2]


def pair_seed(r):
    """The matched seed a run stands for: its seed, a rerun's run's seed
    (the rerun's own less RERUN_SEED_OFFSET; its pair is unmatched)."""
    s = seed_of(r)
    return s - RERUN_SEED_OFFSET if is_rerun(r) and s > RERUN_SEED_OFFSET else s


def matched_runs(s):
    """{seed: run} of a row summary's used runs (the first run of a seed)."""
    out = {}
    for r in s["used"]:
        out.setdefault(pair_seed(r), r)
    return out


def run_bleu(r):
    """sacreBLEU of BLEU_SET (NaN without it)."""
    return r.get("bleu", {}).get(BLEU_SET, (math.nan,))[0]


def matched_values(s, value):
    """{seed: value(run)} of a row's used runs where the value is finite."""
    return {k: v for k, v in ((k, value(r)) for k, r in matched_runs(s).items()) if math.isfinite(v)}


def pooled_variance(rows, base, value):
    """The two-way model (row + seed) over the rows (base included) that have
    a value at every one of base's seeds: dict var, df = (R - 1)(S - 1),
    rows R, seeds S."""
    seeds = sorted(matched_values(base, value))
    table = [[m[k] for k in seeds] for m in (matched_values(s, value) for s in rows) if all(k in m for k in seeds)]
    var, df = stats.two_way_residual_variance(table)
    return {"var": var, "df": df, "rows": len(table), "seeds": len(seeds)}


def paired_comparison(s, base, value, pool):
    """The row minus base over their matched seeds: dict n (pairs), pooled
    (the pooled interval) and paired (the row's own paired t interval)."""
    a, b = matched_values(s, value), matched_values(base, value)
    keys = sorted(set(a) & set(b))
    d = [a[k] - b[k] for k in keys]
    ra, rb = matched_runs(s), matched_runs(base)
    unmatched = sum(is_rerun(ra[k]) or is_rerun(rb[k]) for k in keys)
    return {"n": len(d), "unmatched": unmatched, "pooled": stats.pooled_paired_interval(d, pool["var"], pool["df"]),
            "paired": stats.paired_t_interval(d)}


def holm_direction(diff, p_holm):
    """'up' / 'down' where the Holm-corrected p is below ALPHA, else '≈'."""
    if not (math.isfinite(diff) and math.isfinite(p_holm)):
        return "–"
    return "≈" if p_holm >= ALPHA else "up" if diff > 0 else "down"


def agreement_at(s, band):
    """The converged protocol's agreement of row summary s at a band: the
    paper's direction at that band against ours by Holm."""
    paper_dir = direction(None, None, s["paper_d"], band)
    bound = stats.equivalence_bound(s["lo"], s["hi"])
    return agreement(paper_dir, s["d_nll"], s["ours_dir"], bound, band)


def converged_comparisons(rows, base, others):
    """The converged protocol's statistics: per row, Δ dev NLL and Δ BLEU
    against base by paired differences over matched seeds with the pooled
    variance (paired_nll, paired_bleu, with Holm's p), its own paired t
    interval beside; the pooled Δ dev NLL becomes the row's d_nll, lo, hi,
    p, p_holm, its direction is by Holm, its agreement at each of BANDS.
    Returns the pooled variances {"nll": ..., "bleu": ...}."""
    pools = {"nll": pooled_variance(rows, base, nll), "bleu": pooled_variance(rows, base, run_bleu)}
    for name, value in (("nll", nll), ("bleu", run_bleu)):
        for s in others:
            s["paired_" + name] = paired_comparison(s, base, value, pools[name])
        for s, q in zip(others, stats.holm([s["paired_" + name]["pooled"]["p"] for s in others])):
            s["paired_" + name]["pooled"]["p_holm"] = q
    for s in others:
        pooled = s["paired_nll"]["pooled"]
        s.update(d_nll=pooled["diff"], lo=pooled["lo"], hi=pooled["hi"], p=pooled["p"], p_holm=pooled["p_holm"],
                 pooled=False, equiv=math.nan)
        s["ours_dir"] = holm_direction(s["d_nll"], s["p_holm"])
        if s["paper_dir"] == "≈" or s["row"] in EQUIV_ROWS:
            s["equiv"] = stats.equivalence_bound(s["lo"], s["hi"])
        s["agree_at"] = {b: agreement_at(s, b) for b in BANDS}
        s["agree"] = s["agree_at"][PAPER_EQUIV_NATS]
    return pools


def rank_tests(ranked):
    """Spearman's rho of our Δ dev NLL with the paper's: its permutation p
    and bootstrap interval over the rows."""
    x, y = [s["d_nll"] for s in ranked], [s["paper_d"] for s in ranked]
    lo, hi = stats.spearman_bootstrap_interval(x, y)
    return {"spearman_p": stats.spearman_permutation_p(x, y), "spearman_lo": lo, "spearman_hi": hi}


def dev_curve(r):
    """(steps, dev NLL) of a run's stored curve, one value per step (the
    last: a run started again evaluates its last step once more)."""
    c = r.get("curves") or {}
    steps, nlls = np.asarray(c.get("dev_step", ()), float), np.asarray(c.get("dev_nll", ()), float)
    if not len(steps) or len(steps) != len(nlls):
        return np.array([]), np.array([])
    uniq, idx = np.unique(steps[::-1], return_index=True)
    return uniq, nlls[::-1][idx]


def stored_dev_curve(r):
    """dev_curve() of a run whose curve a comparison needs (the converged
    protocol, the pilot): one without a dev NLL curve (a version-1 file,
    curves/ damaged, of two lengths) is the user's error, not an empty array
    that np.interp rejects with a traceback."""
    steps, nlls = dev_curve(r)
    if not len(steps):
        raise AnalysisError(r.get("path", r.get("row", "?")),
                            "no usable dev NLL curve (curves/dev_step and curves/dev_nll, of one length)")
    return steps, nlls


def check_paired_curves(others, base):
    """The dev NLL curves delta_curve will need, each row's paired with
    base's, read now: a damaged one is refused before a table's BLEU scoring,
    not after it."""
    b = matched_runs(base)
    for s in others:
        a = matched_runs(s)
        for k in sorted(set(a) & set(b)):
            stored_dev_curve(a[k])
            stored_dev_curve(b[k])


def delta_curve(s, base):
    """Δ dev NLL of a row against base at every dev evaluation, the mean
    over the matched seeds, at the steps where every pair has both runs
    evaluated: (steps, mean Δ, number of pairs)."""
    a, b = matched_runs(s), matched_runs(base)
    pairs = [(stored_dev_curve(a[k]), stored_dev_curve(b[k])) for k in sorted(set(a) & set(b))]
    if not pairs:
        return np.array([]), np.array([]), 0
    steps = functools.reduce(np.intersect1d, [c[0] for pair in pairs for c in pair])
    d = [np.interp(steps, *ca) - np.interp(steps, *cb) for ca, cb in pairs]  # at stored steps: exact values
    return steps, np.mean(d, axis=0), len(pairs)


NOISE_FROM_STEP = 6000   # evaluations before it still carry the fast early fall
NOISE_WINDOW = 5         # the centred mean a fluctuation is measured from


def dev_fluctuation(r):
    """(steps, residuals): a run's dev NLL less its centred NOISE_WINDOW-
    evaluation mean, from NOISE_FROM_STEP on (the ends, without a full
    window, dropped): the evaluation-to-evaluation noise, without the trend."""
    steps, nll = dev_curve(r)
    keep = steps >= NOISE_FROM_STEP
    steps, nll = steps[keep], nll[keep]
    h = NOISE_WINDOW // 2
    if len(nll) < NOISE_WINDOW + 3:
        return np.array([]), np.array([])
    mean = np.convolve(nll, np.ones(NOISE_WINDOW) / NOISE_WINDOW, mode="valid")
    return steps[h:len(steps) - h], nll[h:len(nll) - h] - mean


def fluctuation_r(a, b):
    """Pearson r of two runs' fluctuations at their common steps (NaN with
    fewer than 10)."""
    (sa, ra), (sb, rb) = dev_fluctuation(a), dev_fluctuation(b)
    common, ia, ib = np.intersect1d(sa, sb, return_indices=True)
    if len(common) < 10:
        return math.nan
    return float(np.corrcoef(ra[ia], rb[ib])[0, 1])


def order_noise(summaries):
    """The matched-seed pairing's premise, measured: the mean Pearson r of
    the dev NLL's fluctuations (dev_fluctuation) between runs of one seed in
    two rows (the same data order and initial draw; 'same_seed') and between
    two seeds of one row ('across_seeds'), with the numbers of pairs.  Where
    the first is the larger, part of a run's noise is its data order, and
    the paired differences cancel it."""
    by_seed, same, across = {}, [], []
    for s in summaries:
        runs = matched_runs(s)
        for seed, r in runs.items():
            by_seed.setdefault(seed, []).append(r)
        across += [fluctuation_r(runs[x], runs[y]) for x, y in itertools.combinations(sorted(runs), 2)]
    for runs in by_seed.values():
        same += [fluctuation_r(x, y) for x, y in itertools.combinations(runs, 2)]
    same, across = [v for v in same if not math.isnan(v)], [v for v in across if not math.isnan(v)]
    return {"same_seed": float(np.mean(same)) if same else math.nan, "n_same": len(same),
            "across_seeds": float(np.mean(across)) if across else math.nan, "n_across": len(across)}


def convergence(r):
    """How a run ended under the converged protocol: 'yes' (stopped by
    patience), 'no: cap' (reached the step cap: not converged), 'no: cap,
    best at the end' (its best dev evaluation was its last one); '–' not done."""
    if r["status"] != "done":
        return "–"
    if r.get("stop_step") is not None:
        return "yes"
    steps = dev_curve(r)[0]
    last = r.get("train_steps") or (int(steps[-1]) if len(steps) else None)
    return "no: cap, best at the end" if r.get("best_step") is not None and r["best_step"] == last else "no: cap"


def base_spread_note(base):
    """One line on base's seeds: their s.d. and range against BASE_TOLERANCE_NATS."""
    if base is None or base["n"] < 2:
        return ""
    v = np.asarray(base["nlls"])
    span = float(v.max() - v.min())
    verdict = "within" if span <= BASE_TOLERANCE_NATS else "OUTSIDE"
    return (f"Base: {base['n']} healthy seeds, dev NLL s.d. {v.std(ddof=1):.3f} nats, range {span:.3f} nats: "
            f"{verdict} the protocol's tolerance of {BASE_TOLERANCE_NATS} nats.")
