"""Membership-inference attacks: pure functions of token statistics, looked up by name."""

from privft.attacks import context, ensemble, token_level  # noqa: F401  (register the attacks)
from privft.attacks.blind import SHIFT_AUC, blind_baseline_scores, distribution_shift
from privft.attacks.registry import ATTACKS, Attack, AttackInputs, attack_names, get_attack, register_attack
from privft.attacks.token_level import min_k_plus_plus_score, min_k_score

__all__ = [
    "ATTACKS", "Attack", "AttackInputs", "SHIFT_AUC", "attack_names", "blind_baseline_scores", "distribution_shift",
    "get_attack", "min_k_plus_plus_score", "min_k_score", "register_attack",
]
