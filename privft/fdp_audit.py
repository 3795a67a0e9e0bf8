"""A Gaussian-DP lower bound from one training run (Mahloujifar, Melis and Chaudhuri, ICML 2025, arXiv 2410.22235).

The game is privft.epsilon_audit's: m canaries, each inserted with probability ½, k guesses
(the k₊ highest scores "in", the k₋ lowest "out"), v of them right. Under μ-GDP an event of
probability x without a canary has probability at most B(x) = Φ(Φ⁻¹(x) + μ) with it, so
B⁻¹(y) = Φ(Φ⁻¹(y) − μ). The paper's recursion with a cap (its `audit_rh_with_cap`) starts from
r = β·v/m, h = β·(k − v)/m with β = 1 − confidence, and for i = v − 1, …, 0 sets

    h ← max(h, B⁻¹(r)),   r ← min(r + i/(k − i) · (h_new − h_old), 1);

μ-GDP is ruled out at that confidence when r + h > k/m at the end. The bound is the largest
such μ, and its ε at the run's δ is μ-GDP's: δ(ε) = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) (Dong,
Roth and Su 2022, Corollary 2.13). That ε is a lower bound for mechanisms whose privacy is
Gaussian-shaped, as DP-SGD's is over many steps; Steinke et al.'s bound needs no such shape.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr, ndtri

from privft.epsilon_audit import _check_counts, _check_scores, guess_strategies, one_run_guesses

REFERENCE_DELTA = 1e-5
"""The δ at which μ is read as an ε when the run has none (δ = 0 gives every μ > 0 an infinite ε)."""

_MAX_MU = 64.0  # Φ(Φ⁻¹(y) − 64) is 0 in float64 for every y < 1: no claim beyond is ruled out differently


def gdp_rejection_margin(n_canaries: int, n_guesses: int, n_correct: int, mu: float,
                         confidence: float = 0.95) -> float:
    """The paper's r + h − k/m: positive when `n_correct` right of `n_guesses` rule out μ-GDP at `confidence`."""
    _check_counts(n_canaries, n_guesses, n_correct)
    if mu < 0 or not 0 < confidence < 1:
        raise ValueError(f"mu={mu} must be ≥ 0 and confidence={confidence} in (0, 1), e.g. 0.95.")
    beta = 1 - confidence
    right, wrong = beta * n_correct / n_canaries, beta * (n_guesses - n_correct) / n_canaries
    for i in range(n_correct - 1, -1, -1):
        raised = max(wrong, float(ndtr(ndtri(right) - mu)))  # B⁻¹(r): the least mass a wrong guess needs
        if raised == wrong:  # neither r nor h can change any more
            break
        right, wrong = min(right + i / (n_guesses - i) * (raised - wrong), 1.0), raised
    return right + wrong - n_guesses / n_canaries


def mu_lower_bound(n_canaries: int, n_guesses: int, n_correct: int, confidence: float = 0.95) -> float:
    """The largest μ whose μ-GDP `n_correct` right guesses out of `n_guesses` on `n_canaries` rule out; 0 if none."""

    def margin(mu: float) -> float:
        return gdp_rejection_margin(n_canaries, n_guesses, n_correct, mu, confidence)

    if margin(0.0) <= 0:
        return 0.0
    high = 1.0
    while margin(high) > 0:
        if high >= _MAX_MU:
            return _MAX_MU
        high *= 2
    return float(brentq(margin, 0.0, high, xtol=1e-9))


def gdp_delta(mu: float, epsilon: float) -> float:
    """The δ at which μ-GDP is (ε, δ)-DP: Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2)."""
    if mu <= 0:
        return 0.0
    upper, lower = float(log_ndtr(-epsilon / mu + mu / 2)), epsilon + float(log_ndtr(-epsilon / mu - mu / 2))
    return math.exp(upper) * -math.expm1(lower - upper) if lower < upper else 0.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ε at which μ-GDP is (ε, δ)-DP; 0 when δ is at least δ(0) = 2Φ(μ/2) − 1."""
    if mu < 0 or not 0 < delta <= 1:
        raise ValueError(f"mu={mu} must be ≥ 0 and delta={delta} in (0, 1]: μ-GDP is (ε, 0)-DP for no finite ε.")
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0

    def excess(epsilon: float) -> float:  # in logs, floored at float64's least (subnormal) number: finite for brentq
        return math.log(max(gdp_delta(mu, epsilon), 5e-324)) - math.log(delta)

    high = 1.0
    while excess(high) > 0:
        high *= 2
    return float(brentq(excess, 0.0, high, xtol=1e-9))


def fdp_epsilon_lower_bound(n_canaries: int, n_guesses: int, n_correct: int, delta: float,
                            confidence: float = 0.95) -> float:
    """The ε at `delta` (REFERENCE_DELTA when 0) of the largest μ-GDP the guesses rule out at `confidence`."""
    return gdp_epsilon(mu_lower_bound(n_canaries, n_guesses, n_correct, confidence), delta or REFERENCE_DELTA)


@dataclass(frozen=True)
class FdpOneRunAudit:
    """The Gaussian-DP bound of one run, as μ and as ε at δ, with its guesses and its ceiling."""

    mu_lower_bound: float
    epsilon_lower_bound: float  # μ-GDP's ε at `delta`
    n_guesses: int
    n_correct: int
    k_plus: int
    k_minus: int
    delta: float  # the run's δ, or REFERENCE_DELTA when it has none
    confidence: float
    n_strategies: int  # guess counts tried, each at 1 − (1 − confidence) / n_strategies (Bonferroni)
    mu_ceiling: float  # μ if every guess of the largest strategy were right
    ceiling: float  # its ε at `delta`: no run of this size can show more

    def to_dict(self) -> dict:
        """The fields and the analysis' name as a JSON-ready dict."""
        return {**asdict(self), "analysis": "f-DP (Gaussian), Mahloujifar et al. 2025"}


def audit_one_run_fdp(scores: ArrayLike, included: ArrayLike, delta: float, *, confidence: float = 0.95,
                      k_plus: int | None = None, k_minus: int | None = None) -> FdpOneRunAudit:
    """The Gaussian-DP bound of one run from each canary's score (higher = inserted) and its inclusion bit.

    The guess counts are `privft.epsilon_audit.audit_one_run`'s: the pair given, or the grid with
    Bonferroni; the best μ is kept.
    """
    values, inside = _check_scores(scores, included)
    m = len(values)
    strategies = guess_strategies(m, k_plus, k_minus)
    level = 1 - (1 - confidence) / len(strategies)
    counts = [(plus, minus, *one_run_guesses(values, inside, plus, minus)) for plus, minus in strategies]
    mu, plus, minus, guesses, correct = max(((mu_lower_bound(m, g, c, level), p, q, g, c) for p, q, g, c in counts),
                                            key=lambda result: result[0])  # ties: the first, as audit_one_run
    largest = max(p + q for p, q in strategies)
    ceiling = mu_lower_bound(m, largest, largest, level)
    at = delta or REFERENCE_DELTA
    return FdpOneRunAudit(
        mu_lower_bound=mu, epsilon_lower_bound=gdp_epsilon(mu, at), n_guesses=guesses, n_correct=correct,
        k_plus=plus, k_minus=minus, delta=at, confidence=confidence, n_strategies=len(strategies),
        mu_ceiling=ceiling, ceiling=gdp_epsilon(ceiling, at),
    )

