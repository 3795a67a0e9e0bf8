"""Tests for privft.metrics."""

import math

import numpy as np
import pytest
from scipy import stats
from scipy.stats import binomtest
from sklearn.metrics import roc_auc_score

from privft.metrics import (
    DEFAULT_MAX_FPRS,
    PERPLEXITY_CONVENTION,
    AttackMetrics,
    auc_with_ci,
    clopper_pearson,
    evaluate_attack,
    perplexity,
    tpr_at_fpr,
)


def _tied_data(n_members: int, n_non_members: int, seed: int, levels: int = 20):
    """Integer scores (many ties), members shifted up a little."""
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(n_members, dtype=int), np.zeros(n_non_members, dtype=int)]
    s = rng.integers(0, levels, size=len(y)) + (rng.random(len(y)) < 0.3) * y
    return y, s.astype(float)


def _pairwise_auc(y, s):
    """O(n²) AUC: fraction of (member, non-member) pairs ranked correctly, ties count 0.5."""
    diff = s[y == 1][:, None] - s[y == 0][None, :]
    return ((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size


def _brute_tpr(y, s, max_fpr):
    """Max TPR over all 'score >= t' rules (and 'predict none') whose FPR <= max_fpr."""
    n1, n0 = (y == 1).sum(), (y == 0).sum()
    best = 0.0
    for t in np.unique(s):
        pred = s >= t
        if (pred & (y == 0)).sum() / n0 <= max_fpr:
            best = max(best, (pred & (y == 1)).sum() / n1)
    return best


# --- AUC -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed,n1,n0,levels", [(0, 50, 70, 5), (1, 300, 200, 20), (2, 17, 400, 3)])
def test_bootstrap_auc_matches_sklearn_and_pairwise_count(seed, n1, n0, levels):
    y, s = _tied_data(n1, n0, seed, levels)
    result = auc_with_ci(y, s, n_bootstrap=200)
    assert result.auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert result.auc == pytest.approx(_pairwise_auc(y, s), abs=1e-12)
    assert (result.n_members, result.n_non_members, result.n_bootstrap) == (n1, n0, 200)


def test_bootstrap_resamples_are_exact_aucs():
    """Each bootstrap AUC equals sklearn's AUC on the same stratified resample."""
    from privft.metrics import _bootstrap_aucs

    y, s = _tied_data(40, 60, seed=3, levels=6)
    values, idx = np.unique(s, return_inverse=True)
    aucs = _bootstrap_aucs(idx, y, len(values), 5, np.random.default_rng(7))
    rng = np.random.default_rng(7)  # same draws, in the same order, as the implementation
    mem, non = s[y == 1], s[y == 0]
    mem_draws = mem[rng.integers(0, len(mem), size=(5, len(mem)), dtype=np.int32)]
    non_draws = non[rng.integers(0, len(non), size=(5, len(non)), dtype=np.int32)]
    for auc, m, n in zip(aucs, mem_draws, non_draws):
        expected = roc_auc_score(np.r_[np.ones(len(m)), np.zeros(len(n))], np.r_[m, n])
        assert auc == pytest.approx(expected, abs=1e-12)


def test_auc_ci_contains_auc_is_seeded_and_narrows():
    y, s = _tied_data(200, 200, seed=4)
    small = auc_with_ci(y, s, seed=1)
    assert small.ci_low <= small.auc <= small.ci_high
    assert auc_with_ci(y, s, seed=1) == small
    assert auc_with_ci(y, s, seed=2) != small
    y_big, s_big = _tied_data(5000, 5000, seed=4)
    big = auc_with_ci(y_big, s_big, seed=1)
    assert big.ci_high - big.ci_low < 0.5 * (small.ci_high - small.ci_low)


# --- TPR at FPR ------------------------------------------------------------------------


@pytest.mark.parametrize("seed,n1,n0,levels", [(0, 100, 1000, 30), (1, 500, 2000, 50), (2, 60, 300, 8)])
@pytest.mark.parametrize("max_fpr", [0.01, 0.05, 0.1, 0.25, 0.5, 1.0])
def test_tpr_at_fpr_matches_brute_force_sweep(seed, n1, n0, levels, max_fpr):
    y, s = _tied_data(n1, n0, seed, levels)
    result = tpr_at_fpr(y, s, max_fpr)
    if result.tpr is None:
        assert n0 * max_fpr < 1
        return
    assert result.tpr == pytest.approx(_brute_tpr(y, s, max_fpr), abs=1e-12)
    assert result.fpr_achieved <= max_fpr
    pred = s >= result.threshold
    assert pred[y == 1].sum() == result.true_positives
    assert pred[y == 0].sum() == result.false_positives


def test_tpr_at_fpr_includes_point_with_fpr_exactly_at_ceiling():
    # 1000 non-members; exactly 10 of them (FPR = 1 %) score 5, the rest 0.
    y = np.r_[np.ones(100, dtype=int), np.zeros(1000, dtype=int)]
    s = np.r_[np.full(40, 5.0), np.full(60, 0.0), np.full(10, 5.0), np.full(990, 0.0)]
    at = tpr_at_fpr(y, s, 0.01)
    assert (at.tpr, at.fpr_achieved, at.threshold, at.false_positives) == (0.4, 0.01, 5.0, 10)
    below = tpr_at_fpr(y, s, 0.0099)  # just under: only "predict none" qualifies
    assert below.tpr == 0.0 and below.threshold == math.inf


def test_tpr_at_fpr_is_conservative_not_interpolated():
    # Crossing the ceiling admits 20 false positives at once; the rule must not take that point.
    y = np.r_[np.ones(100, dtype=int), np.zeros(1000, dtype=int)]
    s = np.r_[np.full(30, 9.0), np.full(70, 5.0), np.full(5, 9.0), np.full(20, 5.0), np.zeros(975)]
    result = tpr_at_fpr(y, s, 0.01)
    assert (result.tpr, result.false_positives, result.true_positives) == (0.3, 5, 30)


def test_tpr_ci_is_clopper_pearson_on_members():
    y, s = _tied_data(400, 2000, seed=5)
    result = tpr_at_fpr(y, s, 0.01)
    ci = binomtest(result.true_positives, 400).proportion_ci(0.95, method="exact")
    assert (result.ci_low, result.ci_high) == pytest.approx((ci.low, ci.high), abs=1e-10)


def test_threshold_fpr_bound_covers_the_fpr_on_new_non_members():
    rng = np.random.default_rng(11)
    covered, n_trials = 0, 400
    for _ in range(n_trials):
        y = np.r_[np.ones(100, dtype=int), np.zeros(200, dtype=int)]
        s = np.r_[rng.normal(1.0, 1.0, 100), rng.normal(0.0, 1.0, 200)]
        result = tpr_at_fpr(y, s, 0.01)  # the threshold is set on these 200 non-members
        true_fpr = 1 - stats.norm.cdf(result.threshold)  # its FPR on the whole non-member population
        covered += true_fpr <= result.fpr_upper
    assert result.false_positives == 2 and result.fpr_upper == pytest.approx(stats.beta.ppf(0.95, 3, 198))
    assert 0.92 <= covered / n_trials <= 0.98  # a 95 % bound, neither loose nor broken
    assert result.fpr_upper > 0.03  # "FPR ≤ 1 %" on 200 non-members may well be 3 % on new ones


@pytest.mark.parametrize("k,n", [(0, 10), (10, 10), (0, 1), (1, 1), (3, 17), (34, 400), (500, 1000)])
def test_clopper_pearson_matches_scipy_exact(k, n):
    ci = binomtest(k, n).proportion_ci(0.95, method="exact")
    assert clopper_pearson(k, n) == pytest.approx((ci.low, ci.high), abs=1e-10)
    low, high = clopper_pearson(k, n)
    assert (low == 0.0) == (k == 0) and (high == 1.0) == (k == n)


# --- Seed 003: a memorised minority hides behind AUC ≈ 0.5 ---------------------------


def test_seed_003_memorised_minority_shows_in_tpr_not_auc():
    rng = np.random.default_rng(11)
    n, frac = 400_000, 0.08
    rng.standard_normal(200_000)  # the original sanity-check draw; keeps the stream aligned
    non_members = rng.standard_normal(n)
    bulk = rng.standard_normal(int(n * (1 - frac))) - 0.1546
    memorised = rng.standard_normal(int(n * frac)) + 8.0
    members = np.concatenate([bulk, memorised])
    flat = rng.standard_normal(n) - 0.1546
    y = np.r_[np.ones(n, dtype=int), np.zeros(n, dtype=int)]

    s = np.r_[members, non_members]
    assert abs(roc_auc_score(y, s) - 0.5) < 0.01  # published 0.499
    assert tpr_at_fpr(y, s, 0.01).tpr == pytest.approx(0.086, abs=0.005)

    s_flat = np.r_[flat, non_members]
    assert roc_auc_score(y, s_flat) == pytest.approx(0.457, abs=0.001)
    assert tpr_at_fpr(y, s_flat, 0.01).tpr < 0.012  # published 0.007


# --- Resolution warnings ---------------------------------------------------------------


def test_500_non_members_cannot_resolve_0_01_percent():
    y, s = _tied_data(400, 500, seed=6)
    result = tpr_at_fpr(y, s, 0.0001)
    assert result.tpr is None and result.ci_low is None and result.threshold is None
    assert "not estimable" in result.warning and "10,000" in result.warning
    assert "not estimable" in str(result)


def test_500_non_members_at_1_percent_warns_about_resolution():
    y, s = _tied_data(400, 500, seed=6)
    result = tpr_at_fpr(y, s, 0.01)
    assert result.tpr is not None
    assert "5 false positives" in result.warning and "1,000" in result.warning


def test_2000_non_members_at_1_percent_has_no_warning():
    y, s = _tied_data(400, 2000, seed=6)
    result = tpr_at_fpr(y, s, 0.01)
    assert result.tpr is not None and result.warning is None


def test_format_renders_tpr_ci_and_counts():
    y = np.r_[np.ones(400, dtype=int), np.zeros(1000, dtype=int)]
    s = np.r_[np.full(34, 2.0), np.zeros(366), np.full(10, 1.0), np.zeros(990)]
    result = tpr_at_fpr(y, s, 0.01)
    assert str(result) == "0.085 [0.06, 0.12] (34/400 members, FPR ≤ 1 % on 1,000 non-members)"
    assert result.to_dict()["true_positives"] == 34


# --- evaluate_attack and input validation ----------------------------------------------


def test_evaluate_attack_bundles_auc_and_default_fprs():
    y, s = _tied_data(300, 3000, seed=7)
    metrics = evaluate_attack(y, s, n_bootstrap=100, seed=3)
    assert isinstance(metrics, AttackMetrics)
    assert metrics.auc == auc_with_ci(y, s, n_bootstrap=100, seed=3)
    assert tuple(t.max_fpr for t in metrics.tpr_at_fpr) == DEFAULT_MAX_FPRS
    d = metrics.to_dict()
    assert d["auc"]["n_bootstrap"] == 100 and len(d["tpr_at_fpr"]) == 3
    assert d["tpr_at_fpr"][2]["tpr"] is None  # 3,000 non-members cannot resolve 0.01 %


@pytest.mark.parametrize(
    "y,s,message",
    [
        ([0, 1, 1], [0.1, 0.2], "lengths differ"),
        ([0, 1, 2], [0.1, 0.2, 0.3], "labels must be 1"),
        ([0, 0, 0], [0.1, 0.2, 0.3], "no members"),
        ([1, 1], [0.1, 0.2], "no non-members"),
        ([0, 1, 1, 0], [np.nan, 0.2, np.inf, np.nan], "3 non-finite .* 1 among members, 2 among non-members"),
    ],
)
def test_bad_inputs_raise_clear_errors(y, s, message):
    with pytest.raises(ValueError, match=message):
        evaluate_attack(y, s, n_bootstrap=10)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda y, s: tpr_at_fpr(y, s, 0.0), "max_fpr"),
        (lambda y, s: tpr_at_fpr(y, s, 1.5), "max_fpr"),
        (lambda y, s: auc_with_ci(y, s, n_bootstrap=0), "n_bootstrap"),
        (lambda y, s: auc_with_ci(y, s, confidence=1.0), "confidence"),
    ],
)
def test_bad_parameters_raise(call, message):
    with pytest.raises(ValueError, match=message):
        call(np.array([0, 1]), np.array([0.0, 1.0]))


