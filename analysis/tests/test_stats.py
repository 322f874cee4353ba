"""analysis/stats.py against textbook and hand-computed values."""

import math

import numpy as np
import pytest

import stats


@pytest.mark.parametrize("p, df, want", [
    # two-sided 95% critical values of Student's t (any statistics textbook's table)
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 10, 2.228), (0.975, 30, 2.042),
    (0.95, 5, 2.015), (0.995, 3, 5.841), (0.025, 4, -2.776),
])
def test_t_quantile_table(p, df, want):
    assert stats.t_quantile(p, df) == pytest.approx(want, abs=1.5e-3)


def test_t_cdf_closed_forms():
    # df = 1 is the Cauchy distribution; df = 2 has F(t) = 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-3.0, -0.5, 0.0, 1.0, 4.0):
        assert stats.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert stats.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    # a non-integer df lies between its neighbours
    assert stats.t_quantile(0.975, 4) > stats.t_quantile(0.975, 4.5) > stats.t_quantile(0.975, 5)


def test_welch_interval_equal_variances_reduces_to_students():
    # equal sizes and variances: df = 2n - 2 = 4, se = sqrt(1/3 + 1/3); t(0.975, 4) = 2.7764
    w = stats.welch_interval([1, 2, 3], [4, 5, 6])
    assert w["diff"] == -3 and w["df"] == pytest.approx(4) and not w["pooled"]
    assert (w["lo"], w["hi"]) == (pytest.approx(-3 - 2.7764 * math.sqrt(2 / 3), abs=1e-3),
                                  pytest.approx(-3 + 2.7764 * math.sqrt(2 / 3), abs=1e-3))
    assert stats.excludes_zero(w["lo"], w["hi"])
    # Student's t test of the same samples: t = -3.674, 4 df, two-sided p = 0.0213
    assert w["p"] == pytest.approx(0.0213, abs=2e-4)


def test_welch_interval_unequal_variances():
    # by hand: va = 2.5/5 = 0.5, vb = 4/3; df = (11/6)^2 / (0.25/4 + (16/9)/2) = 3.5328
    w = stats.welch_interval([1, 2, 3, 4, 5], [2, 4, 6])
    assert w["df"] == pytest.approx(3.5328, abs=1e-4) and w["se"] == pytest.approx(math.sqrt(11 / 6))
    assert w["lo"] < -1 < w["hi"] and not stats.excludes_zero(w["lo"], w["hi"])


def test_welch_interval_one_seed_uses_bases_spread():
    # one run of the row: its variance is taken as base's (s.d. 1, n 3): se = sqrt(1 + 1/3), df 2
    w = stats.welch_interval([7.0], [4, 5, 6])
    assert w["pooled"] and w["df"] == 2 and w["diff"] == 2.0
    half = 4.3027 * math.sqrt(4 / 3)
    assert w["lo"] == pytest.approx(2 - half, abs=1e-3) and w["hi"] == pytest.approx(2 + half, abs=1e-3)
    # nothing to say with one run on each side
    w = stats.welch_interval([1.0], [2.0])
    assert w["diff"] == -1 and math.isnan(w["lo"]) and math.isnan(w["hi"])


def test_equivalence_bound():
    assert stats.equivalence_bound(-0.03, 0.05) == 0.05
    assert stats.equivalence_bound(-0.08, 0.01) == 0.08
    assert math.isnan(stats.equivalence_bound(math.nan, 0.1))


def _sentence_stats(hyps, refs):
    from bleu import sentence_stats

    return sentence_stats(hyps, [refs])


def _corpus(seed, n=60):
    rng = np.random.default_rng(seed)
    words = "ein mann eine frau hund läuft sitzt auf dem der die im park straße wasser rot blau".split()
    refs = [" ".join(rng.choice(words, size=rng.integers(6, 12))) for _ in range(n)]
    return rng, words, refs


def test_bleu_from_stats_is_sacrebleus():
    from sacrebleu.metrics import BLEU

    rng, words, refs = _corpus(1)
    hyps = [" ".join(w if rng.random() < 0.7 else rng.choice(words) for w in r.split()) for r in refs]
    want = BLEU().corpus_score(hyps, [refs]).score
    assert stats.bleu_from_stats(_sentence_stats(hyps, refs).sum(axis=0)) == pytest.approx(want, abs=1e-9)
    assert stats.bleu_from_stats(_sentence_stats(refs, refs).sum(axis=0)) == pytest.approx(100.0)


