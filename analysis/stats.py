"""Statistics of the Table 3 comparisons (docs/results.md, "Statistics"),
numpy only: Student t quantiles, Welch t intervals of a difference of means,
paired bootstrap resampling of corpus BLEU (Koehn 2004), over sentences
and seeds where a system has several runs, Spearman's rank
correlation, Holm's step-down correction and the equivalence bound of an
interval; for matched seeds (the converged protocol) the residual variance
of a two-way additive model (row + seed), paired and pooled t intervals,
a permutation p-value and a bootstrap interval of Spearman's rho.  Each
function is small and tested against hand-computed or
textbook values (analysis/tests/test_stats.py)."""

import functools
import math

import numpy as np

BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 12345  # fixed: the table is the same every time it is built
PERMUTATIONS = 10000  # of the rank correlation's permutation test and its bootstrap over rows
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


@functools.lru_cache(maxsize=None)
def t_quantile(p, df):
    """The p quantile of Student's t with df degrees of freedom (bisection on t_cdf).
    Cached: the sweep's comparisons ask for the same few (p, df) thousands
    of times, and each bisection costs some 200 continued fractions."""
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
    out.update(t_interval(diff, se, df, level))
    return out


def t_interval(diff, se, df, level=LEVEL):
    """dict diff, lo, hi, df, se, p: diff +- t_df se and the two-sided p of
    diff / se (NaN ends where se or df is not known)."""
    if not (math.isfinite(se) and df > 0):
        return {"diff": diff, "lo": math.nan, "hi": math.nan, "df": float(df), "se": se, "p": math.nan}
    half = t_quantile(0.5 + level / 2.0, df) * se
    return {"diff": diff, "lo": diff - half, "hi": diff + half, "df": float(df), "se": se,
            "p": t_pvalue(diff, se, df)}


def two_way_residual_variance(y):
    """Residual variance of the additive model y[r, s] = mu + row_r + seed_s
    + e over a complete R x S table (rows x matched seeds): the sum of
    squared residuals y - row mean - seed mean + grand mean over (R - 1)(S - 1)
    degrees of freedom.  Returns (variance, df); (NaN, 0) without a df."""
    y = np.asarray(y, float)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2:
        return math.nan, 0
    resid = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    df = (y.shape[0] - 1) * (y.shape[1] - 1)
    return float((resid ** 2).sum() / df), df


def pooled_paired_interval(d, variance, df, level=LEVEL):
    """Mean of the paired differences d (a row minus base, seed by seed)
    with the two-way model's residual variance: a difference of two runs has
    variance 2 variance, so se = sqrt(2 variance / len(d)), df the
    variance's.  Same return value as t_interval."""
    d = np.asarray(d, float)
    if not len(d):
        return t_interval(math.nan, math.nan, 0, level)
    return t_interval(float(d.mean()), math.sqrt(2.0 * variance / len(d)), df, level)


def paired_t_interval(d, level=LEVEL):
    """The row's own paired t interval: mean(d) +- t_(n-1) sd(d) / sqrt(n)."""
    d = np.asarray(d, float)
    if len(d) < 2:
        return t_interval(float(d.mean()) if len(d) else math.nan, math.nan, 0, level)
    return t_interval(float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(d)), len(d) - 1, level)


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
    """Ranks 1..n along the last axis, ties given their average rank: the
    values below plus (the values equal, itself included, + 1) / 2."""
    x = np.asarray(x, float)
    below = (x[..., None, :] < x[..., :, None]).sum(axis=-1)
    equal = (x[..., None, :] == x[..., :, None]).sum(axis=-1)
    return below + (equal + 1) / 2.0


def _rank_correlation(rx, ry):
    """Pearson's r of ranks along the last axis (NaN where a side is constant)."""
    rx = rx - rx.mean(axis=-1, keepdims=True)
    ry = ry - ry.mean(axis=-1, keepdims=True)
    den = np.sqrt((rx ** 2).sum(axis=-1) * (ry ** 2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)


def spearman(x, y):
    """Spearman's rank correlation (Pearson's r of the average ranks); NaN
    with fewer than 3 pairs or a constant side."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) != len(y):
        raise ValueError("spearman: x and y differ in length")
    if len(x) < 3:
        return math.nan
    return float(_rank_correlation(ranks(x), ranks(y)))


def spearman_permutation_p(x, y, n=PERMUTATIONS, seed=BOOTSTRAP_SEED):
    """Two-sided permutation p-value of Spearman's rho: the share of n
    random pairings (y's ranks permuted, seeded) whose |rho| is at least the
    observed one, (1 + count) / (1 + n); NaN where rho is."""
    rho = spearman(x, y)
    if not math.isfinite(rho):
        return math.nan
    rx, ry = ranks(x), ranks(y)
    perm = np.random.default_rng(seed).permuted(np.tile(ry, (n, 1)), axis=1)
    far = np.abs(_rank_correlation(rx, perm)) >= abs(rho) - 1e-12
    return float((1 + far.sum()) / (1 + n))


def spearman_bootstrap_interval(x, y, n=PERMUTATIONS, seed=BOOTSTRAP_SEED, level=LEVEL):
    """Percentile interval of Spearman's rho over n resamples of the pairs
    (x_i, y_i) with replacement (seeded); resamples with a constant side
    have no rho and are left out.  Returns (lo, hi), NaN with under 3 pairs."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 3:
        return math.nan, math.nan
    idx = np.random.default_rng(seed).integers(0, len(x), size=(n, len(x)))
    rho = _rank_correlation(ranks(x[idx]), ranks(y[idx]))
    rho = rho[np.isfinite(rho)]
    if not len(rho):
        return math.nan, math.nan
    lo, hi = np.percentile(rho, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


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
