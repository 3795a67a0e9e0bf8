"""LLM rewrites with the SOFT paper's prompts, run by a local instruct model through its chat template."""

from __future__ import annotations

import re
from functools import cached_property
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.models import DEFAULT_MODEL, load_model
from privft.paraphrase.base import Paraphraser, model_identity

SYSTEM_PROMPT = "You are a helpful text rewriting assistant."
INSTRUCTIONS = {
    "text": "Rewrite the following paragraph by replacing every word with an alternative term that does not share"
            " the same root or spelling. Preserve the same meaning and sentence structure as much as possible.",
    "code": "Rewrite the following code so it preserves the same functionality and flow, but changes all variable"
            " names, function names, and comments. Maintain the same input-output behavior. Keep it in the same"
            " programming language.",
}
_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.DOTALL)
_OPENER = re.compile(r"(?:sure|certainly|of course|absolutely|okay|ok)\s*[!,.:]", re.IGNORECASE)
_ANNOUNCES = re.compile(r"\b(?:here|below|rewrit\w*|paraphras\w*|revised|version)\b", re.IGNORECASE)
_NOTE = re.compile(r"\(?(?:(?:notes?|explanation|changes(?: made)?)\s*:|i hope\b|let me know\b"
                   r"|this (?:rewritten|revised|paraphrased) (?:version|paragraph|text|code)\b"
                   r"|in this (?:rewrite|version)\b)", re.IGNORECASE)


def build_messages(text: str, domain: str = "text") -> list[dict[str, str]]:
    """The release's chat messages: for prose a system message, then the instruction and `text` in triple quotes.

    The code prompt is sent without a system message, as the release's README shows it.
    """
    if domain not in INSTRUCTIONS:
        raise ValueError(f"domain={domain!r} is not known; choose one of {', '.join(INSTRUCTIONS)}.")
    user = {"role": "user", "content": f'{INSTRUCTIONS[domain]}\n"""\n{text}\n"""'}
    return [{"role": "system", "content": SYSTEM_PROMPT}, user] if domain == "text" else [user]


def clean_reply(reply: str) -> str:
    """The rewrite inside an LLM reply, without lead-ins ("Sure, ...", "Here is ...:") and trailing notes.

    A fenced block (```) wins, then the text after the first triple quote up to the next one
    (the release's `parse_response`); otherwise the whole reply.
    """
    if fence := _FENCE.search(reply):
        reply = fence.group(1)
    elif '"""' in reply:
        reply = reply.split('"""')[1]
    lines = reply.strip().splitlines()
    while lines and (_OPENER.match(lines[0].strip())
                     or (lines[0].rstrip().endswith(":") and _ANNOUNCES.search(lines[0]))):
        lines = lines[1:]
    paragraphs = re.split(r"\n\s*\n", "\n".join(lines).strip())
    while len(paragraphs) > 1 and _NOTE.match(paragraphs[-1].strip()):
        paragraphs.pop()
    return "\n\n".join(paragraphs).strip()


class LLMParaphraser(Paraphraser):
    """Rewrite text or code with a local instruct model, prompted as in the SOFT paper; seeded sampling."""

    name = "llm"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, domain: str = "text",
                 max_new_tokens: int | None = None, temperature: float = 0.7, top_p: float = 0.9) -> None:
        if domain not in INSTRUCTIONS:
            raise ValueError(f"domain={domain!r} is not known; choose one of {', '.join(INSTRUCTIONS)}.")
        if not tokenizer.chat_template:
            raise ValueError(f"The tokenizer {tokenizer.name_or_path!r} has no chat template; LLMParaphraser needs an"
                             " instruct model's tokenizer (or set tokenizer.chat_template).")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1, or None for twice the input + 32.")
        if temperature < 0:
            raise ValueError(f"temperature={temperature} must be >= 0 (0 decodes greedily).")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p={top_p} must be in (0, 1].")
        self.model, self.tokenizer, self.domain = model, tokenizer, domain
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p

    @classmethod
    def default(cls, **options: Any) -> LLMParaphraser:
        """An LLMParaphraser on the embedded SmolLM2-135M-Instruct."""
        return cls(*load_model(DEFAULT_MODEL), **options)

    @cached_property
    def _identity(self) -> dict[str, Any]:
        return model_identity(self.model, self.tokenizer)

    def settings(self) -> dict[str, Any]:
        """Domain, prompt, sampling settings and the identity of the model and tokenizer."""
        return {
            "domain": self.domain, "messages": build_messages("{text}", self.domain),
            "max_new_tokens": self.max_new_tokens, "temperature": self.temperature, "top_p": self.top_p,
            **self._identity,
        }

    def rewrite(self, text: str, *, seed: int) -> str:
        """The model's rewrite of `text`, cleaned of meta-text; sampling is seeded and leaves the global RNG alone."""
        inputs = self.tokenizer.apply_chat_template(
            build_messages(text, self.domain), add_generation_prompt=True, return_dict=True, return_tensors="pt"
        ).to(self.model.device)
        prompt_length = inputs["input_ids"].shape[1]
        budget = self._new_token_budget(text, prompt_length)
        if self.temperature:
            sampling = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p}
        else:
            sampling = {"do_sample": False}
        device = self.model.device
        with torch.random.fork_rng(devices=[] if device.type == "cpu" else None, device_type=device.type):
            torch.manual_seed(seed)
            with torch.inference_mode():
                output = self.model.generate(
                    **inputs, max_new_tokens=budget, pad_token_id=self.tokenizer.pad_token_id, **sampling
                )
        return clean_reply(self.tokenizer.decode(output[0, prompt_length:], skip_special_tokens=True))

    def _new_token_budget(self, text: str, prompt_length: int) -> int:
        """`max_new_tokens` (default: twice the text's tokens + 32), within what the model's context leaves."""
        n_tokens = len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])
        wanted = self.max_new_tokens or 2 * n_tokens + 32
        context = getattr(self.model.config, "max_position_embeddings", None)
        if context is None:
            return wanted
        if prompt_length >= context:
            raise ValueError(f"The prompt for a text of {len(text)} characters is {prompt_length} tokens, which fills"
                             f" the model's context of {context}; split the text or use a longer-context model.")
        return min(wanted, context - prompt_length)
