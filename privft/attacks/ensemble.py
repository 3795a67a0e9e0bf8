"""The Ensemble attack: a classifier over the other attacks' scores, fitted on a labelled part only."""

from __future__ import annotations

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from privft.attacks.registry import ATTACKS, AttackInputs, attack_names, register_attack


def ensemble_components() -> tuple[str, ...]:
    """The attacks the Ensemble may combine: those registered with `ensemble_component=True`."""
    return attack_names(lambda attack: attack.ensemble_component)


def ensemble_features(inputs: AttackInputs) -> tuple[list[str], np.ndarray]:
    """The component attacks that can run on `inputs`, and their scores as one column each."""
    names = [n for n in ensemble_components() if ATTACKS[n].can_run(inputs)]
    return names, np.column_stack([ATTACKS[n](inputs) for n in names])


@register_attack("ensemble", needs=("known_labels",),
                 description="logistic regression on the other attacks' scores, fitted on a held-out labelled part")
def ensemble_attack(inputs: AttackInputs) -> np.ndarray:
    """P(member) for the texts whose label the attacker does not hold; NaN for its fitting part.

    Unlike the release (fitted on 85 % of the evaluation set, then scored on all of it), the
    classifier never scores a text it was fitted on, so its AUC is measured on the rest only.
    A text some component leaves unscored (no usable neighbour) is neither fitted on nor scored.
    """
    known = np.asarray(inputs.known_labels)
    _, features = ensemble_features(inputs)
    complete = np.isfinite(features).all(axis=1)
    fit, unknown = (known >= 0) & complete, (known < 0) & complete
    if np.bincount(known[fit], minlength=2).min() < 2 or not unknown.any():
        raise ValueError("The ensemble needs at least 2 known members and 2 known non-members to fit on, and "
                         "texts left to score; raise or lower AuditConfig.ensemble_fit_fraction.")
    classifier = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    classifier.fit(features[fit], known[fit])
    scores = np.full(len(known), np.nan)
    scores[unknown] = classifier.predict_proba(features[unknown])[:, 1]
    return scores