# --- Perplexity ------------------------------------------------------------------------


def test_perplexity_is_token_weighted_not_mean_of_per_text():
    # Text A: 10 tokens, NLL 10 (ppl e); text B: 90 tokens, NLL 270 (ppl e³).
    result = perplexity([10.0, 270.0], [10, 90])
    assert result == pytest.approx(math.exp(280 / 100))
    assert result != pytest.approx((math.e + math.e**3) / 2)
    assert "token" in PERPLEXITY_CONVENTION


@pytest.mark.parametrize(
    "nll,tokens,message",
    [([1.0, 2.0], [1], "shapes differ"), ([1.0, np.nan], [1, 1], "non-finite"), ([1.0], [0], "positive total")],
)
def test_perplexity_rejects_bad_inputs(nll, tokens, message):
    with pytest.raises(ValueError, match=message):
        perplexity(nll, tokens)


def test_perplexity_interval_agrees_with_scipys_percentile_bootstrap_over_texts():
    from scipy.stats import bootstrap

    from privft.metrics import perplexity_interval

    rng = np.random.default_rng(0)
    tokens = rng.integers(20, 80, size=100)
    nll = tokens * rng.normal(2.7, 0.4, size=100)  # per-text mean NLL varies around 2.7 nats
    low, high = perplexity_interval(nll, tokens, n_bootstrap=4000)
    assert low < perplexity(nll, tokens) < high
    scipy_ci = bootstrap((nll, tokens), lambda n, t: np.exp(n.sum() / t.sum()), paired=True, vectorized=False,
                         n_resamples=4000, method="percentile", random_state=1).confidence_interval
    assert (low, high) == pytest.approx((scipy_ci.low, scipy_ci.high), rel=0.01)
    flat = perplexity_interval(2.0 * tokens, tokens, n_bootstrap=200)  # every text at the same NLL per token
    assert flat == pytest.approx((math.exp(2.0), math.exp(2.0)))


