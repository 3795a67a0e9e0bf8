"""A real `datasets.Dataset` that serves each training sample either as written or obfuscated, switched by a mask.

Why a mask and not a new dataset: `transformers.Trainer` builds its training dataloader once,
as a local variable of the training loop, so assigning `trainer.train_dataset` or a new
dataloader from a callback has no effect (the bug that left the released SOFT code training on
the original texts). The Trainer does, however, call ``iter(dataloader)`` at the start of every
epoch, *after* the callbacks' ``on_epoch_begin``; the view looks its mask up on each
``__getitem__``, so a mask changed in ``on_epoch_begin`` governs that whole epoch's batches.

Why a `datasets.Dataset`: trl's `SFTTrainer` accepts nothing else, and both trainers prepare
their dataset with `map`, `filter` and `remove_columns` (tokenising, adding labels, truncating to
their `max_length`). The view applies each of those to the original and the obfuscated samples
alike and returns a view that shares its mask, so the trainer's own tokenisation and truncation
reach both versions and the served view still switches. The callback then compares the two
versions *as served*, in tokens, to count the swaps that truncation emptied.

That holds with ``dataloader_num_workers=0`` and with non-persistent workers (they are
re-created, with a fresh copy of the view, on every ``iter``). Persistent workers keep the copy
they got in the first epoch and would never see a new mask; `SelectiveObfuscationCallback`
refuses ``dataloader_persistent_workers=True``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from datasets import Dataset
from numpy.typing import ArrayLike

from privft.data.records import Record, check_records

Example = Mapping[str, Any]
BOTH_VERSIONS_OPS = ("map", "remove_columns", "rename_column", "rename_columns", "select_columns", "cast",
                     "cast_column", "flatten", "with_format", "with_transform")  # Dataset methods applied to both


class _MaskState:
    """The mask of the root view, shared by every view derived from it (a trainer's prepared copy included)."""

    def __init__(self, size: int) -> None:
        self.mask = np.zeros(size, dtype=bool)


def _as_dataset(examples: Dataset | Sequence[Example], name: str) -> Dataset:
    """`examples` as a `datasets.Dataset`, checked to be non-empty."""
    if isinstance(examples, ObfuscatedView):
        raise TypeError(f"{name} is already an ObfuscatedView; pass its `original` or `obfuscated` dataset.")
    if isinstance(examples, Dataset):
        dataset = examples
    else:
        if len(examples) == 0 or not isinstance(examples[0], Mapping):
            raise ValueError(f"{name} must be a datasets.Dataset or a non-empty list of dicts (as "
                             f"tokenize_for_training returns), got {type(examples).__name__} of {len(examples)}.")
        dataset = Dataset.from_list([dict(e) for e in examples])
    if len(dataset) == 0:
        raise ValueError(f"{name} is empty; the view needs at least one training example.")
    return dataset


class ObfuscatedView(Dataset):
    """A `datasets.Dataset` that serves sample i obfuscated where `mask[i]`, else as written; its length is fixed.

    `original` and `obfuscated` hold the same columns, one row per training sample, in the same
    order (token ids for the Trainer, or a ``"text"`` column for trl's `SFTTrainer` to tokenise);
    `texts` are the original texts, scored to decide what to obfuscate. Column access
    (``view["input_ids"]``) reads the original samples.
    """

    def __init__(self, original: Dataset | Sequence[Example], obfuscated: Dataset | Sequence[Example],
                 texts: Sequence[Record], mask: ArrayLike | None = None, *, _state: _MaskState | None = None,
                 _rows: np.ndarray | None = None) -> None:
        original = _as_dataset(original, "original")
        obfuscated = _as_dataset(obfuscated, "obfuscated")
        if not len(original) == len(obfuscated) == len(texts):
            raise ValueError(f"original ({len(original)}), obfuscated ({len(obfuscated)}) and texts ({len(texts)}) "
                             "must have one entry per training sample, in the same order.")
        if original.column_names != obfuscated.column_names:
            raise ValueError(f"original has columns {original.column_names} but obfuscated {obfuscated.column_names}; "
                             "both versions need the same columns.")
        super().__init__(original.data, info=original.info.copy(), split=original.split,
                         indices_table=original._indices, fingerprint=original._fingerprint)
        self.original = original
        self.obfuscated = obfuscated
        self.texts = check_records(texts, "texts")
        self._state = _state or _MaskState(len(original))
        self._rows = np.arange(len(original)) if _rows is None else _rows  # this view's rows in the root mask
        if mask is not None:
            self.set_mask(mask)

    def _derived(self, original: Dataset, obfuscated: Dataset, rows: np.ndarray | None = None) -> ObfuscatedView:
        """A view of transformed versions that shares this view's mask (over `rows`, default all)."""
        rows = np.arange(len(self)) if rows is None else rows
        return ObfuscatedView(original, obfuscated, [self.texts[i] for i in rows], _state=self._state,
                              _rows=self._rows[rows])

    def select(self, indices: Sequence[int] | np.ndarray, **kwargs: Any) -> ObfuscatedView:
        """The samples at `indices`, in both versions, still switched by the shared mask."""
        rows = np.asarray(list(indices), dtype=int)
        return self._derived(self.original.select(rows, **kwargs), self.obfuscated.select(rows, **kwargs), rows)

    def filter(self, function: Callable[..., Any] | None = None, **kwargs: Any) -> ObfuscatedView:
        """The samples whose *original* passes `function` (as `Dataset.filter`), in both versions."""
        marker = "__privft_row"
        kept = self.original.add_column(marker, list(range(len(self)))).filter(function, **kwargs)[marker]
        return self.select(kept)

    def __len__(self) -> int:
        """Number of training samples; fixed, whatever the mask."""
        return len(self.original)

    def _served(self, index: int) -> dict[str, Any]:
        index = range(len(self))[index]  # IndexError past the end, negative indices allowed
        source = self.obfuscated if self._state.mask[self._rows[index]] else self.original
        return source[index]

    def __getitem__(self, key: Any) -> Any:
        """Sample `key` as served now (obfuscated if the mask says so); a column name reads the originals."""
        if isinstance(key, str):
            return self.original[key]
        if isinstance(key, (int, np.integer)):
            return self._served(int(key))
        rows = self.__getitems__(list(range(len(self)))[key] if isinstance(key, slice) else list(key))
        return {column: [row[column] for row in rows] for column in self.original.column_names}

    def __getitems__(self, keys: list[int]) -> list[dict[str, Any]]:
        """A batch of samples as served now (the DataLoader's batched fetch)."""
        return [self._served(int(k)) for k in keys]

    def __iter__(self):
        """Every sample, as served now."""
        return (self._served(i) for i in range(len(self)))

    @property
    def mask(self) -> np.ndarray:
        """A copy of the current mask (True: served obfuscated)."""
        return self._state.mask[self._rows].copy()

    def set_mask(self, mask: ArrayLike) -> None:
        """Serve sample i obfuscated from now on where `mask[i]`; `mask` is a boolean array of length len(self)."""
        array = np.asarray(mask)
        if array.shape != (len(self),):
            raise ValueError(f"mask has shape {array.shape} but the view has {len(self)} samples; "
                             "pass one boolean per training sample.")
        if array.dtype != np.bool_:
            raise ValueError(f"mask must be booleans, got dtype {array.dtype}; convert it with mask.astype(bool) "
                             "if 0/1 values are meant.")
        self._state.mask[self._rows] = array

    def shares_mask_with(self, other: Any) -> bool:
        """Whether `other` is this view or one derived from it (e.g. the copy a trainer prepared)."""
        return isinstance(other, ObfuscatedView) and other._state is self._state

    def served_changed(self, column: str = "input_ids") -> np.ndarray:
        """Per sample: whether its obfuscated version, as this view serves it, differs from the original.

        Read on the view the trainer serves (tokenised and truncated its way), it says which
        selections really change what the model trains on.
        """
        if column not in self.original.column_names:
            raise ValueError(f"The view has no {column!r} column (columns: {self.original.column_names}); "
                             "compare the served versions after the trainer has tokenised them.")
        return np.array([a != b for a, b in zip(self.original[column], self.obfuscated[column])], dtype=bool)


def _on_both_versions(name: str) -> Callable[..., ObfuscatedView]:
    """`Dataset.<name>` as a view method: applied to the original and the obfuscated samples alike."""
    def method(self: ObfuscatedView, *args: Any, **kwargs: Any) -> ObfuscatedView:
        return self._derived(getattr(self.original, name)(*args, **kwargs),
                             getattr(self.obfuscated, name)(*args, **kwargs))

    method.__name__ = name
    method.__doc__ = f"`datasets.Dataset.{name}` applied to both versions; the result shares this view's mask."
    return method


for _name in BOTH_VERSIONS_OPS:
    setattr(ObfuscatedView, _name, _on_both_versions(_name))
