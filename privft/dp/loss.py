"""The per-sequence loss of DP-LoRA: one training sequence is the privacy unit, so it is one loss term."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100
MODEL_INPUTS = ("input_ids", "attention_mask", "position_ids")


def sequence_losses(model: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """Mean next-token NLL of each sequence over its non-ignored labels, shape (batch,).

    Labels come from the batch (the collator's -100 marks padding or prompt tokens), else from
    `input_ids` with padding masked. Each sequence is normalised by its own token count, never by
    the batch's: a batch-level token mean would couple the examples and break per-sample clipping.
    """
    labels = batch.get("labels")
    if labels is None:
        mask = batch.get("attention_mask")
        labels = batch["input_ids"] if mask is None else batch["input_ids"].masked_fill(mask == 0, IGNORE_INDEX)
    logits = model(**{k: batch[k] for k in MODEL_INPUTS if k in batch}).logits  # (B, T, V)
    targets = labels[:, 1:]
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                          ignore_index=IGNORE_INDEX, reduction="none").view(targets.shape)  # (B, T-1)
    counts = (targets != IGNORE_INDEX).sum(dim=1)
    return nll.sum(dim=1) / counts.clamp(min=1)
