"""Atomic file writes: a reader never sees a half-written report, manifest or cache entry."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same folder, then rename it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, path)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 text atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))