def test_paired_bootstrap_identical_systems():
    rng, words, refs = _corpus(2)
    hyps = [" ".join(w if rng.random() < 0.6 else rng.choice(words) for w in r.split()) for r in refs]
    s = _sentence_stats(hyps, refs)
    b = stats.paired_bootstrap(s, s.copy())
    assert b["diff"] == 0 and b["p"] == 1.0 and b["lo"] <= 0 <= b["hi"]


def test_paired_bootstrap_finds_a_real_difference_and_its_sign():
    rng, words, refs = _corpus(3, n=200)
    good = [" ".join(w if rng.random() < 0.9 else rng.choice(words) for w in r.split()) for r in refs]
    bad = [" ".join(w if rng.random() < 0.5 else rng.choice(words) for w in r.split()) for r in refs]
    sg, sb = _sentence_stats(good, refs), _sentence_stats(bad, refs)
    b = stats.paired_bootstrap(sg, sb)
    assert b["diff"] > 10 and b["lo"] > 0 and b["p"] < 0.01
    r = stats.paired_bootstrap(sb, sg)  # the other way round: the sign flips, p does not
    assert r["diff"] == pytest.approx(-b["diff"]) and r["hi"] < 0 and r["p"] < 0.01
    # reproducible: a fixed seed
    assert stats.paired_bootstrap(sg, sb) == b
    # the interval brackets the observed difference
    assert b["lo"] < b["diff"] < b["hi"]


def test_paired_bootstrap_rejects_unpaired():
    with pytest.raises(ValueError):
        stats.paired_bootstrap(np.ones((3, 10)), np.ones((4, 10)))


def _loop_bootstrap(runs_a, runs_b, n, seed):
    """The sentence-only paired bootstrap of the seed means, written as
    loops over resamples: the reference for seed_bootstrap's sentence level
    (the same first draw from the same generator)."""
    rng = np.random.default_rng(seed)
    n_sent = len(runs_a[0])
    idx = rng.integers(0, n_sent, size=(n, n_sent))
    d = []
    for r in range(n):
        ma = np.mean([stats.bleu_from_stats(a[idx[r]].sum(axis=0)) for a in runs_a])
        mb = np.mean([stats.bleu_from_stats(b[idx[r]].sum(axis=0)) for b in runs_b])
        d.append(ma - mb)
    return np.array(d)


def _noisy(rng, words, refs, keep):
    return [" ".join(w if rng.random() < keep else rng.choice(words) for w in r.split()) for r in refs]


def test_seed_bootstrap_one_run_a_side_is_the_paired_bootstrap():
    rng, words, refs = _corpus(4, n=80)
    a, b = _sentence_stats(_noisy(rng, words, refs, 0.8), refs), _sentence_stats(_noisy(rng, words, refs, 0.7), refs)
    got = stats.seed_bootstrap([a], [b], n=200, seed=7)
    d = _loop_bootstrap([a], [b], 200, 7)
    assert got["diff"] == pytest.approx(stats.bleu_from_stats(a.sum(0)) - stats.bleu_from_stats(b.sum(0)))
    assert (got["lo"], got["hi"]) == (pytest.approx(np.percentile(d, 2.5)), pytest.approx(np.percentile(d, 97.5)))
    far = np.abs(d - d.mean()) >= abs(got["diff"]) - 1e-12
    assert got["p"] == pytest.approx((1 + far.sum()) / 201)
    assert stats.paired_bootstrap(a, b, n=200, seed=7) == got


def test_seed_bootstrap_copies_of_a_run_add_nothing():
    # a row whose seeds all translate alike has no seed variance to add
    rng, words, refs = _corpus(5, n=80)
    a, b = _sentence_stats(_noisy(rng, words, refs, 0.8), refs), _sentence_stats(_noisy(rng, words, refs, 0.7), refs)
    one = stats.seed_bootstrap([a], [b], n=300)
    three = stats.seed_bootstrap([a, a.copy(), a.copy()], [b, b.copy()], n=300)
    assert three["diff"] == pytest.approx(one["diff"]) and three["lo"] == pytest.approx(one["lo"])
    assert three["hi"] == pytest.approx(one["hi"])


