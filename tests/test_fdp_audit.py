"""The f-DP (Gaussian) one-run bound: jax_privacy's numbers, a slow oracle, ceilings, and mechanisms of known ε."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import norm

from privft.callbacks.one_run import one_run_entry
from privft.dp.accounting import epsilon_spent
from privft.epsilon_audit import audit_one_run, epsilon_lower_bound
from privft.fdp_audit import (
    REFERENCE_DELTA,
    audit_one_run_fdp,
    fdp_epsilon_lower_bound,
    gdp_delta,
    gdp_epsilon,
    gdp_rejection_margin,
    mu_lower_bound,
)
from privft.report import beyond_membership_warnings, epsilon_audit_line
from privft.simulated_audit import SimulatedMechanism, simulated_audits

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero encountered in log")  # opacus' PRV at sample rate 1

# (m, k, v, significance, δ, Steinke ε, f-DP ε) from jax_privacy 2.0.0 (PyPI): auditing._epsilon_one_run and
# auditing._epsilon_one_run_fdp(0, m, k, v, significance, δ), run in a separate environment (brentq xtol 1e-6).
JAX_PRIVACY = [
    (1000, 100, 100, 0.05, 1e-5, 3.465376229385333, 5.5490279999429415),
    (1000, 1000, 1000, 0.05, 1e-5, 5.782283131572193, 12.334570155595598),
    (1000, 200, 180, 0.05, 1e-5, 1.796285070718516, 2.9012429233094306),
    (100, 100, 100, 0.05, 1e-5, 3.4902158675692982, 8.216186103950786),
    (1000, 500, 400, 0.0125, 1e-5, 1.1329937104871728, 1.7268077406722226),
    (64, 32, 32, 0.0125, 1e-5, 1.9151194256281188, 3.6393651300969987),
    (1000, 1000, 600, 0.05, 1e-6, 0.2974438732100577, 0.6733550694855975),
    (10000, 500, 480, 0.05, 1e-3, 0.0, 2.691180656061581),
    (1000, 100, 60, 0.05, 1e-5, 0.04954866357098898, 0.0435230317349967),
]


@pytest.mark.parametrize(("m", "k", "v", "significance", "delta", "steinke", "fdp"), JAX_PRIVACY)
def test_both_bounds_equal_jax_privacys(m, k, v, significance, delta, steinke, fdp):
    assert epsilon_lower_bound(m, k, v, delta, 1 - significance) == pytest.approx(steinke, abs=5e-6)
    assert fdp_epsilon_lower_bound(m, k, v, delta, 1 - significance) == pytest.approx(fdp, abs=5e-6)


def _gaussian_mechanism_delta(sigma: float, epsilon: float) -> float:
    """Balle and Wang's exact δ of the Gaussian mechanism with sensitivity 1 and noise σ."""
    return norm.cdf(0.5 / sigma - epsilon * sigma) - math.exp(epsilon) * norm.cdf(-0.5 / sigma - epsilon * sigma)


def _naive_fdp_epsilon(m: int, k: int, v: int, delta: float, confidence: float) -> float:
    """The paper's test written the slow way: bisect ε, calibrating a Gaussian mechanism's σ to each (ε, δ)."""
    beta = 1 - confidence

    def sigma_for(epsilon: float) -> float:
        low, high = math.log(1e-3), math.log(1e7)  # δ falls as σ grows: bisect in log σ
        for _ in range(100):
            mid = (low + high) / 2
            low, high = (mid, high) if _gaussian_mechanism_delta(math.exp(mid), epsilon) > delta else (low, mid)
        return math.exp(high)

    def rejected(epsilon: float) -> bool:
        shift = 1 / sigma_for(epsilon)
        right, wrong = beta * v / m, beta * (k - v) / m
        for i in reversed(range(v)):  # no early exit: every step of the recursion
            raised = max(wrong, norm.cdf(norm.ppf(right) - shift))
            right, wrong = min(right + i / (k - i) * (raised - wrong), 1.0), raised
        return right + wrong > k / m

    if not rejected(0.0):
        return 0.0
    low, high = 0.0, 64.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if rejected(mid) else (low, mid)
    return low


@pytest.mark.parametrize(("m", "k", "v", "delta"), [(200, 40, 40, 1e-5), (500, 100, 85, 1e-5), (64, 64, 50, 1e-3),
                                                    (1000, 60, 45, 1e-6)])
def test_the_bound_equals_a_slow_oracle_of_the_papers_test(m, k, v, delta):
    assert fdp_epsilon_lower_bound(m, k, v, delta) == pytest.approx(_naive_fdp_epsilon(m, k, v, delta, 0.95), abs=1e-4)


def test_gdp_epsilon_is_the_gaussian_mechanisms_and_agrees_with_privfts_accountant():
    for sigma in (0.6, 1.0, 2.0, 4.0):
        epsilon = gdp_epsilon(1 / sigma, 1e-5)
        assert _gaussian_mechanism_delta(sigma, epsilon) == pytest.approx(1e-5, rel=1e-6)
        assert gdp_delta(1 / sigma, epsilon) == pytest.approx(1e-5, rel=1e-6)
        assert epsilon <= epsilon_spent([(sigma, 1.0, 1)], 1e-5, 8.0) <= epsilon + 0.02  # PRV: an upper bound
    assert gdp_epsilon(0.0, 1e-5) == 0.0 and gdp_epsilon(0.1, 0.5) == 0.0  # δ above δ(0) = 2Φ(μ/2) − 1


