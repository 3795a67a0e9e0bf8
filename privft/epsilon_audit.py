"""An empirical ε lower bound from one training run (Steinke, Nasr and Jagielski 2023, arXiv 2305.08846).

m canaries are each inserted into training independently with probability ½; the others are
controls. After training the auditor guesses "in" for the k₊ highest-scoring canaries and "out"
for the k₋ lowest, and abstains on the rest: r = k₊ + k₋ guesses, v of them correct. Under
(ε, δ)-DP each guess is right with probability at most q = e^ε / (1 + e^ε), so

    p(ε) = P[Bin(r, q) ≥ v] + 2·m·δ·max_{i=1..v} P[v − i ≤ Bin(r, q) < v] / i

bounds the chance of v or more correct guesses, and the run is not (ε, δ)-DP for any ε with
p(ε) < β = 1 − confidence. The bound is the largest such ε. Pure functions of counts and scores:
no model is loaded here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq
from scipy.special import expit
from scipy.stats import binom

DEFAULT_GUESS_FRACTIONS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)
"""The pre-declared grid: guess on this share of the canaries, half "in" (top), half "out" (bottom)."""

_MAX_EPSILON = 64.0  # q = expit(64) is 1 in float64: every p-value is 1 there, so the root lies below


def one_run_p_value(n_canaries: int, n_guesses: int, n_correct: int, epsilon: float, delta: float) -> float:
    """P-value of `n_correct` or more right guesses out of `n_guesses` if training were (ε, δ)-DP (Steinke et al.)."""
    _check_counts(n_canaries, n_guesses, n_correct)
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError(f"epsilon={epsilon} must be ≥ 0 and delta={delta} in [0, 1].")
    q = float(expit(epsilon))  # accuracy of ε-DP randomised response
    tail = float(binom.sf(n_correct - 1, n_guesses, q))  # P[Bin(r, q) ≥ v]
    if delta == 0 or n_correct == 0:
        return min(tail, 1.0)
    below = binom.pmf(np.arange(n_correct - 1, -1, -1), n_guesses, q)  # P[Bin = v − i] for i = 1..v
    alpha = float(np.max(np.cumsum(below) / np.arange(1, n_correct + 1)))
    return min(tail + 2 * n_canaries * delta * alpha, 1.0)


def epsilon_lower_bound(n_canaries: int, n_guesses: int, n_correct: int, delta: float,
                        confidence: float = 0.95) -> float:
    """The largest ε that `n_correct` right guesses out of `n_guesses` on `n_canaries` rule out at `confidence`.

    0 when the guesses are no better than chance could make them at ε = 0. With every guess right
    at δ = 0 and 95 %, 100 guesses give 3.49 and 1,000 give 5.81 (the ceilings of the method).
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence={confidence} must be in (0, 1), e.g. 0.95.")
    beta = 1 - confidence

    def excess(epsilon: float) -> float:
        return one_run_p_value(n_canaries, n_guesses, n_correct, epsilon, delta) - beta

    if excess(0.0) >= 0:
        return 0.0
    high = 1.0
    while excess(high) < 0 and high < _MAX_EPSILON:
        high *= 2
    return float(brentq(excess, 0.0, high, xtol=1e-9))


def one_run_guesses(scores: ArrayLike, included: ArrayLike, k_plus: int, k_minus: int) -> tuple[int, int]:
    """(guesses, correct): "in" for the `k_plus` highest scores, "out" for the `k_minus` lowest, abstain between.

    Higher scores mean "more likely inserted". Ties are broken by canary order, which the seeded
    inclusion bits do not depend on, so the break cannot favour the auditor.
    """
    values, inside = _check_scores(scores, included)
    if k_plus < 0 or k_minus < 0 or k_plus + k_minus > len(values):
        raise ValueError(f"k_plus={k_plus} and k_minus={k_minus} must be ≥ 0 with k_plus + k_minus at most the "
                         f"{len(values)} canaries.")
    order = np.argsort(-values, kind="stable")
    correct = int(inside[order[:k_plus]].sum()) + int((~inside[order[len(values) - k_minus:]]).sum())
    return k_plus + k_minus, correct


