"""Canary exposure (Carlini et al. 2019, "The Secret Sharer"): pure functions of log-likelihoods.

A canary's secret is compared with R reference secrets drawn from the same space; every input
here is a model log-likelihood (natural log, higher = more likely) and no model is loaded.

- Rank exposure: rank is the 1-based position of the true secret among the R + 1 candidates
  (itself and the references) ordered by log-likelihood, ties counted against the canary, and
  exposure = log2(R + 1) − log2(rank) (Definition 3 with the sampled candidate set as the
  secret space). It lies in [0, log2(R + 1)]. tensorflow_privacy's
  `compute_exposure_interpolation` uses log2(R) for the space, which lets a last-ranked secret
  go slightly negative; the two differ by log2((R + 1) / R).
- Extrapolated exposure (tensorflow_privacy's `compute_exposure_extrapolation`, Carlini et al.
  §4.3): fit a skew-normal to the references' negative log-likelihoods and take
  −log2 CDF(true secret's NLL), which resolves exposures far beyond log2(R + 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MIN_FIT_SAMPLES = 3  # the skew-normal has three parameters


@dataclass(frozen=True)
class CanaryExposure:
    """Exposure of one canary, in bits, from its rank and from the skew-normal extrapolation."""

    secret: str
    rank: int  # 1-based among the secret and its references; 1 = the most likely candidate
    n_alternatives: int
    exposure_rank: float
    exposure_extrapolated: float

    @property
    def max_exposure(self) -> float:
        """The highest rank exposure the references can resolve: log2(n_alternatives + 1)."""
        return math.log2(self.n_alternatives + 1)

    @classmethod
    def measure(cls, secret: str, true_logp: float, alternative_logps: np.ndarray,
                secret_space_size: int | None = None) -> CanaryExposure:
        """Both exposure estimates of `secret` against the references' log-likelihoods."""
        alternatives = _check_inputs(true_logp, alternative_logps)
        return cls(
            secret=secret,
            rank=rank_among(true_logp, alternatives),
            n_alternatives=len(alternatives),
            exposure_rank=exposure_by_rank(true_logp, alternatives),
            exposure_extrapolated=exposure_by_extrapolation(true_logp, alternatives, secret_space_size),
        )


def exposure_from_rank(rank: int, n_candidates: int) -> float:
    """log2(n_candidates) − log2(rank), for a 1-based rank among candidates that include the secret."""
    if not 1 <= rank <= n_candidates:
        raise ValueError(f"rank={rank} must be between 1 and n_candidates={n_candidates}; "
                         "the rank is 1-based among candidates that include the true secret")
    return math.log2(n_candidates) - math.log2(rank)


def rank_among(true_logp: float, alternative_logps: np.ndarray) -> int:
    """1-based rank of the true secret by log-likelihood; alternatives tied with it rank before it."""
    alternatives = _check_inputs(true_logp, alternative_logps)
    return 1 + int(np.count_nonzero(alternatives >= true_logp))


def exposure_by_rank(true_logp: float, alternative_logps: np.ndarray) -> float:
    """log2(R + 1) − log2(rank) over the true secret and its R alternatives (ties count against it)."""
    alternatives = _check_inputs(true_logp, alternative_logps)
    return exposure_from_rank(rank_among(true_logp, alternatives), len(alternatives) + 1)


def exposure_by_extrapolation(true_logp: float, alternative_logps: np.ndarray,
                              secret_space_size: int | None = None) -> float:
    """−log2 CDF of the true secret's NLL under a skew-normal fitted to the alternatives' NLLs.

    Where the CDF underflows, the log-concave tail bound CDF(x) ≤ pdf(x) / (d/dx log pdf)(x)
    stands in (tight in the far tail, and it can only lower the exposure). With
    `secret_space_size`, the result is capped at log2(secret_space_size), the exposure of a
    secret ranked first among all possible secrets.
    """
    alternatives = _check_inputs(true_logp, alternative_logps)
    if len(alternatives) < MIN_FIT_SAMPLES or np.ptp(alternatives) == 0:
        raise ValueError(f"The extrapolation needs at least {MIN_FIT_SAMPLES} alternatives with different "
                         f"log-likelihoods, got {len(alternatives)} spanning {np.ptp(alternatives):g} nats; "
                         "draw more reference secrets")
    shape, loc, scale = stats.skewnorm.fit(-alternatives)
    nll = -float(true_logp)
    log_cdf = float(stats.skewnorm.logcdf(nll, shape, loc, scale))
    if not math.isfinite(log_cdf):
        log_cdf = _log_tail_bound(nll, shape, loc, scale)
    exposure = max(0.0, -log_cdf / math.log(2))
    if secret_space_size is not None:
        exposure = min(exposure, math.log2(secret_space_size))
    return exposure


def summarize(exposures: Sequence[CanaryExposure]) -> dict[str, float]:
    """Mean and max of both estimates over the canaries, and the rank estimate's ceiling."""
    if not exposures:
        raise ValueError("No canary exposures to summarise; measure at least one canary")
    by_rank = [e.exposure_rank for e in exposures]
    extrapolated = [e.exposure_extrapolated for e in exposures]
    return {
        "exposure_mean": float(np.mean(by_rank)),
        "exposure_max": float(np.max(by_rank)),
        "exposure_extrapolated_mean": float(np.mean(extrapolated)),
        "exposure_extrapolated_max": float(np.max(extrapolated)),
        "exposure_ceiling": max(e.max_exposure for e in exposures),
    }


def _log_tail_bound(x: float, shape: float, loc: float, scale: float) -> float:
    """log of pdf(x) / (d/dx log pdf)(x): an upper bound on the skew-normal's log CDF left of its mode."""
    z = (x - loc) / scale
    ratio = math.exp(stats.norm.logpdf(shape * z) - stats.norm.logcdf(shape * z))  # φ(az) / Φ(az)
    slope = (-z + shape * ratio) / scale
    return float(stats.skewnorm.logpdf(x, shape, loc, scale)) - math.log(slope)


def _check_inputs(true_logp: float, alternative_logps: np.ndarray) -> np.ndarray:
    """The alternatives as a float64 vector, refusing an empty or non-finite input."""
    alternatives = np.asarray(alternative_logps, dtype=np.float64)
    if alternatives.ndim != 1 or alternatives.size == 0:
        raise ValueError(f"alternative_logps must be a non-empty 1-D array, got shape {alternatives.shape}")
    if not math.isfinite(true_logp) or not np.isfinite(alternatives).all():
        raise ValueError("Log-likelihoods must be finite; check the model's scores for NaN or infinity")
    return alternatives