def test_perfect_guesses_give_the_ceiling_which_grows_with_the_canaries():
    mus = [mu_lower_bound(m, m, m) for m in (10, 100, 1000, 10000)]
    assert mus == sorted(mus) and mus[0] > 0
    scores, included = np.r_[np.arange(50, 100), np.arange(50)], np.r_[np.ones(50, bool), np.zeros(50, bool)]
    perfect = audit_one_run_fdp(scores, included, 1e-5, k_plus=50, k_minus=50)
    assert perfect.epsilon_lower_bound == pytest.approx(perfect.ceiling) == pytest.approx(
        fdp_epsilon_lower_bound(100, 100, 100, 1e-5))
    assert perfect.ceiling > epsilon_lower_bound(100, 100, 100, 1e-5)  # the f-DP analysis allows more
    assert audit_one_run_fdp(scores, included, 0.0).delta == REFERENCE_DELTA  # no δ in the run: read μ at 1e-5


def test_chance_guessing_rules_out_nothing():
    assert mu_lower_bound(1000, 1000, 500) == 0.0
    assert gdp_rejection_margin(1000, 0, 0, 1.0) == 0.0


@pytest.mark.parametrize("mechanism", [SimulatedMechanism(1.08), SimulatedMechanism(1.09619140625, 0.05, 200)],
                         ids=["gaussian", "subsampled"])
def test_on_mechanisms_of_known_epsilon_both_bounds_stay_below_it_and_fdp_is_tighter(mechanism):
    truth = epsilon_spent(mechanism.history, 1e-5, 8.0)  # ≈ 4 for both
    audits = [simulated_audits(mechanism, 500, 1e-5, seed) for seed in range(20)]
    steinke = np.array([a.epsilon_lower_bound for a, _ in audits])
    fdp = np.array([b.epsilon_lower_bound for _, b in audits])
    assert steinke.max() < truth and fdp.max() < truth
    assert np.mean(fdp >= steinke) >= 0.9 and fdp.mean() > 1.2 * steinke.mean() > 0


@pytest.mark.parametrize(("call", "message"), [
    (lambda: mu_lower_bound(10, 20, 5), "n_guesses ≤ n_canaries"),
    (lambda: mu_lower_bound(10, 5, 5, confidence=1.0), "confidence"),
    (lambda: gdp_epsilon(1.0, 0.0), "delta"),
    (lambda: audit_one_run_fdp([1.0, 2.0], [True, False], 0.0, k_plus=1), "both k_plus and k_minus"),
    (lambda: SimulatedMechanism(0.0), "noise_multiplier > 0"),
])
def test_bad_input_is_refused_with_the_fix(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def _one_run_entry(copies: int, accountant: float | None, n_canaries: int = 100) -> dict:
    """A one-run report entry as privft.callbacks.one_run writes it, from a perfect attack on `n_canaries`."""
    half = n_canaries // 2
    scores, included = np.arange(float(n_canaries)), np.r_[np.zeros(half, bool), np.ones(half, bool)]
    return one_run_entry(scores, included, (accountant, 1e-5) if accountant else None, copies=copies,
                         score="secret log-likelihood (loss)")


def test_a_one_run_entry_keeps_what_recomputes_its_bounds():
    rng = np.random.default_rng(0)
    included = rng.random(200) < 0.5
    scores = rng.normal(size=200) + included  # a weak attack: some guesses wrong
    entry = one_run_entry(scores, included, (8.0, 1e-5), copies=1, score="loss")
    assert entry["included"] == included.tolist() and np.allclose(entry["scores"], scores)
    kept, inside = np.array(entry["scores"]), np.array(entry["included"])
    assert audit_one_run(kept, inside, entry["delta"]).epsilon_lower_bound == entry["epsilon_lower_bound"]
    fdp = audit_one_run_fdp(kept, inside, entry["fdp"]["delta"]).epsilon_lower_bound
    assert fdp == entry["fdp"]["epsilon_lower_bound"]


def test_the_report_shows_both_analyses_with_their_ceilings_and_warns_about_the_protocols_limits():
    entry = _one_run_entry(copies=1, accountant=1.0)
    line = epsilon_audit_line(entry)
    fdp = entry["fdp"]
    assert f"μ ≥ {fdp['mu_lower_bound']:.2f}" in line and f"at most ε ≥ {fdp['ceiling']:.2f}" in line
    assert f"ε ≥ {entry['ceiling']:.2f}" in line and "Mahloujifar" in line
    assert fdp["epsilon_lower_bound"] > entry["epsilon_lower_bound"] > 1.0  # a perfect attack refutes ε = 1 both ways
    assert entry["warnings"] == []
    repeated = _one_run_entry(copies=4, accountant=None)["warnings"]
    assert len(repeated) == 1 and "4 copies per canary" in repeated[0] and "canaries.copies: 1" in repeated[0]
    few = _one_run_entry(copies=1, accountant=8.0, n_canaries=12)
    assert [w.split(":")[0] for w in few["warnings"]] == [
        "12 canaries are too few for a bound that says much", "These 12 canaries cannot refute the accountant's ε = 8"]
    warnings = beyond_membership_warnings(SimpleNamespace(epsilon_audit=few, dataset_inference=None))
    assert warnings[-2:] == few["warnings"] and f"ε ≥ {few['ceiling']:.2f} (Steinke)" in warnings[-1]


def test_the_report_doubts_a_guarantee_only_the_fdp_analysis_exceeds():
    entry = {**_one_run_entry(copies=1, accountant=4.0), "warnings": []}  # Steinke 3.10 ≤ 4 < f-DP: a perfect attack
    assert entry["epsilon_lower_bound"] <= 4.0 < entry["fdp"]["epsilon_lower_bound"]
    found = beyond_membership_warnings(SimpleNamespace(epsilon_audit=entry, dataset_inference=None))
    assert len(found) == 1 and found[0].startswith("DP GUARANTEE IN DOUBT")