def test_paired_perplexity_ratio_is_narrower_than_two_separate_intervals():
    from privft.metrics import paired_perplexity_ratio, perplexity_interval

    rng = np.random.default_rng(1)
    tokens = rng.integers(20, 80, size=100)
    a = tokens * rng.normal(2.7, 0.4, size=100)
    b = a - tokens * rng.normal(0.05, 0.02, size=100)  # b is slightly better on every text
    paired = paired_perplexity_ratio(a, b, tokens)
    assert paired.ratio == pytest.approx(perplexity(a, tokens) / perplexity(b, tokens))
    assert paired.significant and paired.ci_low > 1 and paired.n_texts == 100
    a_low, b_high = perplexity_interval(a, tokens)[0], perplexity_interval(b, tokens)[1]
    assert a_low < b_high  # separately, the two intervals overlap
    same = paired_perplexity_ratio(a, a, tokens, n_bootstrap=100)
    assert (same.ratio, same.ci_low, same.ci_high, same.significant) == (1.0, 1.0, 1.0, False)
    with pytest.raises(ValueError, match="shapes differ"):
        paired_perplexity_ratio(a, b[:50], tokens)


def test_paired_auc_difference_resamples_both_score_vectors_alike():
    from privft.metrics import auc_with_ci, paired_auc_difference

    rng = np.random.default_rng(0)
    y = np.repeat([1, 0], [300, 1200])
    a = rng.normal(size=y.size) + 0.5 * y
    same = paired_auc_difference(y, a, a, n_bootstrap=200)
    assert same.difference == 0 and same.ci_low == same.ci_high == 0 and not same.significant
    b = a + 0.15 * y + rng.normal(scale=0.05, size=y.size)  # a slightly stronger, highly correlated attack
    paired = paired_auc_difference(y, a, b, n_bootstrap=500)
    assert paired.difference == pytest.approx(roc_auc_score(y, b) - roc_auc_score(y, a))
    assert paired.significant and paired.ci_low > 0 and (paired.n_members, paired.n_non_members) == (300, 1200)
    ci_a, ci_b = auc_with_ci(y, a, n_bootstrap=500), auc_with_ci(y, b, n_bootstrap=500)
    assert ci_b.ci_low < ci_a.ci_high  # the separate intervals overlap: reading them alone, no ordering
