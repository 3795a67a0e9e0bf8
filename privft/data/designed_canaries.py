"""Canary plans whose secrets a registered design draws (privft.data.canary_designs), checked for the one-run audit.

`designed_plan` refuses what would make the audit wrong rather than weak: a design whose secrets
the tokenizer does not encode back (round trip), and secrets that occur in the training text (a
control that the model saw would look inserted). The plan records every secret and reference
secret, so it rebuilds from the manifest without the tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from privft.data.canaries import CanaryError, CanaryPlan, _normalize
from privft.data.canary_designs import CANARY_DESIGNS, TokenSource, get_design
from privft.data.records import Record

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_DESIGN_STREAM = 4  # the plan seed's stream for design draws (CanaryPlan's own use 0–3)
MAX_REJECTED_SHARE = 0.5  # failed draws beyond this share of the secrets needed (+ 20) refuse the design
_FAILURES = {"round trip": "the tokenizer does not encode them back to the design's tokens",
             "collision": "they occur in the training text", "repeat": "they repeat an earlier draw"}


@dataclass(frozen=True)
class DesignedCanaryPlan(CanaryPlan):
    """Canaries whose secrets `design` drew; build one with `designed_plan`. `references` are the reference secrets.

    `alphabet` and `secret_length` do not apply (the design decides) and stay empty. Everything
    else (copies, one-run inclusion, formats, insertion, the manifest record) is `CanaryPlan`'s.
    """

    alphabet: str = ""
    secret_length: int = 0
    design: str = "new"
    references: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Refuse a plan without its drawn secrets, then validate as `CanaryPlan` does."""
        if not self.secrets:
            raise CanaryError("DesignedCanaryPlan holds the secrets its design drew; build it with "
                              "designed_plan(design, tokenizer, training_texts, ...)")
        object.__setattr__(self, "references", tuple(self.references))
        super().__post_init__()

    @property
    def secret_space(self) -> int:
        """The drawn secrets and references: all the plan has."""
        return len(self.secrets) + len(self.references)

    def reference_secrets(self) -> list[str]:
        """The recorded reference secrets, drawn with the canaries' secrets."""
        return list(self.references)

    def _check_format(self) -> None:
        """Refuse an alphabet, a secret length or an unknown design: the registered design decides the secrets."""
        if self.alphabet or self.secret_length or self.design not in CANARY_DESIGNS:
            raise CanaryError(f"DesignedCanaryPlan: design={self.design!r} must be one of {sorted(CANARY_DESIGNS)}, "
                              f"and alphabet={self.alphabet!r}, secret_length={self.secret_length} left unset")

    def _space_origin(self) -> str:
        """Where the secret space's size comes from, for error messages."""
        return f"the {self.design!r} design's recorded draws"

    def _check_secrets(self) -> None:
        """Raise `CanaryError` unless the secrets and references are distinct non-blank texts of the right counts."""
        every = (*self.secrets, *self.references)
        if (len(self.secrets), len(self.references)) != (self.n_canaries, self.n_alternatives) \
                or len(set(every)) != len(every) or not all(isinstance(s, str) and s.strip() for s in every):
            raise CanaryError(f"DesignedCanaryPlan: {len(self.secrets)} secrets and {len(self.references)} "
                              f"references for n_canaries={self.n_canaries} and n_alternatives={self.n_alternatives}; "
                              "they must match and be distinct non-blank texts: rebuild with designed_plan")


def designed_plan(design: str, tokenizer: PreTrainedTokenizerBase, training: Sequence[Record], *,
                  secret_length: int = 8, **settings: Any) -> DesignedCanaryPlan:
    """A plan whose `settings.n_canaries` secrets and `n_alternatives` references `design` draws, `secret_length`
    symbols each, from `tokenizer` and the `training` texts or records (those the canaries join).

    `settings` are `CanaryPlan`'s (copies, seed, one_run, format, ...). Draws that fail the round
    trip or occur in the training text are redrawn; once the failures pass half the secrets needed
    (plus 10), the design is refused with the reasons counted.
    """
    drawer = get_design(design)
    source = TokenSource.build(tokenizer, training)
    n_canaries = settings.get("n_canaries", CanaryPlan.n_canaries)
    needed = n_canaries + settings.get("n_alternatives", CanaryPlan.n_alternatives)
    rng = np.random.default_rng([settings.get("seed", CanaryPlan.seed), _DESIGN_STREAM])
    drawn: dict[str, None] = {}
    failed = dict.fromkeys(_FAILURES, 0)
    while len(drawn) < needed:
        if sum(failed.values()) > MAX_REJECTED_SHARE * (needed + 20):
            reasons = "; ".join(f"{count} because {_FAILURES[why]}" for why, count in failed.items() if count)
            raise CanaryError(f"Canary design {design!r} cannot draw {needed} usable secrets of {secret_length} "
                              f"symbols with this tokenizer and these training texts: {reasons}. Choose another "
                              "design or a longer secret_length")
        secret = drawer.secret(rng, source, secret_length)
        why = ("round trip" if secret is None else "collision" if _normalize(secret) in source.text
               else "repeat" if secret in drawn else None)
        if why:
            failed[why] += 1
        else:
            drawn[secret] = None
    secrets = tuple(drawn)
    return DesignedCanaryPlan(design=design, secrets=secrets[:n_canaries], references=secrets[n_canaries:],
                              **settings)
