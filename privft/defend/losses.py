"""Per-sample losses for selection: the audit's own per-token loss, scored in eval mode without gradients."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
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
