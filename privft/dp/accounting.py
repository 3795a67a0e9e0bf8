"""Privacy accounting for DP-LoRA: the default δ, noise calibrated from a target ε, and ε spent so far.

The PRV accountant (Gopi et al. 2021, arXiv 2106.02848) calibrates the noise and reports ε; RDP
is reported beside it for reference only (it is looser and cannot calibrate ε ≤ 0.1 at δ = 1e-5).
Both assume Poisson sampling with rate `sample_rate`, which `privft.dp.sampling` implements.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import asdict, dataclass

from opacus.accountants import PRVAccountant, RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

EPS_ERROR = 0.01  # PRV's allowed error in ε (at most; 1 % of the target for small ε); reported ε is the upper bound
# The largest target ε privft calibrates σ for; DPSettings refuses more when it is built, before any file is written.
# opacus' bisection evaluates PRV's ε about 22 times, and each evaluation slows as σ shrinks (q = 0.04, T = 75:
# σ = 0.3 takes 3 s, 0.12 takes 12 s, 0.1 35 s, 0.08 65 s); at σ ≤ 0.09 PRV's ε is infinite, so a target near the
# largest finite ε takes many minutes or is never reached (ε = 1,000: no answer after 300 s). Calibration time on 2
# loaded CPU cores: at q = 0.04, T = 75 (200 sequences, batch 8, 3 epochs) ε = 8 takes 4 s, 50 12 s, 100 18 s, 150
# 44 s, 200 over 40 s; ε = 100 takes 17 s at q = 0.25, T = 16 and 52 s at q = 0.008, T = 375; at q = 0.01, T = 3,000
# ε = 8 takes 7 s, 30 36 s and 100 over 75 s. 100 is also the largest ε privft's experiments use (the SOFT paper's
# Table 5 row), and beyond it an (ε, δ) guarantee bounds nothing (e^100 ≈ 10^43).
MAX_TARGET_EPSILON = 100.0
TOO_LARGE = ("the noise calibration slows steeply above it (100 takes about 20 s, 1,000 gave no answer in 5 "
             "minutes), and there the guarantee bounds nothing; to train without DP, leave the target ε unset.")


def eps_error(target_epsilon: float) -> float:
    """PRV's discretisation error for a budget: 0.01, or 1 % of a smaller ε, so the error never dominates it.

    With a fixed 0.01 an ε = 0.01 run is calibrated against a bound that is all error: σ = 1280
    where 137.5 suffices (q = 0.15, 14 steps), and every reported ε reads 0.00999.
    """
    return min(EPS_ERROR, target_epsilon / 100)


def default_delta(n_examples: int) -> float:
    """δ = min(1e-5, 1/N^1.1): well below 1/N, the chance of leaking one of N records outright."""
    if n_examples < 1:
        raise ValueError(f"n_examples={n_examples} must be a positive number of training sequences.")
    return min(1e-5, 1.0 / n_examples ** 1.1)


def group_privacy(epsilon: float, delta: float, k: int) -> tuple[float, float]:
    """(kε, k·e^((k−1)ε)·δ), δ capped at 1: the guarantee of a text that fills k training sequences (group privacy)."""
    if k < 1:
        raise ValueError(f"k={k} must be a positive number of copies.")
    if math.log(k) + (k - 1) * epsilon + math.log(delta) >= 0:  # vacuous; checked in logs, as e^((k−1)ε) overflows
        return k * epsilon, 1.0
    return k * epsilon, k * math.exp((k - 1) * epsilon) * delta


@dataclass(frozen=True)
class Calibration:
    """The DP-SGD settings that yield (target_epsilon, delta) after `steps` noised steps at `sample_rate`."""

    target_epsilon: float
    delta: float
    sample_rate: float  # q: each training sequence enters each logical batch independently with this probability
    steps: int  # T: noised optimizer steps the budget was calibrated for; never run more
    noise_multiplier: float  # σ: noise std per coordinate = σ × max_grad_norm, before dividing by the batch size

    def to_dict(self) -> dict[str, float | int]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


def calibrate(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> Calibration:
    """Solve σ so that the PRV ε after `steps` Poisson-sampled steps is at most `target_epsilon`."""
    if not target_epsilon > 0 or not math.isfinite(target_epsilon):
        raise ValueError(f"target_epsilon={target_epsilon!r} must be a positive finite number.")
    if target_epsilon > MAX_TARGET_EPSILON:
        raise ValueError(f"target_epsilon={target_epsilon!r} must be at most {MAX_TARGET_EPSILON:g}: {TOO_LARGE}")
    if not 0 < delta < 1:
        raise ValueError(f"delta={delta!r} must be in (0, 1); the default min(1e-5, 1/N^1.1) is a safe choice.")
    if not 0 < sample_rate < 1:
        raise ValueError(f"sample_rate={sample_rate!r} must be in (0, 1): the logical batch must be smaller than "
                         "the training set.")
    if steps < 1:
        raise ValueError(f"steps={steps} must be at least 1.")
    sigma = _solve_sigma(target_epsilon, delta, sample_rate, steps)
    return Calibration(target_epsilon, delta, sample_rate, steps, sigma)


@functools.lru_cache(maxsize=64)
def _solve_sigma(target_epsilon: float, delta: float, sample_rate: float, steps: int) -> float:
    """opacus' binary search on the PRV ε (seconds per call; cached, since runs in a grid often share it)."""
    return float(get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate,
                                      steps=steps, accountant="prv", epsilon_tolerance=min(0.01, target_epsilon / 100),
                                      eps_error=eps_error(target_epsilon)))


History = list[tuple[float, float, int]]  # opacus accountant history: (σ, q, steps) runs


def epsilon_spent(history: History, delta: float, target_epsilon: float) -> float:
    """ε spent after the noised steps in `history`: the PRV upper bound, the guarantee privft reports; 0 before any.

    The accountant's error is that of the budget's calibration (`eps_error(target_epsilon)`).
    """
    if not history:
        return 0.0
    accountant = PRVAccountant()
    accountant.history = [tuple(entry) for entry in history]
    return float(accountant.get_epsilon(delta, eps_error=eps_error(target_epsilon)))


def epsilon_rdp(history: History, delta: float) -> float:
    """The looser RDP ε for the same history, for comparison with papers that report it (seconds per call)."""
    if not history:
        return 0.0
    accountant = RDPAccountant()
    accountant.history = [tuple(entry) for entry in history]
    with warnings.catch_warnings():  # "optimal order is the largest alpha": only this reference bound loosens
        warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
        return float(accountant.get_epsilon(delta))
