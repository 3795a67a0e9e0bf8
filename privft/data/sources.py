"""The texts a config names: a built-in corpus or a file, filtered by length, each distinct text once."""

from __future__ import annotations

from typing import Any

from privft.data.corpora import load_corpus
from privft.data.errors import MissingColumnError
from privft.data.loaders import load_records
from privft.data.records import Record, check_records, record_content
from privft.data.split import distinct_texts


def load_source(*, corpus: str | None, path: str | None, text_column: str = "text", max_words: int | None = None,
                corpus_options: dict[str, Any] | None = None, key: str = "data", format: str = "auto"
                ) -> tuple[list[Record], str]:
    """The distinct texts or records of `corpus` or of the file at `path` (exactly one), at most `max_words`
    words each (of a record's content), and a description of where they came from.

    `format` is the records' format (`privft.data.records.FORMATS`); "auto" detects it from the first one.

    Texts equal up to Unicode form and spacing (`text_identity`) count once, the first kept, as a
    membership split counts them. `key` names the config section in errors (`data`, `pool`).
    """
    if (corpus is None) == (path is None):
        raise ValueError(f"Set exactly one of {key}.corpus (a built-in corpus) and {key}.path (a file of texts).")
    options = corpus_options or {}
    try:
        texts = (check_records(load_corpus(corpus, **options), corpus, format) if corpus
                 else load_records(path, text_column, format))
    except MissingColumnError as error:  # named as the config key to change
        raise error.for_option(f"{key}.text_column") from None
    source = corpus or str(path)
    if corpus and options:
        source += f" ({', '.join(f'{name}={value}' for name, value in options.items())})"
    if max_words is not None:
        texts = [text for text in texts if len(record_content(text).split()) <= max_words]
        source = f"{source} (≤ {max_words} words)"
    return distinct_texts(texts), source
