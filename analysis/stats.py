"""Statistics of the Table 3 comparisons (docs/results.md, "Statistics"),
numpy only: Student t quantiles, Welch t intervals of a difference of means,
paired bootstrap resampling of corpus BLEU (Koehn 2004), over sentences
and seeds where a system has several runs, Spearman's rank
correlation, Holm's step-down correction and the equivalence bound of an
interval.  Each function is small and tested against hand-computed or
textbook values (analysis/tests/test_stats.py)."""

import math

import numpy as np

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 12345  # fixed: the table is the same every time it is built
LEVEL = 0.95


def _betacf(a, b, x):
    """Continued fraction of the regularised incomplete beta function
    (modified Lentz; Press et al., Numerical Recipes, 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """Regularised incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t, df):
    """P(T <= t) for Student's t with df (> 0, not necessarily integer) degrees of freedom."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p, df):
    """The p quantile of Student's t with df degrees of freedom (bisection on t_cdf)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile: need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def welch_interval(a, b, level=LEVEL):
    """Interval for mean(a) - mean(b), Welch's t with Welch-Satterthwaite
    degrees of freedom.  With one value in a (one seed of a row), a's
    variance is taken to be b's (the seed spread of base): the interval is
    then mean(b)'s s.d. times sqrt(1/n_a + 1/n_b), with n_b - 1 degrees of
    freedom.  Returns dict diff, lo, hi, df, se, p (two-sided, of the t
    test of no difference), pooled (True in that case);
    lo = hi = NaN when neither side has two values."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    out = {"diff": diff, "lo": math.nan, "hi": math.nan, "df": math.nan, "se": math.nan, "p": math.nan,
           "pooled": False}
    if len(a) >= 2 and len(b) >= 2:
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
    elif len(a) == 1 and len(b) >= 2:
        se = float(b.std(ddof=1)) * math.sqrt(1.0 + 1.0 / len(b))
        df, out["pooled"] = len(b) - 1, True
    else:
        return out
    half = t_quantile(0.5 + level / 2.0, df) * se
    out.update(lo=diff - half, hi=diff + half, df=float(df), se=se, p=t_pvalue(diff, se, df))
    return out


def t_pvalue(diff, se, df):
    """Two-sided p-value of diff / se under Student's t with df degrees of freedom."""
    if not se > 0:
        return 0.0 if diff != 0 else 1.0
    return min(1.0, 2.0 * (1.0 - t_cdf(abs(diff) / se, df)))


def excludes_zero(lo, hi):
    return math.isfinite(lo) and math.isfinite(hi) and (lo > 0 or hi < 0)


def equivalence_bound(lo, hi):
    """The largest absolute value of an interval: "no difference larger than x"."""
    return max(abs(lo), abs(hi)) if math.isfinite(lo) and math.isfinite(hi) else math.nan


def bleu_from_stats(stats):
    """Corpus BLEU (0-100, no smoothing: 0 when an n-gram order has no match)
    from summed sufficient statistics [hyp_len, ref_len, correct_1..4,
    total_1..4] (sacreBLEU's layout); stats may be a 2-D array of such rows,
    one BLEU per row."""
    s = np.atleast_2d(np.asarray(stats, float))
    hyp, ref, correct, total = s[:, 0], s[:, 1], s[:, 2:6], s[:, 6:10]
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where((correct > 0) & (total > 0), np.log(np.maximum(correct, 1e-300) / np.maximum(total, 1)),
                        -np.inf).mean(axis=1)
        bp = np.where(hyp < ref, 1.0 - ref / np.maximum(hyp, 1e-300), 0.0)
    out = 100.0 * np.exp(logp + np.where(hyp > 0, bp, -np.inf))
    return out if np.ndim(stats) == 2 else float(out[0])


