"""Obfuscated training samples: keep a prefix of the words, paraphrase the rest, filter, retry, cache.

The split is by words (maximal runs of non-whitespace), not tokens, so it does not depend on
any tokenizer: the first ``int(prefix_keep_ratio * n_words)`` words are kept verbatim with the
whitespace that follows them, and the remainder (the suffix) is rewritten. The released SOFT
code split by tokens of the Pythia tokenizer instead; at ratio 0.5 the two split points differ
by a few words at most.

A rewrite is accepted when `privft.paraphrase.quality.rejection_reason` finds nothing wrong.
Otherwise the suffix is rewritten again with the next seed (seed + 1, ...), up to `retries`
more times. When every try is rejected the result falls back, with ``fallback=True`` and the
rejections in ``reason``, to the last rejected candidate that was non-empty and changed some word
(a poor rewrite still hides the original wording), or to the original suffix when every candidate
was empty or unchanged; ``failed_rewrites="skip"`` gives the original text instead, so that SOFT
never trains on a rewrite its own filter rejected. One warning on the ``privft.paraphrase``
logger counts the fallbacks of a call, names their texts and quotes the first one's rejections.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from textwrap import shorten

from privft.data.records import Record, check_records, map_turns, turn_contents
from privft.paraphrase.base import Paraphraser
from privft.paraphrase.cache import ParaphraseCache
from privft.paraphrase.quality import rejection_reason, words
from privft.progress import progress_bar

logger = logging.getLogger("privft.paraphrase")

MODES = ("prefix+rewrite", "rewrite-only")
FAILED_REWRITES = ("serve", "skip")  # what a text whose every rewrite the filter rejected becomes; the first: default
NAMED_TEXTS = 10  # texts a fallback summary names by index
EXCERPT_CHARS = 90  # of the first named text's rejections, quoted by the summary
_WORD_SPAN = re.compile(r"\S+")


@dataclass(frozen=True)
class ObfuscationResult:
    """The obfuscated sample `text` of `original`, after `attempts` rewrites; `reason` lists rejected tries."""

    text: Record  # a str, or a record for records
    original: Record
    attempts: int
    fallback: bool
    reason: str | None = None

    @property
    def failed_filter(self) -> bool:
        """Whether every rewrite was rejected by the filter (a text with nothing to rewrite was never tried)."""
        return self.fallback and self.attempts > 0


def split_prefix(text: str, prefix_keep_ratio: float) -> tuple[str, str]:
    """Split `text` into the first int(ratio · n_words) words with the whitespace after them, and the rest."""
    _check_ratio(prefix_keep_ratio)
    starts = [match.start() for match in _WORD_SPAN.finditer(text)]
    kept = int(prefix_keep_ratio * len(starts))
    if kept == 0:
        return "", text
    return text[: starts[kept]], text[starts[kept]:]


def obfuscate(
    texts: Iterable[Record],
    paraphraser: Paraphraser,
    *,
    prefix_keep_ratio: float = 0.5,
    mode: str = "prefix+rewrite",
    cache: ParaphraseCache | None = None,
    seed: int = 0,
    min_similarity: float = 0.2,
    max_length_ratio: float = 2.0,
    retries: int = 3,
    failed_rewrites: str = FAILED_REWRITES[0],
) -> list[ObfuscationResult]:
    """The obfuscated version of each text: prefix + rewritten suffix, or (mode="rewrite-only") the rewritten suffix.

    Conversational records (`privft.data.records`) come back as records: each assistant turn (a
    completion) is obfuscated as a text would be, and the system and user turns are never touched.
    Their results' `text` and `original` are records.

    "rewrite-only" reproduces the released SOFT code, which trained on the paraphrased suffix
    alone. `cache` skips the paraphraser for any (paraphraser, settings, text, seed, split,
    filter) seen before; both modes share one entry, since they rewrite the same suffix.
    `failed_rewrites` says what a text whose every rewrite the filter rejected becomes: "serve"
    its last changed candidate, or "skip" it, giving the original text (still marked `fallback`).
    """
    _check_ratio(prefix_keep_ratio)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not a known obfuscation mode; choose one of {', '.join(MODES)}.")
    if failed_rewrites not in FAILED_REWRITES:
        raise ValueError(f"failed_rewrites={failed_rewrites!r} must be one of {', '.join(FAILED_REWRITES)}.")
    if not 0 <= min_similarity <= 1:
        raise ValueError(f"min_similarity={min_similarity} must be in [0, 1] (0 disables the similarity check).")
    if max_length_ratio < 1:
        raise ValueError(f"max_length_ratio={max_length_ratio} must be >= 1 (2 accepts rewrites of 0.5x to 2x).")
    if retries < 0:
        raise ValueError(f"retries={retries} must be >= 0.")
    texts = list(texts)
    if texts and not isinstance(texts[0], str):
        return _obfuscate_replies(texts, lambda replies: obfuscate(
            replies, paraphraser, prefix_keep_ratio=prefix_keep_ratio, mode=mode, cache=cache, seed=seed,
            min_similarity=min_similarity, max_length_ratio=max_length_ratio, retries=retries,
            failed_rewrites=failed_rewrites))
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"Text {index} is a {type(text).__name__}, not a str; pass the texts as strings.")
    settings = paraphraser.settings() if cache is not None else None  # may hash model weights: only when needed
    cache = cache.within(paraphraser.name) if cache is not None else None
    keys = [ParaphraseCache.key(
        paraphraser=paraphraser.name, settings=settings, prefix_keep_ratio=prefix_keep_ratio, seed=seed,
        min_similarity=min_similarity, max_length_ratio=max_length_ratio, retries=retries, text=text,
    ) if cache is not None else None for text in texts]
    records = [cache.get(key) if cache is not None else None for key in keys]
    misses = [index for index, record in enumerate(records) if record is None]
    fresh = _obfuscate_all(
        misses, [texts[index] for index in misses], paraphraser, prefix_keep_ratio=prefix_keep_ratio, seed=seed,
        min_similarity=min_similarity, max_length_ratio=max_length_ratio, retries=retries,
    )
    for row, result in fresh:  # cached as each one lands, so an interrupted run keeps its rewrites
        index = misses[row]
        records[index] = asdict(result)
        if cache is not None:
            cache.put(keys[index], records[index])
    results = []
    for text, record in zip(texts, records):
        result = ObfuscationResult(**record)
        if mode == "rewrite-only":
            result = _without_prefix(result, split_prefix(text, prefix_keep_ratio)[0])
        if failed_rewrites == "skip" and result.failed_filter:
            result = dataclasses.replace(result, text=result.original,
                                         reason=f"{result.reason}; served the original (failed_rewrites='skip')")
        results.append(result)
    summary = fallback_summary(results, failed_rewrites)
    if summary:  # on cache hits too: a fallback is never silent
        logger.warning(summary)
    return results


def fallback_summary(results: list[ObfuscationResult], failed_rewrites: str) -> str | None:
    """One line on the texts that fell back: how many, which, the first's rejections, what they became; or None."""
    failed = [index for index, result in enumerate(results) if result.failed_filter]
    untried = [index for index, result in enumerate(results) if result.fallback and not result.failed_filter]
    parts = []
    if failed:
        became = ("the original text is served instead (failed_rewrites='skip')" if failed_rewrites == "skip" else
                  "the last non-empty changed candidate is served, or the original where none changed a word; "
                  "failed_rewrites='skip' serves the originals instead")
        first = shorten(results[failed[0]].reason, EXCERPT_CHARS, placeholder=" [...]")
        parts.append(f"{len(failed)} of {len(results)} texts had every rewrite rejected by the similarity and "
                     f"length filter ({_named(failed)}; first: \"{first}\"): {became}")
    if untried:
        parts.append(f"{len(untried)} of {len(results)} texts have no words after the kept prefix "
                     f"({_named(untried)}) and are kept as they are")
    return ("; ".join(parts) + ". Each text's rejections: its ObfuscationResult.reason, in a privft run's "
            "obfuscations.json." if parts else None)


