"""Progress bars that draw only where they redraw in place (a terminal, a notebook), never as debris in a log.

A tqdm bar rewrites its line with a carriage return at every refresh; written to a log file or a
pipe, each refresh stays behind as one more partial bar. privft's bars (`progress_bar`), the
Trainer's (`privft.training` sets ``disable_tqdm`` from `bars_draw`) and those of Hugging Face's
model loading (`library_bars`) are therefore off unless stderr is a terminal or tqdm draws a
notebook widget. On a terminal they are as they always were.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from tqdm.auto import tqdm
from tqdm.notebook import tqdm as notebook_tqdm


def bars_draw(stream: IO[str] | None = None) -> bool:
    """Whether a progress bar on `stream` (default stderr) redraws in place: a terminal, or a notebook's widget."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return issubclass(tqdm, notebook_tqdm) or bool(isatty and isatty())


def progress_bar(iterable: Iterable[Any] | None = None, *, file: IO[str] | None = None, disable: bool = False,
                 **options: Any) -> tqdm:
    """A tqdm.auto bar on `file` (default stderr), disabled where it cannot redraw in place (a log file, a pipe)."""
    return tqdm(iterable, file=file, disable=disable or not bars_draw(file), **options)


@contextmanager
def library_bars() -> Iterator[None]:
    """Within: Hugging Face's loading bars (downloads, weights, GGUF conversion) are off unless they would draw."""
    if bars_draw():
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as gguf_loading
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    converting = gguf_loading.tqdm
    hf_logging.disable_progress_bar()  # transformers' and huggingface_hub's bars
    gguf_loading.tqdm = functools.partial(converting, disable=True)  # the GGUF conversion's bar has no switch
    try:
        yield
    finally:
        gguf_loading.tqdm = converting
        if was_enabled:
            hf_logging.enable_progress_bar()