def paired_bootstrap(stats_a, stats_b, n=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED, level=LEVEL,
                     metric=bleu_from_stats):
    """Paired bootstrap resampling (Koehn 2004) of metric(A) - metric(B).
    stats_a, stats_b: per-sentence sufficient statistics (n_sent x k) of two
    systems on the same sentences.  Each resample draws n_sent sentence
    indices with replacement, the same for both systems.  Returns dict
    diff (observed), lo, hi (percentile interval of the resampled
    differences) and p: two-sided, the share of resampled differences
    centred on their mean that are at least as far from 0 as the observed
    one, (1 + count) / (1 + n) (as sacreBLEU's paired_bs does); identical
    systems give p = 1."""
    return seed_bootstrap([stats_a], [stats_b], n, seed, level, metric)


def seed_bootstrap(runs_a, runs_b, n=BOOTSTRAP_RESAMPLES, seed=BOOTSTRAP_SEED, level=LEVEL,
                   metric=bleu_from_stats):
    """The paired bootstrap of two systems trained with several seeds each:
    of the mean over A's runs of metric(run) minus the same over B's runs.
    runs_a, runs_b: lists of per-sentence statistics (n_sent x k), every run
    on the same sentences.  The difference varies with the test sentences
    and with the seeds (the training's own variance: Clark et al. 2011), so
    each resample draws both: the sentence indices, the same for every run
    of both systems (paired, as paired_bootstrap), and, per system, its runs
    with replacement.  With one run a side this is paired_bootstrap exactly.
    With k runs the seed level carries (k - 1)/k of the seeds' variance (a
    half with 2): the interval is wider than the sentences' alone, still
    not as wide as the seeds warrant.  Same return value as
    paired_bootstrap."""
    A, B = [np.asarray(x, float) for x in runs_a], [np.asarray(x, float) for x in runs_b]
    shapes = {x.shape for x in A + B}
    if not A or not B or len(shapes) != 1 or A[0].ndim != 2 or not len(A[0]):
        raise ValueError(f"seed_bootstrap: statistics of shapes {sorted(shapes)} do not pair")
    rng = np.random.default_rng(seed)
    n_sent = len(A[0])
    idx = rng.integers(0, n_sent, size=(n, n_sent))
    # sum the resampled sentences' statistics: counts per index, then a product
    counts = np.apply_along_axis(np.bincount, 1, idx, minlength=n_sent).astype(float)

    def seed_mean(runs):  # per resample: the metric's mean over runs drawn with replacement
        m = np.stack([metric(counts @ x) for x in runs])            # runs x resamples
        pick = rng.integers(0, len(runs), size=(n, len(runs)))
        return m[pick, np.arange(n)[:, None]].mean(axis=1)

    deltas = seed_mean(A) - seed_mean(B)
    obs = float(np.mean([metric(x.sum(axis=0)) for x in A]) - np.mean([metric(x.sum(axis=0)) for x in B]))
    lo, hi = np.percentile(deltas, [50 * (1 - level), 50 * (1 + level)])
    far = np.abs(deltas - deltas.mean()) >= abs(obs) - 1e-12
    return {"diff": obs, "lo": float(lo), "hi": float(hi), "p": float((1 + far.sum()) / (1 + n)), "n": n}


def ranks(x):
    """Ranks 1..n, ties given their average rank."""
    x = np.asarray(x, float)
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        tie = x == v
        r[tie] = r[tie].mean()
    return r


def spearman(x, y):
    """Spearman's rank correlation (Pearson's r of the average ranks); NaN
    with fewer than 3 pairs or a constant side."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) != len(y):
        raise ValueError("spearman: x and y differ in length")
    if len(x) < 3:
        return math.nan
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt((rx ** 2).sum() * (ry ** 2).sum())
    return float((rx * ry).sum() / den) if den > 0 else math.nan


def holm(pvalues):
    """Holm's step-down adjusted p-values (same order as given; NaN stays
    NaN and is not counted among the m comparisons)."""
    p = np.asarray(pvalues, float)
    out = np.full(len(p), math.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    running = 0.0
    for k, i in enumerate(ok[np.argsort(p[ok], kind="mergesort")]):
        running = max(running, min(1.0, (m - k) * p[i]))
        out[i] = running
    return out
