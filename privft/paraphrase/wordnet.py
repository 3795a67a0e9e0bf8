"""Synonym substitution from the WordNet 3.0 database files (Debian package `wordnet-base`)."""

from __future__ import annotations

import os
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from privft.paraphrase.base import Paraphraser
from privft.paraphrase.registry import register_paraphraser

DEFAULT_WORDNET_DIR = Path("/usr/share/wordnet")
DATA_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
_WORD = re.compile(r"[^\W\d_]+(?:-[^\W\d_]+)*")
_ADJECTIVE_MARKER = re.compile(r"\((?:a|p|ip)\)$")


class MissingResourceError(FileNotFoundError):
    """A data file a paraphraser needs is not installed; the message says how to install it."""


@lru_cache(maxsize=4)
def load_synonyms(directory: Path) -> dict[str, tuple[str, ...]]:
    """Map each lowercased WordNet lemma to its sorted synonyms (other lemmas of its synsets, any part of speech)."""
    missing = [name for name in DATA_FILES if not (directory / name).is_file()]
    if missing:
        raise MissingResourceError(
            f"WordNet data files {', '.join(missing)} not found in {directory}. Install the Debian package"
            " `wordnet-base` (apt-get install wordnet-base, which provides /usr/share/wordnet), or pass"
            " wordnet_dir= pointing at a folder with the WordNet 3.0 data.noun, data.verb, data.adj and data.adv."
        )
    synonyms: dict[str, set[str]] = {}
    for name in DATA_FILES:
        with open(directory / name, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.startswith("  ") or not line.strip():  # licence header or blank line
                    continue
                fields = line.split()
                try:
                    lemmas = [_ADJECTIVE_MARKER.sub("", word).replace("_", " ")
                              for word in fields[4:4 + 2 * int(fields[3], 16):2]]
                except (IndexError, ValueError):
                    raise ValueError(f"{directory / name}:{number}: not a WordNet 3.0 data line (field 4 should be"
                                     " the word count in hex); point wordnet_dir= at intact data files.") from None
                for lemma in lemmas:
                    synonyms.setdefault(lemma.lower(), set()).update(
                        other for other in lemmas if other.lower() != lemma.lower())
    return {word: tuple(sorted(others)) for word, others in synonyms.items() if others}


def _match_case(replacement: str, original: str) -> str:
    """`replacement` in the letter case of `original`: all caps, capitalised, or as WordNet spells it."""
    if len(original) > 1 and original.isupper():
        return replacement.upper()
    if original[0].isupper():
        return replacement[0].upper() + replacement[1:]
    return replacement


@register_paraphraser
class WordNetParaphraser(Paraphraser):
    """Replace `fraction` of the content words that WordNet knows with a random synonym (sense-unaware).

    Content words are words of at least `min_word_length` letters that are not English
    stopwords (scikit-learn's list). Inflected forms are looked up as written ("cars" only
    matches if WordNet lists "cars"). Choices follow from `seed`.
    """

    name = "wordnet"

    def __init__(self, *, fraction: float = 0.2, wordnet_dir: str | os.PathLike[str] | None = None,
                 min_word_length: int = 3) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction={fraction} must be in (0, 1]: the share of content words to replace.")
        self.fraction, self.min_word_length = fraction, min_word_length
        self.wordnet_dir = Path(wordnet_dir).expanduser().resolve() if wordnet_dir else DEFAULT_WORDNET_DIR
        self._synonyms = load_synonyms(self.wordnet_dir)

    def settings(self) -> dict[str, Any]:
        """Fraction, minimum word length and the WordNet folder."""
        return {"fraction": self.fraction, "min_word_length": self.min_word_length,
                "wordnet_dir": str(self.wordnet_dir)}

    def rewrite(self, text: str, *, seed: int) -> str:
        """`text` with about `fraction` of its content words replaced by WordNet synonyms."""
        content = [match for match in _WORD.finditer(text)
                   if len(match.group()) >= self.min_word_length and match.group().lower() not in ENGLISH_STOP_WORDS]
        known = [match for match in content if match.group().lower() in self._synonyms]
        if not known:
            return text
        rng = random.Random(seed)
        count = min(len(known), max(1, round(self.fraction * len(content))))
        pieces, cursor = [], 0
        for match in sorted(rng.sample(known, count), key=lambda m: m.start()):
            synonym = rng.choice(self._synonyms[match.group().lower()])
            pieces += [text[cursor:match.start()], _match_case(synonym, match.group())]
            cursor = match.end()
        return "".join(pieces) + text[cursor:]
