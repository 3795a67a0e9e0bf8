"""The cheap acceptance test for a rewrite: non-empty, changed, of similar length, and similar enough.

Similarity is difflib's `SequenceMatcher.ratio()` over the two texts' lowercased word sequences
(runs of letters, digits and underscores): 2·M / (|a| + |b|), where M counts the words of the
longest in-order matching blocks. It is 1 for the same words in the same order and near 0 for
unrelated texts, needs no model, and is deterministic. It measures lexical, not semantic,
closeness: a faithful rewrite that replaces every word scores low, so keep `min_similarity`
low when the paraphraser is asked to change every word (an LLM rewrite with the paper's prompt).
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The lowercased words of `text`: runs of letters, digits and underscores."""
    return _WORD.findall(text.lower())


def word_similarity(a: str, b: str) -> float:
    """difflib's ratio over the lowercased word sequences of `a` and `b`, in [0, 1]."""
    return SequenceMatcher(None, words(a), words(b), autojunk=False).ratio()


def rejection_reason(original: str, candidate: str, *, min_similarity: float, max_length_ratio: float) -> str | None:
    """Why `candidate` is not an acceptable rewrite of `original`, or None when it is.

    The length ratio is in characters of the stripped texts and must lie within
    [1 / max_length_ratio, max_length_ratio].
    """
    original, candidate = original.strip(), candidate.strip()
    if not candidate:
        return "empty"
    if words(candidate) == words(original):
        return "unchanged (the same words as the input)"
    ratio = len(candidate) / max(len(original), 1)
    if ratio > max_length_ratio:
        return f"too long ({ratio:.2f}x the input's characters > {max_length_ratio:g})"
    if ratio < 1 / max_length_ratio:
        return f"too short ({ratio:.2f}x the input's characters < 1/{max_length_ratio:g})"
    similarity = word_similarity(original, candidate)
    if similarity < min_similarity:
        return f"too dissimilar (word similarity {similarity:.2f} < {min_similarity:g})"
    return None
