"""The adaptive attacker who knows the defence: scores what SOFT left verbatim, and re-creates its paraphrases.

Our reading of the paper's two adaptive settings (seed 003, line 203), on the Ratio attack:
- knows the selection strategy: SOFT keeps each selected text's first part verbatim and rewrites
  the rest, so the attacker scores only that kept part;
- knows the paraphraser and the selection, not their hyperparameters: the attacker rewrites each
  candidate's second part with the same kind of paraphraser at other settings, and takes the
  stronger of the Ratio scores of the candidate and of its rewrite.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.paraphrase import ParaphraseCache, Paraphraser, obfuscate, split_prefix
from privft.scoring import StatsCache, score_texts

ATTACKER_SEED = 7919  # the defender's paraphrase seed is unknown to the attacker


def ratio_scores(model: PreTrainedModel, reference: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 texts: Sequence[str], *, cache: StatsCache | None, batch_size: int) -> np.ndarray:
    """Reference minus target loss per token (privft's Ratio attack) of each text."""
    target = score_texts(model, tokenizer, texts, cache=cache, batch_size=batch_size, desc="adaptive target")
    base = score_texts(reference, tokenizer, texts, cache=cache, batch_size=batch_size, desc="adaptive reference",
                       distribution=False)  # the loss alone, as run_audit scores (and caches) the reference
    return np.array([r.mean_nll - t.mean_nll for t, r in zip(target, base)])


def adaptive_scores(model: PreTrainedModel, reference: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                    texts: Sequence[str], paraphraser: Paraphraser, *, prefix_keep_ratio: float,
                    cache: StatsCache | None = None, paraphrase_cache: ParaphraseCache | None = None,
                    batch_size: int = 8) -> dict[str, np.ndarray]:
    """Scores of the non-adaptive Ratio attack and of the two adaptive attackers, one per text."""
    plain = ratio_scores(model, reference, tokenizer, texts, cache=cache, batch_size=batch_size)
    kept = [split_prefix(t, prefix_keep_ratio)[0].rstrip() or t for t in texts]
    rewrites = [r.text for r in obfuscate(texts, paraphraser, prefix_keep_ratio=prefix_keep_ratio,
                                          cache=paraphrase_cache, seed=ATTACKER_SEED)]
    rewritten = ratio_scores(model, reference, tokenizer, rewrites, cache=cache, batch_size=batch_size)
    return {
        "non-adaptive (Ratio)": plain,
        "knows the selection strategy": ratio_scores(model, reference, tokenizer, kept, cache=cache,
                                                     batch_size=batch_size),
        "knows paraphraser and selection": np.maximum(plain, rewritten),
    }