def test_seed_bootstrap_seeds_that_disagree_widen_the_interval():
    # row A: one good seed and one poor one; base: two middling seeds.  The
    # difference is the mean BLEU of A's seeds minus base's, and the interval
    # over sentences and seeds is far wider than the sentences' alone
    rng, words, refs = _corpus(6, n=150)
    A = [_sentence_stats(_noisy(rng, words, refs, k), refs) for k in (0.95, 0.45)]
    B = [_sentence_stats(_noisy(rng, words, refs, 0.7), refs) for _ in range(2)]
    got = stats.seed_bootstrap(A, B, n=400, seed=3)
    bleu = [stats.bleu_from_stats(x.sum(0)) for x in A + B]
    assert got["diff"] == pytest.approx((bleu[0] + bleu[1]) / 2 - (bleu[2] + bleu[3]) / 2)
    assert bleu[0] - bleu[1] > 30
    d = _loop_bootstrap(A, B, 400, 3)
    sentence_width = np.percentile(d, 97.5) - np.percentile(d, 2.5)
    assert got["hi"] - got["lo"] > 3 * sentence_width
    # the seed level reaches both seeds' side of base: not a significant difference
    assert got["lo"] < 0 < got["hi"] and got["p"] > 0.05


def test_seed_bootstrap_rejects_unpaired():
    with pytest.raises(ValueError):
        stats.seed_bootstrap([np.ones((3, 10))], [np.ones((3, 10)), np.ones((4, 10))])
    with pytest.raises(ValueError):
        stats.seed_bootstrap([], [np.ones((3, 10))])


def test_spearman():
    assert stats.spearman([1, 2, 3, 4, 5], [2, 4, 6, 8, 10]) == pytest.approx(1.0)
    assert stats.spearman([1, 2, 3, 4, 5], [9, 7, 5, 3, 1]) == pytest.approx(-1.0)
    # without ties, 1 - 6 sum d^2 / (n (n^2 - 1)): d = (2, -1, 1, -2, 0) -> 1 - 60/120 = 0.5
    assert stats.spearman([10, 20, 30, 40, 50], [3, 1, 4, 2, 5]) == pytest.approx(0.5)
    # ties get average ranks: y ranks (1, 2, 3.5, 5, 3.5): r = 8 / sqrt(10 * 9.5)
    assert stats.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / math.sqrt(95))
    assert math.isnan(stats.spearman([1, 2], [2, 1])) and math.isnan(stats.spearman([1, 1, 1], [1, 2, 3]))


def test_holm():
    # sorted 0.005 x4 = 0.02, 0.01 x3 = 0.03, 0.03 x2 = 0.06, 0.04 x1 -> max(0.06, 0.04) = 0.06
    got = stats.holm([0.01, 0.04, 0.03, 0.005])
    assert got == pytest.approx([0.03, 0.06, 0.06, 0.02])
    got = stats.holm([0.5, math.nan, 0.01])  # NaN is not a comparison: m = 2
    assert got[0] == pytest.approx(0.5) and math.isnan(got[1]) and got[2] == pytest.approx(0.02)
    assert stats.holm([0.6, 0.9]) == pytest.approx([1.0, 1.0])


def test_two_way_residual_variance_is_the_anovas_and_least_squares():
    """Against the residual mean square by sums of squares and against the
    least-squares fit of row and seed dummies (numpy's lstsq)."""
    rng = np.random.default_rng(5)
    y = rng.normal(size=(5, 3)) * 0.02 + np.array([0.0, 0.2, -0.1, 0.05, 0.3])[:, None] + [0.0, 0.01, -0.02]
    var, df = stats.two_way_residual_variance(y)
    R, S = y.shape
    g = y.mean()
    ss = ((y - g) ** 2).sum() - S * ((y.mean(1) - g) ** 2).sum() - R * ((y.mean(0) - g) ** 2).sum()
    assert df == (R - 1) * (S - 1) == 8 and var == pytest.approx(ss / df, rel=1e-9)
    X = np.array([[1.0] + [float(r == i) for i in range(1, R)] + [float(s == j) for j in range(1, S)]
                  for r in range(R) for s in range(S)])
    _, resid, *_ = np.linalg.lstsq(X, y.ravel(), rcond=None)
    assert var == pytest.approx(resid[0] / df, rel=1e-9)
    assert math.isnan(stats.two_way_residual_variance([[1.0, 2.0]])[0])


