"""The attack registry: a name maps to a pure function of cached token statistics and what it reads."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from privft.scoring import TokenStats


def _optional_input(hint: str) -> Any:
    """An AttackInputs field that an audit may leave None, with `hint`: what to supply so that it is computed."""
    return field(default=None, metadata={"hint": hint})


@dataclass(frozen=True)
class AttackInputs:
    """Everything a token-level attack may read: texts and their statistics under each model.

    Each optional input carries its hint (what an audit needs to compute it), which an audit
    that cannot run an attack quotes.
    """

    texts: Sequence[str]
    target: Sequence[TokenStats]
    reference: Sequence[TokenStats] | None = _optional_input(
        "pass a reference model (for a peft model the adapters are disabled by default)")
    lowercase: Sequence[TokenStats] | None = _optional_input(  # the target's statistics of each text lowercased
        "let run_audit score the lowercased texts")
    same_tokenizer: bool = True  # whether target and reference share a tokenizer
    min_k_fraction: float = 0.2
    prefixed: Sequence[TokenStats] | None = _optional_input(  # each text's own tokens after a non-member prefix
        "give non-member prefix texts (AuditContext.non_member_prefix; privft audit --prefix-non-members)")
    member_prefixed: Sequence[TokenStats] | None = _optional_input(  # the same after known members (CON-ReCaLL)
        "give member prefix texts too (AuditContext.member_prefix; privft audit --prefix-members)")
    neighbours: Sequence[Sequence[TokenStats]] | None = _optional_input(  # each text's word-swap neighbours
        "give word-swap neighbours (AuditContext.neighbours from generate_neighbours; privft audit --neighbours N)")
    known_labels: np.ndarray | None = _optional_input(  # labels the attacker holds (1/0), -1 where unknown (Ensemble)
        "let run_audit hold out the Ensemble's fitting labels")


INPUT_HINTS: dict[str, str] = {f.name: f.metadata["hint"] for f in fields(AttackInputs) if "hint" in f.metadata}
NEEDS = frozenset(INPUT_HINTS)  # the inputs an attack may declare that it needs

AttackFunction = Callable[[AttackInputs], np.ndarray]


@dataclass(frozen=True)
class Attack:
    """A registered attack: higher scores mean "more likely a member"; NaN marks a text it does not score.

    Besides its function, an attack says what it reads and how an audit uses it: `needs` (the
    optional `AttackInputs` it reads), `default` (run when an audit names no attacks),
    `needs_context` (reads an `AuditContext`'s statistics: as a default it runs only when the
    audit has them, and it is not noted as skipped otherwise), `ensemble_component` (the
    Ensemble may combine its scores) and `needs_same_tokenizer` (compares the target's and the
    reference's per-token losses, so it refuses models whose tokenizers differ).
    """

    name: str
    function: AttackFunction
    needs: frozenset[str]
    description: str
    default: bool = False
    needs_context: bool = False
    ensemble_component: bool = False
    needs_same_tokenizer: bool = False

    def refusal(self, available: Collection[str], same_tokenizer: bool) -> tuple[str, str] | None:
        """Why this attack cannot run when the inputs `available` are computed, and what to do; None if it can."""
        missing = sorted(self.needs - set(available))
        if missing:
            return f"needs {', '.join(missing)} statistics", "; ".join(INPUT_HINTS[need] for need in missing)
        if self.needs_same_tokenizer and not same_tokenizer:
            alternatives = [a.name for a in ATTACKS.values() if a.needs == self.needs and not a.needs_same_tokenizer]
            hint = (f"use {' or '.join(map(repr, alternatives))} instead (valid across tokenizers)" if alternatives
                    else "give a reference model that shares the target's tokenizer")
            return "target and reference tokenizers differ, so per-token losses are not comparable", hint
        return None

    def can_run(self, inputs: AttackInputs) -> bool:
        """Whether `inputs` hold everything this attack reads."""
        return self.refusal(computed_inputs(inputs), inputs.same_tokenizer) is None

    def __call__(self, inputs: AttackInputs) -> np.ndarray:
        """Score every text; refuses inputs that lack what this attack needs."""
        refusal = self.refusal(computed_inputs(inputs), inputs.same_tokenizer)
        if refusal:
            raise ValueError(f"Attack {self.name!r} cannot run: {refusal[0]}. To run it, {refusal[1]}.")
        return np.asarray(self.function(inputs), dtype=np.float64)


def computed_inputs(inputs: AttackInputs) -> set[str]:
    """The optional inputs that `inputs` holds (not None)."""
    return {need for need in NEEDS if getattr(inputs, need) is not None}


ATTACKS: dict[str, Attack] = {}


def register_attack(name: str, *, needs: Sequence[str] = (), description: str, default: bool = False,
                    needs_context: bool = False, ensemble_component: bool = False,
                    needs_same_tokenizer: bool = False) -> Callable[[AttackFunction], AttackFunction]:
    """Decorator that registers an attack function under `name` (names are unique), with what it reads (`Attack`)."""
    unknown = set(needs) - NEEDS
    if unknown:
        raise ValueError(f"Attack {name!r} needs unknown inputs {sorted(unknown)}; known: {sorted(NEEDS)}.")

    def decorate(function: AttackFunction) -> AttackFunction:
        if name in ATTACKS:
            raise ValueError(f"An attack named {name!r} is already registered.")
        ATTACKS[name] = Attack(name, function, frozenset(needs), description, default=default,
                               needs_context=needs_context, ensemble_component=ensemble_component,
                               needs_same_tokenizer=needs_same_tokenizer)
        return function

    return decorate


def attack_names(chosen: Callable[[Attack], bool]) -> tuple[str, ...]:
    """The registered attacks for which `chosen` holds: those without context first, each in registration order."""
    return tuple(a.name for a in sorted(filter(chosen, ATTACKS.values()), key=lambda a: a.needs_context))


def get_attack(name: str) -> Attack:
    """The registered attack called `name`, with an error listing the known names."""
    try:
        return ATTACKS[name]
    except KeyError:
        raise ValueError(f"Unknown attack {name!r}; known attacks: {', '.join(sorted(ATTACKS))}.") from None