def _named(indices: list[int]) -> str:
    """'texts 3, 7, 12', the first NAMED_TEXTS of them, then how many more."""
    more = f" and {len(indices) - NAMED_TEXTS} more" if len(indices) > NAMED_TEXTS else ""
    return f"text{'s' if len(indices) > 1 else ''} {', '.join(map(str, indices[:NAMED_TEXTS]))}{more}"


def _obfuscate_replies(records: list[Record], obfuscate_texts: Callable[[list[str]], list[ObfuscationResult]]
                       ) -> list[ObfuscationResult]:
    """Each record with its assistant turns obfuscated by `obfuscate_texts`, one result per record."""
    records = check_records(records, "records to obfuscate")
    replies = [turn_contents(record, ("assistant",)) for record in records]
    done = iter(obfuscate_texts([reply for reply_list in replies for reply in reply_list]))
    results = []
    for record, reply_list in zip(records, replies):
        parts = [next(done) for _ in reply_list]
        reasons = [part.reason for part in parts if part.reason]
        texts = iter(part.text for part in parts)  # the record's rewritten replies, in turn order
        obfuscated = map_turns(record, lambda _, texts=texts: next(texts), roles=("assistant",))
        results.append(ObfuscationResult(obfuscated, record, max(part.attempts for part in parts),
                                         any(p.fallback for p in parts),
                                         "; ".join(reasons) or None))
    return results