@dataclass(frozen=True)
class OneRunAudit:
    """An ε lower bound with the counts behind it and how the guesses were chosen."""

    epsilon_lower_bound: float
    n_canaries: int
    n_included: int  # inserted into training; the other n_canaries − n_included are the controls
    n_guesses: int
    n_correct: int
    k_plus: int
    k_minus: int
    delta: float
    confidence: float
    n_strategies: int  # guess counts tried; each is tested at 1 − (1 − confidence) / n_strategies (Bonferroni)
    ceiling: float  # the bound if every guess of the largest strategy were right: no run of this size can show more

    @property
    def strategy(self) -> str:
        """How k₊ and k₋ were fixed, in words, for the report."""
        if self.n_strategies == 1:
            return f"k₊ = {self.k_plus}, k₋ = {self.k_minus} fixed in advance"
        return (f"best of {self.n_strategies} pre-declared guess counts (shares {DEFAULT_GUESS_FRACTIONS} of the "
                f"canaries), each tested at {1 - (1 - self.confidence) / self.n_strategies:.4g} (Bonferroni)")

    def to_dict(self) -> dict:
        """The fields and the strategy as a JSON-ready dict."""
        return {**asdict(self), "strategy": self.strategy}


def audit_one_run(scores: ArrayLike, included: ArrayLike, delta: float, *, confidence: float = 0.95,
                  k_plus: int | None = None, k_minus: int | None = None) -> OneRunAudit:
    """The ε lower bound of one run from each canary's score (higher = inserted) and its inclusion bit.

    Give `k_plus` and `k_minus` to test one guess count fixed in advance; otherwise every share in
    `DEFAULT_GUESS_FRACTIONS` is tried (k₊ = k₋ = ⌊share · m / 2⌋, at least 1) and the best bound
    kept, each tested at the Bonferroni-corrected confidence, so the choice costs no validity.
    """
    values, inside = _check_scores(scores, included)
    m = len(values)
    strategies = guess_strategies(m, k_plus, k_minus)
    level = 1 - (1 - confidence) / len(strategies)
    results = []
    for plus, minus in strategies:
        guesses, correct = one_run_guesses(values, inside, plus, minus)
        results.append((epsilon_lower_bound(m, guesses, correct, delta, level), plus, minus, guesses, correct))
    bound, plus, minus, guesses, correct = max(results, key=lambda result: result[0])
    largest = max(p + q for p, q in strategies)
    return OneRunAudit(
        epsilon_lower_bound=bound, n_canaries=m, n_included=int(inside.sum()), n_guesses=guesses,
        n_correct=correct, k_plus=plus, k_minus=minus, delta=delta, confidence=confidence,
        n_strategies=len(strategies), ceiling=epsilon_lower_bound(m, largest, largest, delta, level),
    )


def guess_strategies(n_canaries: int, k_plus: int | None = None, k_minus: int | None = None) -> list[tuple[int, int]]:
    """The (k₊, k₋) pairs an audit tries: the one fixed in advance, or the pre-declared grid's."""
    if (k_plus is None) != (k_minus is None):
        raise ValueError("Give both k_plus and k_minus (a guess count fixed in advance), or neither for the "
                         "pre-declared grid.")
    if k_plus is not None:
        return [(k_plus, k_minus)]
    return sorted({(max(1, int(f * n_canaries) // 2),) * 2 for f in DEFAULT_GUESS_FRACTIONS})


def _check_counts(n_canaries: int, n_guesses: int, n_correct: int) -> None:
    """Refuse counts that no audit can produce."""
    counts = {"n_canaries": n_canaries, "n_guesses": n_guesses, "n_correct": n_correct}
    if not all(isinstance(value, int | np.integer) for value in counts.values()):
        raise ValueError(f"Counts must be integers, got {counts}.")
    if not 0 <= n_correct <= n_guesses <= n_canaries:
        raise ValueError(f"Counts must satisfy 0 ≤ n_correct ≤ n_guesses ≤ n_canaries, got {counts}: a guess is "
                         "made on a canary, and only a guess can be correct.")


def _check_scores(scores: ArrayLike, included: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Scores as float64 and inclusion bits as bool, one each per canary, all finite."""
    values = np.asarray(scores, dtype=np.float64)
    inside = np.asarray(included)
    if values.ndim != 1 or values.shape != inside.shape or values.size == 0:
        raise ValueError(f"scores {values.shape} and included {inside.shape} must be 1-D, non-empty and of one "
                         "length: one score and one inclusion bit per canary.")
    if not np.isin(inside, (0, 1)).all():
        raise ValueError("included must hold booleans (or 0/1): whether each canary was inserted into training.")
    if not np.isfinite(values).all():
        raise ValueError(f"{int((~np.isfinite(values)).sum())} canary score(s) are not finite; check the model's "
                         "log-likelihoods for NaN or infinity.")
    return values, inside.astype(bool)

