"""The attack registry: a name maps to a pure function of cached token statistics."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from privft.scoring import TokenStats

NEEDS = frozenset({"reference", "lowercase", "prefixed", "member_prefixed", "neighbours", "known_labels"})


@dataclass(frozen=True)
class AttackInputs:
    """Everything a token-level attack may read: texts and their statistics under each model."""

    texts: Sequence[str]
    target: Sequence[TokenStats]
    reference: Sequence[TokenStats] | None = None
    lowercase: Sequence[TokenStats] | None = None  # the target's statistics of each text lowercased
    same_tokenizer: bool = True  # whether target and reference share a tokenizer
    min_k_fraction: float = 0.2
    prefixed: Sequence[TokenStats] | None = None  # each text's own tokens after a non-member prefix (ReCaLL)
    member_prefixed: Sequence[TokenStats] | None = None  # the same after a prefix of known members (CON-ReCaLL)
    neighbours: Sequence[Sequence[TokenStats]] | None = None  # statistics of each text's word-swap neighbours
    known_labels: np.ndarray | None = None  # labels the attacker holds (1/0), -1 where unknown (Ensemble)


AttackFunction = Callable[[AttackInputs], np.ndarray]


@dataclass(frozen=True)
class Attack:
    """A registered attack: higher scores mean "more likely a member"; NaN marks a text it does not score."""

    name: str
    function: AttackFunction
    needs: frozenset[str]
    description: str

    def __call__(self, inputs: AttackInputs) -> np.ndarray:
        """Score every text; refuses inputs that lack what this attack needs."""
        for need in self.needs:
            if getattr(inputs, need) is None:
                raise ValueError(f"Attack {self.name!r} needs {need} statistics, which were not computed.")
        return np.asarray(self.function(inputs), dtype=np.float64)


ATTACKS: dict[str, Attack] = {}


def register_attack(name: str, *, needs: Sequence[str] = (), description: str
                    ) -> Callable[[AttackFunction], AttackFunction]:
    """Decorator that registers an attack function under `name` (names are unique)."""
    unknown = set(needs) - NEEDS
    if unknown:
        raise ValueError(f"Attack {name!r} needs unknown inputs {sorted(unknown)}; known: {sorted(NEEDS)}.")

    def decorate(function: AttackFunction) -> AttackFunction:
        if name in ATTACKS:
            raise ValueError(f"An attack named {name!r} is already registered.")
        ATTACKS[name] = Attack(name, function, frozenset(needs), description)
        return function

    return decorate


def get_attack(name: str) -> Attack:
    """The registered attack called `name`, with an error listing the known names."""
    try:
        return ATTACKS[name]
    except KeyError:
        raise ValueError(f"Unknown attack {name!r}; known attacks: {', '.join(sorted(ATTACKS))}.") from None
