"""Obfuscated training samples: keep a prefix of the words, paraphrase the rest, filter, retry, cache.

The split is by words (maximal runs of non-whitespace), not tokens, so it does not depend on
any tokenizer: the first ``int(prefix_keep_ratio * n_words)`` words are kept verbatim with the
whitespace that follows them, and the remainder (the suffix) is rewritten. The released SOFT
code split by tokens of the Pythia tokenizer instead; at ratio 0.5 the two split points differ
by a few words at most.

A rewrite is accepted when `privft.paraphrase.quality.rejection_reason` finds nothing wrong.
Otherwise the suffix is rewritten again with the next seed (seed + 1, ...), up to `retries`
more times. When every try is rejected the result falls back, with ``fallback=True``, a warning
on the ``privft.paraphrase`` logger and the rejections in ``reason``, to the last rejected
candidate that was non-empty and changed some word (a poor rewrite still hides the original
wording), or to the original suffix when every candidate was empty or unchanged.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from tqdm.auto import tqdm

from privft.paraphrase.base import Paraphraser
from privft.paraphrase.cache import ParaphraseCache
from privft.paraphrase.quality import rejection_reason, words

logger = logging.getLogger("privft.paraphrase")

MODES = ("prefix+rewrite", "rewrite-only")
_WORD_SPAN = re.compile(r"\S+")


@dataclass(frozen=True)
class ObfuscationResult:
    """The obfuscated sample `text` of `original`, after `attempts` rewrites; `reason` lists rejected tries."""

    text: str
    original: str
    attempts: int
    fallback: bool
    reason: str | None = None


def split_prefix(text: str, prefix_keep_ratio: float) -> tuple[str, str]:
    """Split `text` into the first int(ratio · n_words) words with the whitespace after them, and the rest."""
    _check_ratio(prefix_keep_ratio)
    starts = [match.start() for match in _WORD_SPAN.finditer(text)]
    kept = int(prefix_keep_ratio * len(starts))
    if kept == 0:
        return "", text
    return text[: starts[kept]], text[starts[kept]:]


def obfuscate(
    texts: Iterable[str],
    paraphraser: Paraphraser,
    *,
    prefix_keep_ratio: float = 0.5,
    mode: str = "prefix+rewrite",
    cache: ParaphraseCache | None = None,
    seed: int = 0,
    min_similarity: float = 0.2,
    max_length_ratio: float = 2.0,
    retries: int = 3,
) -> list[ObfuscationResult]:
    """The obfuscated version of each text: prefix + rewritten suffix, or (mode="rewrite-only") the rewritten suffix.

    "rewrite-only" reproduces the released SOFT code, which trained on the paraphrased suffix
    alone. `cache` skips the paraphraser for any (paraphraser, settings, text, seed, split,
    filter) seen before; both modes share one entry, since they rewrite the same suffix.
    """
    _check_ratio(prefix_keep_ratio)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not a known obfuscation mode; choose one of {', '.join(MODES)}.")
    if not 0 <= min_similarity <= 1:
        raise ValueError(f"min_similarity={min_similarity} must be in [0, 1] (0 disables the similarity check).")
    if max_length_ratio < 1:
        raise ValueError(f"max_length_ratio={max_length_ratio} must be >= 1 (2 accepts rewrites of 0.5x to 2x).")
    if retries < 0:
        raise ValueError(f"retries={retries} must be >= 0.")
    settings = paraphraser.settings() if cache is not None else None  # may hash model weights: only when needed
    results = []
    for index, text in enumerate(tqdm(list(texts), desc=f"paraphrasing ({paraphraser.name})", leave=False)):
        if not isinstance(text, str):
            raise TypeError(f"Text {index} is a {type(text).__name__}, not a str; pass the texts as strings.")
        key = record = None
        if cache is not None:
            key = ParaphraseCache.key(
                paraphraser=paraphraser.name, settings=settings, prefix_keep_ratio=prefix_keep_ratio,
                seed=seed, min_similarity=min_similarity, max_length_ratio=max_length_ratio, retries=retries,
                text=text,
            )
            record = cache.get(key)
        if record is not None:
            result = ObfuscationResult(**record)
        else:
            result = _obfuscate_one(
                index, text, paraphraser, prefix_keep_ratio=prefix_keep_ratio, seed=seed,
                min_similarity=min_similarity, max_length_ratio=max_length_ratio, retries=retries,
            )
            if cache is not None:
                cache.put(key, asdict(result))
        if mode == "rewrite-only":
            result = _without_prefix(result, split_prefix(text, prefix_keep_ratio)[0])
        if result.fallback:  # on cache hits too: a fallback is never silent
            logger.warning("Text %d: %s.", index, result.reason)
        results.append(result)
    return results


def _without_prefix(result: ObfuscationResult, prefix: str) -> ObfuscationResult:
    """The "rewrite-only" sample of a "prefix+rewrite" result: its rewritten suffix alone."""
    return dataclasses.replace(result, text=result.text[len(prefix):])


def _obfuscate_one(
    index: int, text: str, paraphraser: Paraphraser, *, prefix_keep_ratio: float, seed: int,
    min_similarity: float, max_length_ratio: float, retries: int,
) -> ObfuscationResult:
    """Rewrite one text's suffix with seeds seed, seed + 1, ... until a rewrite passes the filter; the kept prefix
    leads the result."""
    prefix, suffix = split_prefix(text, prefix_keep_ratio)
    head = prefix
    if not words(suffix):
        reason = "nothing to rewrite (the text has no words after the kept prefix); kept the text as is"
        return ObfuscationResult(head + suffix.strip(), text, 0, True, reason)
    rejections, usable = [], None
    for attempt in range(retries + 1):
        candidate = paraphraser.rewrite(suffix, seed=seed + attempt).strip()
        problem = rejection_reason(suffix, candidate, min_similarity=min_similarity, max_length_ratio=max_length_ratio)
        if problem is None:
            reason = "; ".join(rejections) or None
            return ObfuscationResult(head + candidate, text, attempt + 1, False, reason)
        logger.debug("Text %d, seed %d: rewrite rejected: %s", index, seed + attempt, problem)
        rejections.append(f"seed {seed + attempt}: {problem}")
        if candidate and words(candidate) != words(suffix):
            usable = candidate
    kept = "the last non-empty changed candidate" if usable is not None else "the original text"
    reason = f"all {retries + 1} rewrites rejected ({'; '.join(rejections)}); kept {kept}"
    return ObfuscationResult(head + (usable if usable is not None else suffix.strip()), text, retries + 1, True, reason)


def _check_ratio(prefix_keep_ratio: float) -> None:
    if not 0 <= prefix_keep_ratio < 1:
        raise ValueError(
            f"prefix_keep_ratio={prefix_keep_ratio} must be in [0, 1): the share of leading words kept verbatim"
            " (0 rewrites everything; 1 would leave nothing to rewrite)."
        )
