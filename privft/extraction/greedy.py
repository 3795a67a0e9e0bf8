"""Greedy k-extractability (Carlini et al. 2023, "Quantifying memorization across neural language models").

A text is k-extractable when greedy decoding from its first k tokens (after BOS, as it was
trained) reproduces its next m tokens exactly; approximately, when the token edit distance of
the m decoded tokens to the true ones is at most a share of m (0.1 by default). Decoding runs in
left-padded batches of `model.generate` on the model's device, in eval mode. A record is decoded
from its prompt with the chat template's generation prompt, and compared with the first m tokens
of its trained reply (`privft.extraction.replies`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from privft.extraction.probabilistic import GROUPS
from privft.scoring import start_token


def edit_distance(a: Sequence[int], b: Sequence[int]) -> int:
    """Levenshtein distance between two token sequences (insertions, deletions and substitutions cost 1)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def normalised_edit_distance(decoded: Sequence[int], truth: Sequence[int]) -> float:
    """Token edit distance divided by the longer length: 0 for an exact match, 1 for nothing in common."""
    longest = max(len(decoded), len(truth))
    return edit_distance(decoded, truth) / longest if longest else 0.0


@torch.no_grad()
def generate_continuations(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                           prompts: Sequence[Sequence[int]], n_new: int, *, batch_size: int = 8,
                           num_beams: int = 1) -> list[list[list[int]]]:
    """The `num_beams` best deterministic continuations (greedy for 1, beam search above) of each prompt.

    Prompts are token ids (BOS included), decoded in left-padded batches. Each continuation is
    the `n_new` generated ids, shorter when the model ended the text (its EOS is kept).
    """
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else start_token(tokenizer)
    config = GenerationConfig(max_new_tokens=n_new, min_new_tokens=0, do_sample=False, num_beams=num_beams,
                              num_return_sequences=num_beams, pad_token_id=pad_id,
                              eos_token_id=tokenizer.eos_token_id, bos_token_id=start_token(tokenizer))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    found: list[list[list[int]]] = []
    try:
        for start in range(0, len(prompts), batch_size):
            batch = prompts[start:start + batch_size]
            width = max(map(len, batch))
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, prompt in enumerate(batch):
                ids[row, width - len(prompt):] = torch.tensor(prompt)
                mask[row, width - len(prompt):] = 1
            out = model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=config)
            new = out[:, width:].cpu().view(len(batch), num_beams, -1).tolist()
            found.extend([_until_end(seq, tokenizer.eos_token_id) for seq in beams] for beams in new)
    finally:
        model.train(was_training)
    return found


def _until_end(ids: list[int], eos_id: int | None) -> list[int]:
    """Generated ids up to and including the first EOS (what follows it is padding)."""
    return ids[:ids.index(eos_id) + 1] if eos_id is not None and eos_id in ids else ids


@dataclass(frozen=True)
class GreedyExtraction:
    """Greedy decoding of m tokens from each decoded text's k-token prefix, and the distance to its true suffix."""

    prefix_length: int  # k; 0 for records, decoded from their whole prompt
    suffix_length: int  # m
    max_distance: float  # an approximate match has normalised edit distance ≤ this
    labels: np.ndarray  # (n_texts,) of every audited text: 1 member, 0 non-member
    long_enough: np.ndarray  # (n_texts,) bool: the text has at least k + m tokens (a record's reply, m)
    decoded: np.ndarray  # indices of the texts decoded (all long-enough ones, or the seeded subsample)
    distances: np.ndarray  # (len(decoded),) normalised token edit distance of the decoded suffix to the true one

    def summary(self) -> dict[str, dict]:
        """Per group: texts, long enough, decoded, and exact and approximate matches as counts and rates."""
        decoded_labels = self.labels[self.decoded]
        found = {}
        for group, label in GROUPS.items():
            distances = self.distances[decoded_labels == label]
            n = len(distances)
            exact, approximate = int((distances == 0).sum()), int((distances <= self.max_distance).sum())
            found[group] = {
                "n_texts": int((self.labels == label).sum()),
                "n_long_enough": int((self.long_enough & (self.labels == label)).sum()),
                "n_decoded": n,
                "exact": exact, "exact_rate": exact / n if n else None,
                "approximate": approximate, "approximate_rate": approximate / n if n else None,
            }
        return found


def greedy_extraction(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[str],
                      labels: np.ndarray, *, prefix_length: int = 32, suffix_length: int = 32,
                      max_distance: float = 0.1, max_texts: int | None = None, seed: int = 0,
                      batch_size: int = 8) -> GreedyExtraction:
    """Greedy k-extractability of each text (or of at most `max_texts` per group, drawn with `seed`)."""
    start = start_token(tokenizer)
    cuts = [([start, *ids[:prefix_length]], ids[prefix_length:])
            for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    return greedy_from_prompts(model, tokenizer, cuts, labels, prefix_length=prefix_length,
                               suffix_length=suffix_length, max_distance=max_distance, max_texts=max_texts, seed=seed,
                               batch_size=batch_size)


def greedy_from_prompts(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                        cuts: Sequence[tuple[list[int], list[int]]], labels: np.ndarray, *, prefix_length: int,
                        suffix_length: int, max_distance: float = 0.1, max_texts: int | None = None, seed: int = 0,
                        batch_size: int = 8) -> GreedyExtraction:
    """Greedy decoding of `suffix_length` tokens from each (prompt ids, true continuation) cut, compared with the truth.

    A cut whose continuation is shorter than `suffix_length` is counted, never decoded.
    """
    labels = np.asarray(labels)
    long_enough = np.array([len(rest) >= suffix_length for _, rest in cuts], dtype=bool)
    rng = np.random.default_rng(seed)
    chosen = []
    for label in GROUPS.values():
        candidates = np.flatnonzero(long_enough & (labels == label))
        if max_texts is not None and len(candidates) > max_texts:
            candidates = rng.choice(candidates, size=max_texts, replace=False)
        chosen.append(candidates)
    decoded = np.sort(np.concatenate(chosen)).astype(int)
    prompts = [cuts[i][0] for i in decoded]
    continuations = generate_continuations(model, tokenizer, prompts, suffix_length, batch_size=batch_size)
    distances = np.array([normalised_edit_distance(beams[0], cuts[i][1][:suffix_length])
                          for i, beams in zip(decoded, continuations)], dtype=np.float64)
    return GreedyExtraction(prefix_length, suffix_length, max_distance, labels, long_enough, decoded, distances)
