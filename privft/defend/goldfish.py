"""Goldfish loss (Hans et al., NeurIPS 2024): no loss on a hashed 1-in-k share of the trained tokens.

A token is dropped from the loss when a fixed hash of the `h` token ids before it is 0 mod `k`, so
a passage gets the same mask wherever it appears (in any document, at any offset) and no copy of
it ever teaches its dropped tokens. The released code (ahans30/goldfish-loss, `lit_gpt/utils.py`,
`apply_goldfish`, strategy "hash-table") hashes a window of `h` label ids that ends with the
dropped token itself, through the product of the ids; privft follows the paper's text instead
(the `h` ids before the token) and hashes them with BLAKE2b, so that neither a zero id nor a
reordered context makes two contexts collide. As there, the first `h` tokens of a sequence (fewer
than `h` before them) are never dropped.

The mask is applied to the collator's labels (`GoldfishCollator`, `add_goldfish`), so it composes
with any earlier mask: a label already -100 (padding, a prompt, a user turn) stays -100, and the
hash reads the ids before a token whatever their labels.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from privft.config import require
from privft.training_record import DropCounts

if TYPE_CHECKING:
    from transformers import Trainer

IGNORE_INDEX = -100


@dataclass
class GoldfishSettings:
    """Goldfish loss (the YAML's `goldfish:` section); off when `k` is None."""

    k: int | None = None  # drop 1 in k trained tokens from the loss; the paper's default is 4
    h: int = 13  # the hash reads this many token ids before each token (the paper's default)

    def __post_init__(self) -> None:
        """Refuse a k that drops every token or none, and a hash that reads no context."""
        require(self.k is None or self.k >= 2, "k", self.k, "must be at least 2 (k = 1 would drop every token), "
                "or null for no Goldfish loss.")
        require(self.h >= 1, "h", self.h, "must be at least 1: the hash reads the h token ids before each token.")

    @property
    def on(self) -> bool:
        """Whether Goldfish loss is applied."""
        return self.k is not None


def token_contexts(ids: Sequence[int], h: int) -> list[bytes | None]:
    """Each token's context, what the mask hashes: the `h` ids before it as bytes (None for the first `h` tokens)."""
    window = np.asarray(ids, dtype="<i8")
    return [None] * min(h, len(window)) + [window[i - h:i].tobytes() for i in range(h, len(window))]


def _drops_after(context: bytes | None, k: int) -> bool:
    """Whether the mask drops the token after `context`: BLAKE2b of it is 0 mod `k` (never with no full context)."""
    return context is not None and int.from_bytes(hashlib.blake2b(context, digest_size=8).digest(), "little") % k == 0


def goldfish_mask(ids: Sequence[int], settings: GoldfishSettings) -> list[bool]:
    """Whether each token of one sequence is dropped: BLAKE2b of the `h` ids before it is 0 mod `k`."""
    require(settings.on, "k", settings.k, "must be set to build a Goldfish mask.")
    return [_drops_after(context, settings.k) for context in token_contexts(ids, settings.h)]


def goldfish_labels(input_ids: torch.Tensor, labels: torch.Tensor, settings: GoldfishSettings,
                    attention_mask: torch.Tensor | None = None, position_ids: torch.Tensor | None = None
                    ) -> torch.Tensor:
    """`labels` (batch, length) with -100 on every dropped token; the tokens already at -100 stay so.

    Each row's sequences are its tokens where `attention_mask` is 1 (all without one), split where
    `position_ids` restart at 0 (trl's padding-free batches pack several sequences into one row).
    """
    masked = labels.clone()
    for row in range(input_ids.shape[0]):
        real = (attention_mask[row].bool() if attention_mask is not None
                else torch.ones_like(input_ids[row], dtype=torch.bool)).nonzero().squeeze(1)
        starts = [] if position_ids is None else (position_ids[row, real] == 0).nonzero().squeeze(1).tolist()
        for positions in torch.tensor_split(real, starts):
            drop = torch.tensor(goldfish_mask(input_ids[row, positions].tolist(), settings), dtype=torch.bool)
            masked[row, positions[drop]] = IGNORE_INDEX
    return masked


def drop_counts(rows: Iterable[Mapping[str, Any]], settings: GoldfishSettings) -> DropCounts:
    """Count the mask's drops on training rows (`input_ids`, and `labels` where the rows mask untrained tokens).

    A context met more than once drops the token after it in every copy, so the model is never trained
    on what follows it there: the recurring drops are the knowledge a recurring sentence states that
    Goldfish withholds (docs/goldfish.md measures what they cost on templated replies).
    """
    require(settings.on, "k", settings.k, "must be set to count a Goldfish mask's drops.")
    contexts: Counter[bytes] = Counter()
    dropped: list[bytes] = []
    n_trained = 0
    for row in rows:
        labels = row.get("labels")
        trained = ([True] * len(row["input_ids"]) if labels is None
                   else [label != IGNORE_INDEX for label in labels])
        n_trained += sum(trained[1:])
        for context, is_trained in zip(token_contexts(row["input_ids"], settings.h), trained):
            if is_trained and context is not None:
                contexts[context] += 1
                if _drops_after(context, settings.k):
                    dropped.append(context)
    return DropCounts(n_trained, len(dropped), sum(contexts[context] > 1 for context in dropped))


class GoldfishCollator:
    """A data collator: `collator`'s batch, its labels Goldfish-masked (`goldfish_labels`)."""

    def __init__(self, collator: Callable[[list[Any]], dict[str, Any]], settings: GoldfishSettings) -> None:
        require(settings.on, "k", settings.k, "must be set for a Goldfish collator.")
        self.collator, self.settings = collator, settings

    def __call__(self, features: list[Any]) -> dict[str, Any]:
        """Collate `features`, then drop the Goldfish tokens from the batch's labels."""
        batch = self.collator(features)
        if "labels" not in batch:
            raise ValueError(f"Goldfish loss masks the batch's labels, but {type(self.collator).__name__} gave a "
                             f"batch without them (keys {sorted(batch)}); use a causal-LM collator that sets labels.")
        batch["labels"] = goldfish_labels(batch["input_ids"], batch["labels"], self.settings,
                                          batch.get("attention_mask"), batch.get("position_ids"))
        return batch


def add_goldfish(trainer: Trainer, settings: GoldfishSettings) -> Trainer:
    """Make `trainer` (a Trainer or trl SFTTrainer) train with Goldfish loss; returns it.

    Wraps the trainer's own collator, so its padding and completion-only or assistant-only masks
    come first. Composes with `privft.dp.make_private` (either order): a sequence's mask is a
    function of its own ids alone, so its loss, and the clipped gradient DP-SGD noises, still
    depends on that sequence only, and the accountant's ε holds unchanged. Evaluation and prediction
    batches keep every trained token: Goldfish changes what the model learns from, not what its loss is measured
    on, so `trainer.evaluate()` (and the validation loss a tuned run chooses by) stays comparable.
    """
    collator = trainer.data_collator
    unmasked = collator.collator if isinstance(collator, GoldfishCollator) else collator
    trainer.data_collator = GoldfishCollator(unmasked, settings)  # once: a second call replaces the settings
    for method in ("get_eval_dataloader", "get_test_dataloader"):  # evaluate() and predict() keep every token
        setattr(trainer, method, partial(_dataloader_with, trainer, unmasked, method))
    return trainer


def _dataloader_with(trainer: Trainer, collator: Callable[[list[Any]], dict[str, Any]], method: str,
                     *args: Any) -> Any:
    """`trainer`'s own dataloader from `method`, built with `collator` in place of its training collator."""
    training_collator, trainer.data_collator = trainer.data_collator, collator
    try:
        return getattr(type(trainer), method)(trainer, *args)
    finally:
        trainer.data_collator = training_collator
