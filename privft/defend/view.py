"""A training dataset that serves each example either as written or obfuscated, switched by a mask.

Why a mask and not a new dataset: `transformers.Trainer` builds its training dataloader once,
as a local variable of the training loop, so assigning `trainer.train_dataset` or a new
dataloader from a callback has no effect (the bug that left the released SOFT code training on
the original texts). The Trainer does, however, call ``iter(dataloader)`` at the start of every
epoch, *after* the callbacks' ``on_epoch_begin``; the view looks its mask up lazily on each
``__getitem__``, so a mask changed in ``on_epoch_begin`` governs that whole epoch's batches.

That holds with ``dataloader_num_workers=0`` and with non-persistent workers (they are
re-created, with a fresh copy of the view, on every ``iter``). Persistent workers keep the copy
they got in the first epoch and would never see a new mask; `SelectiveObfuscationCallback`
refuses ``dataloader_persistent_workers=True``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike

from privft.data.loaders import check_texts

Example = Mapping[str, Any]


def _first_example(examples: Sequence[Example], name: str) -> Example:
    """The first example of `examples`, checked to carry `input_ids`."""
    if len(examples) == 0:
        raise ValueError(f"{name} is empty; the view needs at least one training example.")
    first = examples[0]
    if not isinstance(first, Mapping) or "input_ids" not in first:
        raise ValueError(f"{name} must hold dicts with 'input_ids' (as tokenize_for_training returns); "
                         f"its first item is {type(first).__name__} {first!r:.80}.")
    return first


class ObfuscatedView(torch.utils.data.Dataset):
    """Serves example i obfuscated where `mask[i]`, else as written; its length never changes."""

    def __init__(self, original: Sequence[Example], obfuscated: Sequence[Example], texts: Sequence[str],
                 mask: ArrayLike | None = None) -> None:
        _first_example(original, "original")
        _first_example(obfuscated, "obfuscated")
        if not len(original) == len(obfuscated) == len(texts):
            raise ValueError(f"original ({len(original)}), obfuscated ({len(obfuscated)}) and texts ({len(texts)}) "
                             "must have one entry per training sample, in the same order.")
        self.original = original
        self.obfuscated = obfuscated
        self.texts = check_texts(texts, "texts")  # the original texts, scored to decide what to obfuscate
        self._mask = np.zeros(len(original), dtype=bool)
        if mask is not None:
            self.set_mask(mask)

    def __len__(self) -> int:
        """Number of training samples; fixed, whatever the mask."""
        return len(self.original)

    def __getitem__(self, index: int) -> dict[str, Any]:
        """Example `index`, obfuscated if the mask says so at the time of the call."""
        index = range(len(self))[index]  # IndexError past the end, negative indices allowed
        source = self.obfuscated if self._mask[index] else self.original
        return dict(source[index])

    @property
    def mask(self) -> np.ndarray:
        """A copy of the current mask (True: served obfuscated)."""
        return self._mask.copy()

    def set_mask(self, mask: ArrayLike) -> None:
        """Serve sample i obfuscated from now on where `mask[i]`; `mask` is a boolean array of length len(self)."""
        array = np.asarray(mask)
        if array.shape != (len(self),):
            raise ValueError(f"mask has shape {array.shape} but the view has {len(self)} samples; "
                             "pass one boolean per training sample.")
        if array.dtype != np.bool_:
            raise ValueError(f"mask must be booleans, got dtype {array.dtype}; convert it with mask.astype(bool) "
                             "if 0/1 values are meant.")
        self._mask = array.copy()
