"""The blind baseline: a model-free bag-of-words classifier that guards the membership split."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline

from privft.metrics import MIN_SAMPLE_PER_CLASS, AUCResult

SHIFT_AUC = 0.6  # a blind AUC at or above this, with a CI excluding 0.5, means the split leaks


def blind_baseline_scores(texts: Sequence[str], y_true: np.ndarray, *, n_folds: int = 5, n_repeats: int = 5,
                          seed: int = 0) -> np.ndarray:
    """Out-of-fold member probabilities from TF-IDF (1–2-grams) + logistic regression (Das et al. 2024).

    The classifier never sees the model. If it separates members from non-members, the split
    differs in distribution and every attack number partly measures that difference. Scores are
    averaged over `n_repeats` differently seeded fold assignments, so one lucky partition of a
    small split does not raise a false alarm.
    """
    y_true = np.asarray(y_true)
    n_folds = min(n_folds, int(np.bincount(y_true, minlength=2).min()))
    if n_folds < 2:
        raise ValueError("The blind baseline needs at least 2 members and 2 non-members.")
    classifier = make_pipeline(
        TfidfVectorizer(min_df=2, ngram_range=(1, 2), sublinear_tf=True),
        LogisticRegression(max_iter=2000),
    )
    repeats = [
        cross_val_predict(classifier, list(texts), y_true, method="predict_proba",
                          cv=StratifiedKFold(n_splits=n_folds, shuffle=True, random_state=seed + repeat))[:, 1]
        for repeat in range(n_repeats)
    ]
    return np.mean(repeats, axis=0)


def distribution_shift(auc: AUCResult) -> bool | None:
    """Whether the blind baseline's AUC shows the split leaks (≥ `SHIFT_AUC`, CI above 0.5); None when too small.

    Below MIN_SAMPLE_PER_CLASS members or non-members the interval cannot tell, so there is no verdict.
    """
    if min(auc.n_members, auc.n_non_members) < MIN_SAMPLE_PER_CLASS:
        return None
    return auc.auc >= SHIFT_AUC and auc.ci_low > 0.5
