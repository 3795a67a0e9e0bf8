"""Attacks that compare a text's loss with its loss in another context: ReCaLL, CON-ReCaLL, neighbourhood.

Their extra statistics come from the same one-pass scorer (run_audit scores the prefixed texts
and the neighbours); the functions here only combine them.
"""

from __future__ import annotations

import numpy as np

from privft.attacks.registry import AttackInputs, register_attack


@register_attack("recall", needs=("prefixed",),
                 default=True, needs_context=True, ensemble_component=True,
                 description="loss after a non-member prefix over the plain loss, target tokens only (Xie et al. 2024)")
def recall_attack(inputs: AttackInputs) -> np.ndarray:
    """ReCaLL: a non-member prefix raises a member's loss relatively more than a non-member's."""
    return np.array([p.mean_nll / s.mean_nll for s, p in zip(inputs.target, inputs.prefixed)])


@register_attack("con_recall", needs=("prefixed", "member_prefixed"),
                 default=True, needs_context=True, ensemble_component=True,
                 description="non-member-prefix loss minus member-prefix loss, over the plain loss (Wang et al. 2024)")
def con_recall_attack(inputs: AttackInputs) -> np.ndarray:
    """CON-ReCaLL: members gain from a member prefix and lose from a non-member one."""
    return np.array([(n.mean_nll - m.mean_nll) / s.mean_nll
                     for s, n, m in zip(inputs.target, inputs.prefixed, inputs.member_prefixed)])


@register_attack("neighbourhood", needs=("neighbours",),
                 default=True, needs_context=True, ensemble_component=True,
                 description="mean loss of word-swap neighbours minus the text's loss (Mattern et al. 2023)")
def neighbourhood_attack(inputs: AttackInputs) -> np.ndarray:
    """A member sits in a loss dip that its neighbours do not share; NaN for a text with no neighbour."""
    return np.array([np.mean([n.mean_nll for n in hood]) - s.mean_nll if len(hood) else np.nan
                     for s, hood in zip(inputs.target, inputs.neighbours)])
