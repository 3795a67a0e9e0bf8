"""Dataset inference (Maini et al. 2024, arXiv 2406.06443): was this set of texts, as a whole, trained on?

Per-text membership scores can sit near chance while the set as a whole leaves a trace. The
features are the audit's per-text attack scores. Each feature's tails are clipped (2.5 % each
side by default) and the features standardised, both with bounds learnt on the fitting part.
A linear model (logistic regression) is fitted to separate a random part of the suspect set
from a random part of the held-out set (texts of the same distribution, never trained on). A
one-sided Welch t-test then asks whether the remaining suspect texts score higher than the
remaining held-out texts. The p-value is reported with both set sizes, beside a built-in
false-positive control: the same test on two random halves of the held-out set, which must not
reject. Pure functions of arrays: no model is loaded here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import ttest_ind
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

DEFAULT_FIT_FRACTION = 0.5
DEFAULT_CLIP_FRACTION = 0.025
MIN_TEXTS = 20  # per set: the control halves the held-out set, and each half is split again into fit and test
MODEL_FREE_SCORES = ("blind_baseline",)  # scores that never read the model are no evidence of training
CONTROL_ALPHA = 0.05  # a control p-value below this means the test is not calibrated on these texts


@dataclass(frozen=True)
class SetTest:
    """One dataset-inference test: its p-value and statistic, and how many texts fitted and tested it."""

    p_value: float
    t_statistic: float
    n_suspect: int
    n_held_out: int
    n_suspect_fit: int
    n_held_out_fit: int
    n_suspect_test: int
    n_held_out_test: int


@dataclass(frozen=True)
class DatasetInferenceResult:
    """The test of the suspect set against the held-out set, and the false-positive control beside it."""

    test: SetTest
    control: SetTest  # the held-out set's first random half as "suspect" against its second half
    features: tuple[str, ...]
    fit_fraction: float
    clip_fraction: float
    seed: int
    excluded_features: tuple[str, ...] = ()  # scores left out: model-free, or not finite on every text

    @property
    def p_value(self) -> float:
        """The p-value that the suspect set scores no higher than texts never trained on."""
        return self.test.p_value

    @property
    def warnings(self) -> list[str]:
        """What changes how the p-value should be read."""
        if self.control.p_value < CONTROL_ALPHA:
            return [f"Dataset inference: the false-positive control rejected (p = {self.control.p_value:.2g} on two "
                    f"halves of {self.control.n_suspect + self.control.n_held_out} held-out texts), so the test is "
                    "not calibrated on these texts; do not read its p-value as evidence of training."]
        return []

    def to_dict(self) -> dict:
        """A JSON-ready dict of both tests, the features and the settings."""
        return {**asdict(self), "p_value": self.p_value, "warnings": self.warnings}


def dataset_inference(suspect: ArrayLike, held_out: ArrayLike, *, feature_names: Sequence[str] | None = None,
                      fit_fraction: float = DEFAULT_FIT_FRACTION, clip_fraction: float = DEFAULT_CLIP_FRACTION,
                      seed: int = 0) -> DatasetInferenceResult:
    """Test whether the `suspect` texts were trained on, from per-text features (rows = texts, higher = member).

    `held_out` must come from the same distribution and never have been trained on (the other
    side of a random split). The control runs the same test on two random halves of `held_out`.
    """
    suspect_x, held_out_x = _features(suspect, "suspect"), _features(held_out, "held_out")
    check_set_sizes(len(suspect_x), len(held_out_x))
    if suspect_x.shape[1] != held_out_x.shape[1]:
        raise ValueError(f"suspect has {suspect_x.shape[1]} features per text but held_out {held_out_x.shape[1]}; "
                         "give the same scores, in the same order, for both sets.")
    names = tuple(feature_names) if feature_names is not None else tuple(f"x{i}" for i in range(suspect_x.shape[1]))
    if len(names) != suspect_x.shape[1]:
        raise ValueError(f"{len(names)} feature names for {suspect_x.shape[1]} features; name each column once.")
    if not 0 < fit_fraction < 1 or not 0 <= clip_fraction < 0.5:
        raise ValueError(f"fit_fraction={fit_fraction} must be in (0, 1) and clip_fraction={clip_fraction} in "
                         "[0, 0.5), e.g. 0.5 and 0.025.")
    rng = np.random.default_rng(seed)
    test = _set_test(suspect_x, held_out_x, fit_fraction, clip_fraction, rng)
    halves = np.array_split(rng.permutation(len(held_out_x)), 2)
    control = _set_test(held_out_x[halves[0]], held_out_x[halves[1]], fit_fraction, clip_fraction, rng)
    return DatasetInferenceResult(test, control, names, fit_fraction, clip_fraction, seed)


def dataset_inference_from_scores(scores: Mapping[str, ArrayLike], labels: ArrayLike, *,
                                  fit_fraction: float = DEFAULT_FIT_FRACTION,
                                  clip_fraction: float = DEFAULT_CLIP_FRACTION,
                                  seed: int = 0) -> DatasetInferenceResult:
    """Dataset inference on an audit's per-text attack scores: members (label 1) are the suspect set.

    Model-free scores (the blind baseline) and scores that are not finite on every text (the
    Ensemble's fitting share) are left out and named in `excluded_features`.
    """
    y = np.asarray(labels)
    usable = {name: np.asarray(values, dtype=np.float64) for name, values in scores.items()
              if name not in MODEL_FREE_SCORES and np.isfinite(np.asarray(values, dtype=np.float64)).all()}
    if not usable:
        raise ValueError(f"None of the scores {sorted(scores)} reads the model and is finite on every text; run "
                         "the audit with at least one token-level attack (e.g. loss).")
    names = tuple(usable)
    matrix = np.column_stack([usable[name] for name in names])
    result = dataset_inference(matrix[y == 1], matrix[y == 0], feature_names=names, fit_fraction=fit_fraction,
                               clip_fraction=clip_fraction, seed=seed)
    return DatasetInferenceResult(result.test, result.control, names, fit_fraction, clip_fraction, seed,
                                  excluded_features=tuple(name for name in scores if name not in usable))


def check_set_sizes(n_suspect: int, n_held_out: int) -> None:
    """Refuse sets too small to test (call it before scoring, so a doomed audit costs no forward pass)."""
    for name, n in (("suspect (members)", n_suspect), ("held_out (non-members)", n_held_out)):
        if n < MIN_TEXTS:
            raise ValueError(f"{name} has {n} texts; dataset inference needs at least {MIN_TEXTS} per set (the "
                             "control halves the held-out set), and a few hundred to detect a weak trace.")


def _set_test(suspect: np.ndarray, held_out: np.ndarray, fit_fraction: float, clip_fraction: float,
              rng: np.random.Generator) -> SetTest:
    """Fit the linear model on one random part of each set, then t-test the scores of the other parts."""
    suspect_fit, suspect_test = _split(len(suspect), fit_fraction, rng)
    held_out_fit, held_out_test = _split(len(held_out), fit_fraction, rng)
    fit_x = np.vstack([suspect[suspect_fit], held_out[held_out_fit]])
    fit_y = np.r_[np.ones(len(suspect_fit)), np.zeros(len(held_out_fit))]
    low, high = np.quantile(fit_x, [clip_fraction, 1 - clip_fraction], axis=0)
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(np.clip(fit_x, low, high), fit_y)
    suspect_scores = model.decision_function(np.clip(suspect[suspect_test], low, high))
    held_out_scores = model.decision_function(np.clip(held_out[held_out_test], low, high))
    statistic, p_value = ttest_ind(suspect_scores, held_out_scores, equal_var=False, alternative="greater")
    if math.isnan(p_value):  # every test score equal: the features carry nothing, so there is no evidence
        statistic, p_value = 0.0, 1.0
    return SetTest(float(p_value), float(statistic), len(suspect), len(held_out), len(suspect_fit),
                   len(held_out_fit), len(suspect_test), len(held_out_test))


def _split(n: int, fit_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random (fit, test) partition of range(n), with at least 2 texts on each side."""
    order = rng.permutation(n)
    n_fit = min(max(2, round(fit_fraction * n)), n - 2)
    return order[:n_fit], order[n_fit:]


def _features(values: ArrayLike, name: str) -> np.ndarray:
    """A finite (texts × features) float64 matrix; a 1-D input is one feature."""
    matrix = np.asarray(values, dtype=np.float64)
    matrix = matrix[:, None] if matrix.ndim == 1 else matrix
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        raise ValueError(f"{name} must be a (texts × features) array, got shape {np.shape(values)}.")
    if not np.isfinite(matrix).all():
        raise ValueError(f"{name} holds {int((~np.isfinite(matrix)).sum())} non-finite feature value(s); drop the "
                         "features that leave texts unscored, or the texts.")
    return matrix
