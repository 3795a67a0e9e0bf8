"""LiRA (Carlini et al. 2022) over per-token loss vectors, with sequence-aware estimators.

Each example's statistic under the shadow models is modelled as a Gaussian, IN (models that
trained on it) and OUT (models that did not). The statistic is one scalar per text
("univariate", the naive LiRA) or the vector of per-token values over a fixed window, with a
diagonal ("independent") or OAS-shrunk full ("oas") covariance, estimated per class
("classwise") or pooled over IN and OUT residuals ("shared"), as in Rossi, Aerni, Zhang and
Tramèr, "Membership Inference Attacks on Sequence Models" (arXiv 2506.05126).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import norm

from privft.lira.gaussian import (
    ESTIMATORS,
    jittered_cholesky,
    log_density,
    structured_covariance,
    whiten,
    with_missing_identity,
)
from privft.lira.inputs import check_shadow_scores, check_target, check_used, confidence

COVARIANCES = ("shared", "classwise")
VARIANCES = ("per_example", "global", "auto")
LOCATIONS = ("mean", "median")
STATISTICS = ("loss", "logit")
CHUNK = 512  # examples per block of covariance work; bounds temporaries to ~100 MB at 64 × 64 positions


@dataclass
class LiRA:
    """The likelihood-ratio attack; `score_samples` gives one score per example, higher = member.

    Online: log N(s | IN) − log N(s | OUT). Offline (OUT models only; `covariance` does not
    apply): log Φ(z) of the one-sided test against OUT along the all-positions direction,
    z = mᵀΣ⁻¹(s − μ) / √(mᵀΣ⁻¹m) with m = 1 on scored positions; in one dimension this is the
    paper's Pr[Z_out ≤ s]. `variance="global"` pools one covariance over all examples (residuals
    centred per example); "auto" does that, with a note in `warnings_`, when an example has fewer
    than `min_models` models of a class.
    """

    estimator: str = "oas"  # "univariate" (mean over tokens), "independent" (diagonal) or "oas"
    covariance: str = "shared"  # "shared" (pooled IN/OUT residuals) or "classwise"
    online: bool = True
    variance: str = "per_example"  # or "global" (fixed variance), or "auto"
    location: str = "mean"  # or "median"
    statistic: str = "loss"  # "loss": −ℓ per token; "logit": log p − log(1 − p), p = e^−ℓ
    min_models: int = 2
    warnings_: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        """Check every option names a known choice."""
        for name, choices in (("estimator", ESTIMATORS), ("covariance", COVARIANCES), ("variance", VARIANCES),
                              ("location", LOCATIONS), ("statistic", STATISTICS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"The '{name}' parameter of LiRA must be one of {choices}. "
                                 f"Got {getattr(self, name)!r} instead.")
        if self.min_models < 2:
            raise ValueError(f"The 'min_models' parameter of LiRA must be at least 2. Got {self.min_models} instead.")

    def fit(self, losses: np.ndarray, keep: np.ndarray, used: np.ndarray | None = None) -> LiRA:
        """Estimate the IN/OUT Gaussians from shadow losses (n_models, n_examples, n_positions), NaN-padded.

        `used` (n_models, n_examples) leaves out the (model, example) scores that are False.
        """
        losses, keep = check_shadow_scores(losses, keep)
        used = check_used(used, keep)
        self.warnings_ = []
        self.valid_ = ~np.isnan(losses[0])
        stats = np.nan_to_num(self._statistic(losses)).transpose(1, 0, 2)  # (examples, models, dims)
        n_examples, _, dims = stats.shape
        valid = self._dims_valid(self.valid_)
        masks = {"out": ~keep.T & used.T} | ({"in": keep.T & used.T} if self.online else {})
        counts = {name: mask.sum(axis=1) for name, mask in masks.items()}
        self._check_counts(counts)
        per_example = self._per_example_variance(counts)
        groups = self._groups(masks)
        rows = {g: sum(counts[c] for c in members) for g, members in groups.items()}
        self.location_ = {c: np.empty((n_examples, dims)) for c in masks}
        self.chol_ = {}
        chol = {g: np.empty((n_examples, dims, dims)) for g in groups}
        pooled = {g: np.zeros((dims, dims)) for g in groups}
        for start in range(0, n_examples, CHUNK):
            block = slice(start, start + CHUNK)
            for c, mask in masks.items():
                self.location_[c][block] = self._locate(stats[block], mask[block])
            for group, members in groups.items():
                residuals = sum(np.where(masks[c][block, :, None], stats[block] - self.location_[c][block, None], 0)
                                for c in members)
                scatter = np.matmul(residuals.transpose(0, 2, 1), residuals)
                if per_example:
                    covariance = scatter / rows[group][block, None, None]
                    chol[group][block] = jittered_cholesky(
                        structured_covariance(covariance, rows[group][block], valid[block], self.estimator),
                        valid[block])
                else:
                    pooled[group] += scatter.sum(axis=0)
        for group, members in groups.items():
            if not per_example:
                chol[group] = self._global_cholesky(pooled[group], rows[group], valid)
            self.chol_ |= {c: chol[group] for c in members}
        return self

    def score_samples(self, losses: np.ndarray) -> np.ndarray:
        """Scores (n_examples,) of a target model's losses (n_examples, n_positions); higher = member."""
        losses = check_target(losses, self.valid_)
        x = np.nan_to_num(self._statistic(losses[None])[0])
        valid = self._dims_valid(self.valid_).astype(float)
        scores = np.empty(len(x))
        for start in range(0, len(x), CHUNK):
            block = slice(start, start + CHUNK)
            out = (x[block], self.location_["out"][block], self.chol_["out"][block])
            if self.online:
                scores[block] = (log_density(x[block], self.location_["in"][block], self.chol_["in"][block])
                                 - log_density(*out))
            else:
                direction = whiten(out[2], valid[block])
                z = np.einsum("bl,bl->b", direction, whiten(out[2], out[0] - out[1]))
                scores[block] = norm.logcdf(z / np.linalg.norm(direction, axis=1))
        return scores

    def _statistic(self, losses: np.ndarray) -> np.ndarray:
        """The modelled statistic (models, examples, dims); univariate keeps one dim: the mean loss."""
        if self.estimator == "univariate":
            losses = np.nanmean(losses, axis=2, keepdims=True)
        return confidence(losses, self.statistic)

    def _dims_valid(self, valid: np.ndarray) -> np.ndarray:
        """Which modelled dimensions each example has."""
        return np.ones((len(valid), 1), bool) if self.estimator == "univariate" else valid

    def _check_counts(self, counts: dict[str, np.ndarray]) -> None:
        """Every example needs at least one model of each class the attack uses."""
        for name, count in counts.items():
            if (count < 1).any():
                example = int(np.argmax(count < 1))
                raise ValueError(f"Example {example} is {name.upper()} in none of the shadow models; "
                                 "LiRA needs both IN and OUT models per example (online) or OUT models (offline). "
                                 "Plan the shadows so every example is IN for about half of them.")

    def _per_example_variance(self, counts: dict[str, np.ndarray]) -> bool:
        """Whether to estimate one covariance per example, or refuse or fall back when models are too few."""
        if self.variance == "global":
            return False
        fewest = min(int(c.min()) for c in counts.values())
        if fewest >= self.min_models:
            return True
        message = (f"Some example has only {fewest} shadow model(s) of a class, below min_models={self.min_models} "
                   f"for a per-example {self.estimator} covariance")
        if self.variance == "per_example":
            raise ValueError(f"{message}; train more shadows, or use variance='global' (or 'auto').")
        self.warnings_.append(f"{message}: fell back to a global (fixed) variance pooled over all examples.")
        return False

    def _locate(self, stats: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Mean or median over one class's models, per example and dimension."""
        masked = np.where(mask[:, :, None], stats, np.nan)
        return np.nanmean(masked, axis=1) if self.location == "mean" else np.nanmedian(masked, axis=1)

    def _groups(self, masks: dict[str, np.ndarray]) -> dict[str, tuple[str, ...]]:
        """Which classes share a covariance: pooled when shared (online), else one per class."""
        if self.online and self.covariance == "shared":
            return {"shared": tuple(masks)}
        return {name: (name,) for name in masks}

    def _global_cholesky(self, scatter: np.ndarray, rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Cholesky factors of one covariance pooled over all examples, restricted to each example's positions."""
        pairs = np.einsum("b,bl,bk->lk", rows.astype(float), valid, valid)  # residual pairs behind each entry
        pooled = np.divide(scatter, pairs, out=np.zeros_like(pairs), where=pairs > 0)
        if not np.diag(pooled).any():
            raise ValueError("The pooled (global) variance is zero: no example has two shadow models of a class "
                             "whose scores could differ. Train more shadows (leave-one-out needs at least 6).")
        has = np.diag(pairs)[None] > 0
        pooled = structured_covariance(pooled[None], np.array([rows.sum()]), has, self.estimator)[0]
        chol = np.empty((len(valid), *pooled.shape))
        for start in range(0, len(valid), CHUNK):
            block = slice(start, start + CHUNK)
            chol[block] = jittered_cholesky(with_missing_identity(
                np.broadcast_to(pooled, chol[block].shape), valid[block]), valid[block])
        return chol
