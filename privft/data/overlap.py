"""Word n-gram overlap between texts, used to flag near-duplicates across a membership split.

This follows the MIMIR benchmark's filter (Duan et al., 2024): a non-member is a near-duplicate of
the members when at least `threshold` of its word 13-grams also occur somewhere in the members.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

NGRAM_WORDS = 13
NEAR_DUPLICATE_THRESHOLD = 0.8
_WORD = re.compile(r"\w+")


class Overlap(NamedTuple):
    """A text's index, the member sharing most of its n-grams, and the fraction found in members."""

    index: int
    member_index: int
    fraction: float


def ngram_hashes(text: str, n: int = NGRAM_WORDS) -> set[int]:
    """Return hashes of the lowercased word n-grams of `text`; a shorter text is one whole gram."""
    words = _WORD.findall(text.lower())
    if not words:
        return set()
    if len(words) < n:
        return {hash(tuple(words))}
    return {hash(tuple(words[i : i + n])) for i in range(len(words) - n + 1)}


def index_members(members: Iterable[str], n: int = NGRAM_WORDS) -> dict[int, int]:
    """Map each member n-gram hash to the index of the first member that contains it."""
    owner: dict[int, int] = {}
    for index, text in enumerate(members):
        for gram in ngram_hashes(text, n):
            owner.setdefault(gram, index)
    return owner


def near_duplicates(
    members_index: dict[int, int],
    texts: Sequence[str],
    threshold: float = NEAR_DUPLICATE_THRESHOLD,
    n: int = NGRAM_WORDS,
) -> list[Overlap]:
    """Return the texts whose fraction of n-grams found in the members is at least `threshold`."""
    found: list[Overlap] = []
    for index, text in enumerate(texts):
        grams = ngram_hashes(text, n)
        owners = Counter(members_index[g] for g in grams if g in members_index)
        fraction = sum(owners.values()) / len(grams) if grams else 0.0
        if owners and fraction >= threshold:
            found.append(Overlap(index, owners.most_common(1)[0][0], fraction))
    return found
