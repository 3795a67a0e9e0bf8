"""Neighbour rewrites: swap a fraction of words for a local causal LM's top-k alternatives.

This is the offline stand-in for the released SOFT local path, which used MIMIR's masked-LM
(T5) neighbours; no masked LM is available offline here, so the alternatives come from a causal
LM's next-token distribution, which sees only the left context and reads less naturally.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.paraphrase.base import Paraphraser, model_identity
from privft.paraphrase.registry import register_paraphraser
from privft.scoring import start_token

MAX_WINDOW = 1024  # tokens per forward pass; longer texts are cut into windows
_LETTERS = re.compile(r"[^\W\d_]+")
_SPACED_WORD = re.compile(r" [^\W\d_]+")  # a vocabulary entry that begins a new word


@register_paraphraser
class NeighbourParaphraser(Paraphraser):
    """Replace `fraction` of the words with a sample from the LM's `top_k` word predictions at their position.

    One forward pass over the original text gives the next-token logits at every chosen
    position. Eligible words start with a token that decodes to a space followed by letters
    (byte-level BPE tokenizers such as GPT-2, Llama 3, Qwen 2 or SmolLM2, and SentencePiece ones
    whose "▁word" pieces decode with their space, such as Gemma's); each chosen word is replaced,
    whole, by a token of that same form sampled from the top-k (softmax-weighted) after removing
    the original word in any letter case. Words not preceded by a space (the first word, words
    right after a bracket or quote) are never chosen. Which words change, and to what, follows
    from `seed`.
    """

    name = "neighbour"
    needs_model = True

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, fraction: float = 0.15,
                 top_k: int = 10) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"fraction={fraction} must be in (0, 1]: the share of eligible words to replace.")
        if top_k < 1:
            raise ValueError(f"top_k={top_k} must be >= 1.")
        if not tokenizer.is_fast:
            raise ValueError(f"NeighbourParaphraser needs a fast tokenizer (offset mappings); "
                             f"{tokenizer.name_or_path or type(tokenizer).__name__} is not one.")
        self._start_id = start_token(tokenizer)
        self.model, self.tokenizer, self.fraction, self.top_k = model, tokenizer, fraction, top_k
        self._pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
        word_ids = [i for i, piece in enumerate(self._pieces) if _SPACED_WORD.fullmatch(piece)]
        if not word_ids:
            raise ValueError(f"The tokenizer {tokenizer.name_or_path!r} has no tokens that decode to a space and"
                             " letters; NeighbourParaphraser needs word pieces that decode with their space"
                             " (byte-level BPE as in GPT-2, Llama 3, Qwen 2, SmolLM2; SentencePiece as in Gemma).")
        self._word_mask = torch.full((len(tokenizer),), float("-inf"))  # added to logits: 0 for word-start tokens
        self._word_mask[word_ids] = 0.0
        self._ids_by_word: dict[str, list[int]] = {}
        for i in word_ids:
            self._ids_by_word.setdefault(self._pieces[i][1:].lower(), []).append(i)

    @cached_property
    def _identity(self) -> dict[str, Any]:
        return model_identity(self.model, self.tokenizer)

    def settings(self) -> dict[str, Any]:
        """Fraction, top-k, the start token, the device type (its logits differ slightly) and the identity of the model
        and tokenizer."""
        return {"fraction": self.fraction, "top_k": self.top_k, "start_token": self._start_id,
                "device": self.model.device.type, **self._identity}

    def rewrite(self, text: str, *, seed: int) -> str:
        """`text` with about `fraction` of its eligible words replaced by sampled LM alternatives."""
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        ids = encoding["input_ids"]
        eligible = []  # (token position, character span of the whole word)
        for position, (start, end) in enumerate(encoding["offset_mapping"]):
            word = _LETTERS.search(text, start, end)  # offsets may or may not include the leading space
            if (_SPACED_WORD.fullmatch(self._pieces[ids[position]]) and word and word.start() > 0
                    and text[word.start() - 1].isspace()):
                eligible.append((position, word.start(), _LETTERS.match(text, word.start()).end()))
        if not eligible:
            return text
        generator = torch.Generator().manual_seed(seed)
        count = min(len(eligible), max(1, round(self.fraction * len(eligible))))
        chosen = sorted(eligible[j] for j in torch.randperm(len(eligible), generator=generator)[:count].tolist())
        logits = self._logits_at(ids, [position for position, _, _ in chosen])
        pieces, cursor = [], 0
        for (_, start, end), row in zip(chosen, logits):  # `end` closes the word, even over several tokens
            replacement = self._sample(row, text[start:end], generator)
            pieces += [text[cursor:start], replacement]
            cursor = end
        return "".join(pieces) + text[cursor:]

    def _logits_at(self, ids: list[int], positions: list[int]) -> torch.Tensor:
        """fp32 next-token logits predicting the tokens at `positions`, each from its left context after BOS."""
        context = min(MAX_WINDOW, getattr(self.model.config, "max_position_embeddings", MAX_WINDOW)) - 1
        rows = []
        for begin in range(0, len(ids), context):
            local = [p - begin for p in positions if begin <= p < begin + context]
            if not local:
                continue
            window = torch.tensor([[self._start_id, *ids[begin:begin + context]]], device=self.model.device)
            keep = torch.tensor(local, device=self.model.device)  # hidden state at p (after BOS) predicts token p
            with torch.inference_mode():
                rows.append(self.model(input_ids=window, logits_to_keep=keep).logits[0].float().cpu())
        return torch.cat(rows)

    def _sample(self, logits: torch.Tensor, word: str, generator: torch.Generator) -> str:
        """A word sampled from the top-k word-start tokens of `logits`, other than `word` in any case."""
        scores = torch.full_like(logits, float("-inf"))
        size = min(len(logits), len(self._word_mask))  # a model's vocabulary may be padded beyond the tokenizer's
        scores[:size] = logits[:size] + self._word_mask[:size]
        scores[self._ids_by_word.get(word.lower(), [])] = float("-inf")
        top = torch.topk(scores, self.top_k)
        valid = torch.isfinite(top.values)
        if not valid.any():
            return word
        probabilities = torch.softmax(top.values[valid], dim=0)
        choice = top.indices[valid][torch.multinomial(probabilities, 1, generator=generator)].item()
        return self._pieces[choice][1:]
