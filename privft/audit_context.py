"""Extra text for the context attacks: prefix pools for ReCaLL and CON-ReCaLL, and word-swap neighbours."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from privft.paraphrase import ParaphraseCache, Paraphraser, obfuscate
from privft.scoring import TokenStats

logger = logging.getLogger(__name__)

PREFIX_SEPARATOR = "\n\n"
NEIGHBOUR_SEED_STEP = 100  # seeds of different neighbours of a text lie this far apart (retries use seed + 1, ...)

Score = Callable[[Sequence[str], str, str | None], list[TokenStats]]  # (texts, progress label, prefix)


@dataclass(frozen=True)
class AuditContext:
    """Texts the context attacks read besides the evaluation set; none of them may be evaluated.

    `non_member_prefix`: texts never trained on (ReCaLL's and CON-ReCaLL's non-member shots).
    `member_prefix`: texts trained on but held out of the evaluation (CON-ReCaLL's member shots).
    `neighbours`: each evaluated text mapped to its word-swap neighbours (neighbourhood attack).
    """

    non_member_prefix: tuple[str, ...] = ()
    member_prefix: tuple[str, ...] = ()
    neighbours: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def check(self, evaluated: Sequence[str]) -> None:
        """Refuse prefixes drawn from the evaluation set, and neighbours missing for any evaluated text."""
        if not self.provides():
            return  # an empty context reads no text
        evaluation = set(evaluated)
        for name in ("non_member_prefix", "member_prefix"):
            shared = [t for t in getattr(self, name) if t in evaluation]
            if shared:
                raise ValueError(f"AuditContext.{name} holds {len(shared)} text(s) of the evaluation set (first: "
                                 f"{shared[0][:60]!r}); draw prefixes from a disjoint pool, or the attack reads "
                                 "the labels it is scored on.")
        if self.member_prefix and not self.non_member_prefix:
            raise ValueError("CON-ReCaLL's member prefix needs a non-member prefix too; set non_member_prefix.")
        missing = [t for t in evaluated if t not in self.neighbours]
        if self.neighbours and missing:
            raise ValueError(f"{len(missing)} evaluated text(s) have no neighbours (first: {missing[0][:60]!r}); "
                             "generate them with generate_neighbours over the whole evaluation set.")

    def provides(self) -> set[str]:
        """The AttackInputs fields `statistics` fills for this context."""
        fields = {"prefixed": self.non_member_prefix, "member_prefixed": self.member_prefix,
                  "neighbours": self.neighbours}
        return {name for name, source in fields.items() if source}

    def statistics(self, texts: Sequence[str], score: Score, wanted: Collection[str] | None = None) -> dict[str, Any]:
        """AttackInputs fields for the parts of the context that are set (and `wanted`, if given), scored by `score`."""
        self.check(texts)
        wanted = self.provides() if wanted is None else self.provides() & set(wanted)
        found: dict[str, Any] = {}
        if "prefixed" in wanted:
            found["prefixed"] = score(texts, "non-member prefix", join_prefix(self.non_member_prefix))
        if "member_prefixed" in wanted:
            found["member_prefixed"] = score(texts, "member prefix", join_prefix(self.member_prefix))
        if "neighbours" in wanted:
            per_text = [list(self.neighbours[t]) for t in texts]
            flat = score([n for hood in per_text for n in hood], "neighbours", None)
            found["neighbours"], start = [], 0
            for hood in per_text:
                found["neighbours"].append(flat[start:start + len(hood)])
                start += len(hood)
        return found


def join_prefix(shots: Sequence[str]) -> str:
    """The conditioning prefix: the shots in order, each followed by a blank line."""
    return "".join(shot + PREFIX_SEPARATOR for shot in shots)


def generate_neighbours(texts: Sequence[str], paraphraser: Paraphraser, n_neighbours: int, *,
                        cache: ParaphraseCache | None = None, seed: int = 0) -> dict[str, list[str]]:
    """Up to `n_neighbours` word-swap rewrites of each whole text, each from its own seed, cached by content.

    A rewrite that fell back (every try rejected, or no word could be swapped) is not a
    neighbour: the original text among its own neighbours would pull its score toward 0. A
    text left with fewer neighbours is logged; one with none goes unscored by the attack.
    """
    if n_neighbours < 1:
        raise ValueError(f"n_neighbours={n_neighbours} must be >= 1.")
    rounds = [obfuscate(texts, paraphraser, prefix_keep_ratio=0.0, cache=cache, seed=seed + k * NEIGHBOUR_SEED_STEP)
              for k in range(n_neighbours)]
    neighbours = {text: [r[i].text for r in rounds if not r[i].fallback] for i, text in enumerate(texts)}
    short = [len(hood) for hood in neighbours.values() if len(hood) < n_neighbours]
    if short:
        logger.warning("%d of %d texts have fewer than %d usable neighbours (%d have none, so the neighbourhood "
                       "attack leaves them unscored); their other rewrites fell back.", len(short), len(neighbours),
                       n_neighbours, short.count(0))
    return neighbours
