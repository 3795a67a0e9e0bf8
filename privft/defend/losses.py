"""Per-sample losses for selection: the audit's own per-token loss, scored in eval mode without gradients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.data.records import Record
from privft.scoring import score_losses


def sample_losses(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[Record], *,
                  batch_size: int = 8, max_length: int | None = None, desc: str = "SOFT scoring",
                  shard: bool = False) -> np.ndarray:
    """Mean token NLL (`TokenStats.mean_nll`) of each text under `model`, as the audit's loss attack sees it.

    `score_losses` switches the model to eval mode (no dropout) for the pass and back afterwards,
    and runs without gradients, so scoring mid-training changes neither the model nor its grads.
    `shard=True` shares the pass across the torch.distributed ranks (`score_texts`).
    """
    if not texts:
        return np.zeros(0, dtype=np.float64)
    return score_losses(model, tokenizer, texts, batch_size=batch_size, max_length=max_length, desc=desc,
                        shard=shard)


class TrainingPassLosses:
    """Per-sample mean NLLs read off the trainer's own forward passes: a forward hook, no extra pass.

    Each training batch's logits give every sample in it its mean token NLL (the audit's loss,
    in train mode and before that batch's update). A sample is recognised by its token ids as
    the trainer serves its original version (`served_ids[i]`), so the batches need no index
    column; a sample served obfuscated is not recognised and keeps its last original loss.
    `losses` is NaN for a sample not yet seen. With `masked` (records, whose batches carry labels
    that mask the untrained tokens) the mean is over the trained tokens only, as the audit scores them.
    """

    def __init__(self, served_ids: Sequence[Sequence[int]], masked: bool = False) -> None:
        self.masked = masked
        self.losses = np.full(len(served_ids), np.nan)
        self._samples: dict[tuple[int, ...], list[int]] = {}
        for index, ids in enumerate(served_ids):
            self._samples.setdefault(tuple(ids), []).append(index)
        self._handle: torch.utils.hooks.RemovableHandle | None = None

    def attach(self, model: torch.nn.Module) -> None:
        """Start recording from `model`'s training forward passes."""
        self.detach()
        self._handle = model.register_forward_hook(self._record, with_kwargs=True)

    def detach(self) -> None:
        """Stop recording."""
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    @torch.no_grad()
    def _record(self, module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if not module.training:
            return  # evaluation and SOFT's own eval-mode scoring are not training passes
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        logits = getattr(output, "logits", None)
        if input_ids is None or logits is None:
            return
        attention = kwargs.get("attention_mask")
        labels = kwargs.get("labels") if self.masked else None
        # Samples are looked up on the host: one copy of the batch's ids and mask, and one of its losses.
        host_ids = input_ids.cpu()
        host_real = attention.cpu().bool() if attention is not None else torch.ones_like(host_ids, dtype=torch.bool)
        recorded, losses = [], []
        for row in range(host_ids.shape[0]):
            positions = host_real[row].nonzero().squeeze(1)
            indices = self._samples.get(tuple(host_ids[row, positions].tolist()))
            targets = positions[1:]
            if labels is not None:  # a record's trained tokens
                targets = targets[labels[row].cpu()[targets] != -100]
            if not indices or targets.numel() < 1:
                continue
            targets = targets.to(logits.device)
            row_logits = logits[row].index_select(0, targets - 1).float()
            losses.append(torch.nn.functional.cross_entropy(row_logits, input_ids[row, targets]))
            recorded.append(indices)
        for indices, loss in zip(recorded, torch.stack(losses).tolist() if losses else []):
            self.losses[indices] = loss
