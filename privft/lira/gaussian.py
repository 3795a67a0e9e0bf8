"""Batched Gaussian models of score vectors: covariance estimators, jittered Cholesky, log-densities.

Every array carries a leading batch axis (one Gaussian per example). Positions an example does
not have (its text is shorter than the window) are masked out: their residuals are zero and
their block of the covariance is the identity, so they add the same constant to every
log-density and cancel in every likelihood ratio.
"""

from __future__ import annotations

import numpy as np

ESTIMATORS = ("univariate", "independent", "oas")
JITTER = 1e-6  # relative to the mean variance; raised tenfold per failed Cholesky
MAX_JITTER = 1e-2


def structured_covariance(covariance: np.ndarray, n_samples: np.ndarray, valid: np.ndarray,
                          estimator: str) -> np.ndarray:
    """Apply an estimator's structure to empirical covariances (B, L, L) from `n_samples` (B,) residuals.

    "independent" keeps the diagonal, "oas" shrinks the full matrix (`oas_shrink`), and
    "univariate" expects L = 1, where every estimator agrees. Invalid positions get an identity block.
    """
    if estimator in ("independent", "univariate"):
        covariance = np.einsum("bii->bi", covariance)[:, :, None] * np.eye(covariance.shape[1])
    elif estimator == "oas":
        covariance = oas_shrink(covariance, n_samples, valid)
    else:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}.")
    return with_missing_identity(covariance, valid)


def oas_shrink(covariance: np.ndarray, n_samples: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Oracle Approximating Shrinkage (Chen et al. 2010) of a batch of empirical covariances.

    The same formula as scikit-learn's `sklearn.covariance.oas`, batched, with each matrix's
    dimension p taken as its number of valid positions:
    shrinkage = min(1, (‖S‖²/p² + (tr S / p)²) / ((n + 1)(‖S‖²/p² − (tr S / p)² / p))),
    Σ = (1 − shrinkage) S + shrinkage (tr S / p) I.
    """
    p = valid.sum(axis=1).astype(float)
    trace_mean = np.trace(covariance, axis1=1, axis2=2) / p
    squares_mean = np.einsum("bij,bij->b", covariance, covariance) / p**2
    numerator = squares_mean + trace_mean**2
    denominator = (np.asarray(n_samples, dtype=float) + 1) * (squares_mean - trace_mean**2 / p)
    with np.errstate(divide="ignore", invalid="ignore"):
        shrinkage = np.where(denominator > 0, np.minimum(numerator / denominator, 1.0), 1.0)
    shrunk = (1 - shrinkage)[:, None, None] * covariance
    diagonal = np.einsum("bii->bi", shrunk)
    diagonal += (shrinkage * trace_mean)[:, None] * valid
    return shrunk


def with_missing_identity(covariance: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Zero the rows and columns of invalid positions and put 1 on their diagonal."""
    mask = valid[:, :, None] & valid[:, None, :]
    out = np.where(mask, covariance, 0.0)
    np.einsum("bii->bi", out)[...] += ~valid
    return out


def jittered_cholesky(covariance: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Lower Cholesky factors of a batch, adding jitter × mean variance to the valid diagonal until all succeed.

    Jitter scales with the variance of the valid positions only, so padding a text leaves its factor unchanged.
    """
    scale = np.einsum("bii,bi->b", covariance, valid) / valid.sum(axis=1)
    if (scale <= 0).any():
        raise ValueError(f"Example {int(np.argmax(scale <= 0))} has the same scores in every shadow model (zero "
                         "variance), so no Gaussian fits it; check the stored losses, or use variance='global'.")
    scale = scale[:, None] * valid
    jitter = JITTER
    while True:
        try:
            return np.linalg.cholesky(covariance + (jitter * scale)[:, :, None] * np.eye(covariance.shape[1]))
        except np.linalg.LinAlgError:
            if jitter >= MAX_JITTER:
                raise ValueError(
                    f"Covariance is not positive definite even with jitter {jitter:g} × the mean variance; "
                    "the shadow scores are degenerate (e.g. identical across models). Check the stored "
                    "losses, or use estimator='independent'.") from None
            jitter *= 10


def whiten(chol: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """L⁻¹ v for each batch item: chol (B, L, L), vectors (B, L) → (B, L)."""
    return np.linalg.solve(chol, vectors[:, :, None])[:, :, 0]


def log_density(x: np.ndarray, mean: np.ndarray, chol: np.ndarray) -> np.ndarray:
    """log N(x | mean, chol cholᵀ) per batch item; x and mean (B, L), chol (B, L, L)."""
    z = whiten(chol, x - mean)
    log_det = 2 * np.log(np.einsum("bii->bi", chol)).sum(axis=1)
    return -0.5 * (np.einsum("bl,bl->b", z, z) + log_det + x.shape[1] * np.log(2 * np.pi))