def _without_prefix(result: ObfuscationResult, prefix: str) -> ObfuscationResult:
    """The "rewrite-only" sample of a "prefix+rewrite" result: its rewritten suffix alone."""
    return dataclasses.replace(result, text=result.text[len(prefix):])


def _obfuscate_all(
    indices: list[int], texts: list[str], paraphraser: Paraphraser, *, prefix_keep_ratio: float, seed: int,
    min_similarity: float, max_length_ratio: float, retries: int,
) -> Iterator[tuple[int, ObfuscationResult]]:
    """Rewrite each text's suffix with seeds seed, seed + 1, ... until a rewrite passes the filter, the kept prefix
    leading the result; each try is one `rewrite_many` call per `paraphraser.batch_size` texts still pending.

    Yields (position in `texts`, result) as each text is done; `indices` name the texts in log messages.
    """
    splits = [split_prefix(text, prefix_keep_ratio) for text in texts]
    rejections: dict[int, list[str]] = {row: [] for row in range(len(texts))}
    usable: dict[int, str] = {}
    pending = []
    for row, (prefix, suffix) in enumerate(splits):
        if words(suffix):
            pending.append(row)
        else:
            reason = "nothing to rewrite (the text has no words after the kept prefix); kept the text as is"
            yield row, ObfuscationResult(prefix + suffix.strip(), texts[row], 0, True, reason)
    progress = progress_bar(total=len(pending), desc=f"paraphrasing ({paraphraser.name})", leave=False)
    for attempt in range(retries + 1):
        rejected = []
        for start in range(0, len(pending), paraphraser.batch_size):
            chunk = pending[start:start + paraphraser.batch_size]
            suffixes = [splits[row][1] for row in chunk]
            candidates = paraphraser.rewrite_many(suffixes, seeds=[seed + attempt] * len(chunk))
            for row, candidate in zip(chunk, candidates):
                prefix, suffix = splits[row]
                candidate = candidate.strip()
                problem = rejection_reason(suffix, candidate, min_similarity=min_similarity,
                                           max_length_ratio=max_length_ratio)
                if problem is None:
                    reason = "; ".join(rejections[row]) or None
                    progress.update()
                    yield row, ObfuscationResult(prefix + candidate, texts[row], attempt + 1, False, reason)
                    continue
                logger.debug("Text %d, seed %d: rewrite rejected: %s", indices[row], seed + attempt, problem)
                rejections[row].append(f"seed {seed + attempt}: {problem}")
                if candidate and words(candidate) != words(suffix):
                    usable[row] = candidate
                rejected.append(row)
        pending = rejected
    for row in pending:
        prefix, suffix = splits[row]
        kept = "the last non-empty changed candidate" if row in usable else "the original text"
        reason = f"all {retries + 1} rewrites rejected ({'; '.join(rejections[row])}); kept {kept}"
        text = prefix + usable.get(row, suffix.strip())
        progress.update()
        yield row, ObfuscationResult(text, texts[row], retries + 1, True, reason)
    progress.close()


def _check_ratio(prefix_keep_ratio: float) -> None:
    if not 0 <= prefix_keep_ratio < 1:
        raise ValueError(
            f"prefix_keep_ratio={prefix_keep_ratio} must be in [0, 1): the share of leading words kept verbatim"
            " (0 rewrites everything; 1 would leave nothing to rewrite)."
        )
