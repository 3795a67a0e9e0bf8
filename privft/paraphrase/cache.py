"""A content-addressed disk cache of obfuscation results: one small JSON file per entry, a folder per paraphraser."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from privft.io import atomic_write_text
from privft.models import cache_dir

logger = logging.getLogger("privft.paraphrase")


class ParaphraseCache:
    """JSON records under `directory`, keyed by the sha256 of everything that determines them."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    @classmethod
    def default(cls) -> ParaphraseCache:
        """The cache privft's runs share: `paraphrases/` under its cache root (`privft.models.cache_dir`)."""
        return cls(cache_dir() / "paraphrases")

    def within(self, paraphraser: str) -> ParaphraseCache:
        """The entries of one paraphraser, in a folder of their own (`<directory>/<paraphraser>/`), so that one
        paraphraser's rewrites can be cleared, or kept beside an experiment's records, without the others'."""
        return ParaphraseCache(self.directory / paraphraser)

    @staticmethod
    def key(**parts: Any) -> str:
        """The sha256 hex digest of `parts` (JSON-serialisable) in a canonical encoding."""
        canonical = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The record stored under `key`, or None when there is none (or it cannot be read)."""
        path = self._path(key)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            logger.warning("Ignoring unreadable paraphrase cache entry %s (%s); it will be recomputed.", path, err)
            return None

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store `record` under `key` atomically."""
        atomic_write_text(self._path(key), json.dumps(record, ensure_ascii=False, indent=1))
