"""Per-sample losses for selection: the audit's own per-token loss, scored in eval mode without gradients."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.scoring import score_losses


def sample_losses(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], *,
                  batch_size: int = 8, max_length: int | None = None, desc: str = "SOFT scoring") -> np.ndarray:
    """Mean token NLL (`TokenStats.mean_nll`) of each text under `model`, as the audit's loss attack sees it.

    `score_losses` switches the model to eval mode (no dropout) for the pass and back afterwards,
    and runs without gradients, so scoring mid-training changes neither the model nor its grads.
    """
    if not texts:
        return np.zeros(0, dtype=np.float64)
    return score_losses(model, tokenizer, texts, batch_size=batch_size, max_length=max_length, desc=desc)


class TrainingPassLosses:
    """Per-sample mean NLLs read off the trainer's own forward passes: a forward hook, no extra pass.

    Each training batch's logits give every sample in it its mean token NLL (the audit's loss,
    in train mode and before that batch's update). A sample is recognised by its token ids as
    the trainer serves its original version (`served_ids[i]`), so the batches need no index
    column; a sample served obfuscated is not recognised and keeps its last original loss.
    `losses` is NaN for a sample not yet seen.
    """

    def __init__(self, served_ids: Sequence[Sequence[int]]) -> None:
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
        for row in range(input_ids.shape[0]):
            real = attention[row].bool() if attention is not None else torch.ones_like(input_ids[row], dtype=torch.bool)
            ids = input_ids[row][real]
            indices = self._samples.get(tuple(ids.tolist()))
            if not indices or ids.numel() < 2:
                continue
            row_logits = logits[row][real][:-1].float()
            loss = torch.nn.functional.cross_entropy(row_logits, ids[1:], reduction="mean").item()
            self.losses[indices] = loss