def test_paired_t_interval_by_hand():
    # d = 0.1, 0.2, 0.3: mean 0.2, sd 0.1, se 0.1/sqrt(3), t(0.975, 2) = 4.303
    w = stats.paired_t_interval([0.1, 0.2, 0.3])
    assert w["df"] == 2 and w["diff"] == pytest.approx(0.2)
    assert (w["lo"], w["hi"]) == (pytest.approx(0.2 - 4.303 * 0.1 / math.sqrt(3), abs=1e-3),
                                  pytest.approx(0.2 + 4.303 * 0.1 / math.sqrt(3), abs=1e-3))
    assert math.isnan(stats.paired_t_interval([0.1])["lo"])


def test_pooled_interval_of_two_rows_is_the_paired_t():
    """With base and one row the two-way model's residual variance is half
    the pairs' variance: the pooled interval is the paired t interval."""
    base, row = np.array([3.0, 3.02, 2.99, 3.01]), np.array([3.2, 3.21, 3.22, 3.18])
    var, df = stats.two_way_residual_variance(np.stack([base, row]))
    assert var == pytest.approx((row - base).var(ddof=1) / 2) and df == 3
    pooled, paired = stats.pooled_paired_interval(row - base, var, df), stats.paired_t_interval(row - base)
    for k in ("diff", "lo", "hi", "p", "se"):
        assert pooled[k] == pytest.approx(paired[k], rel=1e-9)


def test_ranks_along_the_last_axis():
    x = np.array([[3.0, 1.0, 3.0, 2.0], [1.0, 1.0, 1.0, 5.0]])
    assert stats.ranks(x).tolist() == [[3.5, 1.0, 3.5, 2.0], [2.0, 2.0, 2.0, 4.0]]
    assert stats.ranks([5.0, 7.0, 6.0]).tolist() == [1.0, 3.0, 2.0]


def test_spearman_permutation_p_against_every_permutation():
    """n = 7: the exact p over all 5040 permutations, brute force; the
    10,000 random ones lie within 4 standard errors of it; seeded."""
    import itertools

    x, y = [0.1, 0.3, -0.2, 0.05, 0.4, 0.0, 0.2], [0.08, 0.1, -0.05, 0.2, 0.3, 0.02, 0.0]
    rho = stats.spearman(x, y)
    exact = np.mean([abs(stats.spearman(x, [y[i] for i in p])) >= abs(rho) - 1e-12
                     for p in itertools.permutations(range(7))])
    got = stats.spearman_permutation_p(x, y)
    assert got == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / stats.PERMUTATIONS) + 1e-4)
    assert got == stats.spearman_permutation_p(x, y)
    assert math.isnan(stats.spearman_permutation_p([1, 2], [2, 1]))


def test_spearman_bootstrap_interval_against_a_loop():
    """The vectorised resamples against spearman() of each resample in a
    loop, with the same seeded draws; resamples with a constant side left out."""
    x, y = [0.1, 0.3, -0.2, 0.05, 0.4, 0.0], [0.08, 0.1, -0.05, 0.2, 0.3, 0.02]
    n = 2000
    idx = np.random.default_rng(11).integers(0, len(x), size=(n, len(x)))
    rho = [stats.spearman(np.take(x, i), np.take(y, i)) for i in idx]
    rho = [r for r in rho if math.isfinite(r)]
    want = np.percentile(rho, [2.5, 97.5])
    got = stats.spearman_bootstrap_interval(x, y, n=n, seed=11)
    assert got == pytest.approx(tuple(want), abs=1e-9)
    assert all(math.isnan(v) for v in stats.spearman_bootstrap_interval([1, 2], [2, 1]))
