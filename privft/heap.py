"""Hand the memory a training step freed back to the OS, so the evaluation and audit after it have room.

glibc keeps freed heap pages for reuse: on CPU, a DP-LoRA step's per-chunk activations leave the
process holding ~19 GiB of which ~1 GiB is live (SmolLM2-135M, 16 sequences a chunk), and the
per-epoch evaluation that follows then runs out of memory on a 24 GiB machine. `malloc_trim`
returns those pages; it takes about a second on such a heap, so it runs at each epoch's end and at
the end of training, not after every step.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable
from typing import Any

from transformers import TrainerCallback


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)


def release_freed_memory() -> bool:
    """Return the heap's free pages to the OS; False where the C library cannot (nothing is done there)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class ReleaseFreedMemory(TrainerCallback):
    """Release freed heap memory before each epoch's evaluation and before what follows training (an audit)."""

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The Trainer evaluates and saves right after this."""
        release_freed_memory()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Training is over: its activations' pages go back before the audit's passes."""
        release_freed_memory()


def add_release_callback(trainer: Any) -> None:
    """Give `trainer` a `ReleaseFreedMemory` unless it has one, ahead of its other callbacks (an audit at train end
    then runs on the released heap)."""
    callbacks = trainer.callback_handler.callbacks
    if not any(isinstance(callback, ReleaseFreedMemory) for callback in callbacks):
        callbacks.insert(0, ReleaseFreedMemory())
