"""LLM rewrites with the SOFT paper's prompts, run by a local instruct model through its chat template."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from privft.models import DEFAULT_MODEL, load_model
from privft.paraphrase.base import Paraphraser, model_identity
from privft.paraphrase.registry import register_paraphraser
from privft.scoring import start_token

SYSTEM_PROMPT = "You are a helpful text rewriting assistant."
INSTRUCTIONS = {
    "text": "Rewrite the following paragraph by replacing every word with an alternative term that does not share"
            " the same root or spelling. Preserve the same meaning and sentence structure as much as possible.",
    "code": "Rewrite the following code so it preserves the same functionality and flow, but changes all variable"
            " names, function names, and comments. Maintain the same input-output behavior. Keep it in the same"
            " programming language.",
}
MAX_LEAD_IN_WORDS = 16  # longer first lines are kept: they are more likely content than a lead-in
_FENCE = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.DOTALL)
# The prompt's triple quote: anywhere in prose; in code only alone on a line, since docstrings use it too.
_QUOTES = {"text": re.compile('"""'), "code": re.compile(r'^"""[ \t]*$', re.MULTILINE)}
# A lead-in line: an acknowledgement ("Sure!", "Certainly,"), an announcement ending with ':' ("Here is the
# rewritten paragraph:", "Rewritten text:"), or both ("Sure, here you go.", "Of course! Here's the rewrite:").
_ACK = r"(?:sure|certainly|of course|absolutely|okay|ok)\b[!,.:]*"
_ANNOUNCE = r"(?:(?:here|below)(?:['\u2019]s|\s+is|\s+are)|(?:the\s+)?(?:rewritten|paraphrased|revised))\b.*:"
_LEAD_IN = re.compile(rf"(?:{_ACK}\s*)?(?:{_ANNOUNCE}|here you go[.!]?)?", re.IGNORECASE)
_NOTE = re.compile(r"\(?(?:(?:notes?|explanation|changes(?: made)?)\s*:|i hope\b|let me know\b"
                   r"|this (?:rewritten|revised|paraphrased) (?:version|paragraph|text|code)\b"
                   r"|in this (?:rewrite|version)\b)", re.IGNORECASE)


def _check_domain(domain: str) -> None:
    if domain not in INSTRUCTIONS:
        raise ValueError(f"domain={domain!r} is not known; choose one of {', '.join(INSTRUCTIONS)}.")


def build_messages(text: str, domain: str = "text") -> list[dict[str, str]]:
    """The release's chat messages: for prose a system message, then the instruction and `text` in triple quotes.

    The code prompt is sent without a system message, as the release's README shows it.
    """
    _check_domain(domain)
    user = {"role": "user", "content": f'{INSTRUCTIONS[domain]}\n"""\n{text}\n"""'}
    return [{"role": "system", "content": SYSTEM_PROMPT}, user] if domain == "text" else [user]


def clean_reply(reply: str, domain: str = "text") -> str:
    """The rewrite inside an LLM reply, for prose without lead-ins ("Sure! Here is ...:") and trailing notes.

    A fenced block (```) is the rewrite, verbatim. Otherwise, as in the release's `parse_response`,
    the text between the first pair of triple quotes is, verbatim; a single triple quote is the
    prompt's closing quote echoed before or after the rewrite, so the side holding text is kept
    (the part before it when that has any). For prose outside these delimiters, leading lead-in
    lines are dropped: lines of at most `MAX_LEAD_IN_WORDS` words that are an acknowledgement
    ("Sure!", "Of course,"), an announcement starting "Here is/are", "Here's", "Below is" or
    "Rewritten/Paraphrased/Revised" and ending with ':', or the two together ("Sure, here you go.").
    So are trailing notes ("Note: ...", "I hope ..."). Code is never touched beyond the delimiters.
    """
    _check_domain(domain)
    if fence := _FENCE.search(reply):
        return fence.group(1).strip()
    parts = _QUOTES[domain].split(reply)
    if len(parts) > 2:
        return parts[1].strip()
    tidy = _without_meta if domain == "text" else str.strip
    return tidy(parts[0]) or tidy(parts[-1])


def _is_lead_in(line: str) -> bool:
    """Whether `line` is blank or a short lead-in, such as "Sure!" or "Here is the rewritten paragraph:"."""
    return len(line.split()) <= MAX_LEAD_IN_WORDS and _LEAD_IN.fullmatch(line.strip()) is not None


def _without_meta(text: str) -> str:
    """Prose `text` without its lead-in lines and trailing note paragraphs ("Note: ...", "I hope ...")."""
    lines = text.strip().splitlines()
    while lines and _is_lead_in(lines[0]):
        lines = lines[1:]
    paragraphs = re.split(r"\n\s*\n", "\n".join(lines).strip())
    while len(paragraphs) > 1 and _NOTE.match(paragraphs[-1].strip()):
        paragraphs.pop()
    return "\n\n".join(paragraphs).strip()


class RowSeededSampler(LogitsProcessor):
    """Sample each row's next token with its own seeded generator (temperature, then top-p), for greedy decoding.

    It returns logits that are -inf except at the sampled token, so `generate(do_sample=False)`
    takes that token. A row's draws come from its generator alone: its rewrite does not depend on
    the other rows of the batch, nor on the global RNG.
    """

    def __init__(self, seeds: Sequence[int], *, temperature: float, top_p: float, device: torch.device) -> None:
        self.temperature, self.top_p = temperature, top_p
        self.generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Logits that are 0 at each row's sampled token and -inf elsewhere."""
        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        if self.top_p < 1:  # the nucleus: the most likely tokens until their mass reaches top_p
            ranked, order = probs.sort(dim=-1, descending=True)
            ranked[ranked.cumsum(dim=-1) - ranked >= self.top_p] = 0.0
            probs = torch.zeros_like(probs).scatter_(-1, order, ranked)
        chosen = torch.cat([torch.multinomial(row, 1, generator=generator)
                            for row, generator in zip(probs, self.generators, strict=True)])
        return torch.full_like(scores, float("-inf")).scatter_(-1, chosen[:, None], 0.0)


@register_paraphraser
class LLMParaphraser(Paraphraser):
    """Rewrite text or code with a local instruct model, prompted as in the SOFT paper; seeded sampling, batched."""

    name = "llm"
    needs_model = True

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, domain: str = "text",
                 max_new_tokens: int | None = None, temperature: float = 0.7, top_p: float = 0.9,
                 batch_size: int = 16) -> None:
        _check_domain(domain)
        if not tokenizer.chat_template:
            raise ValueError(f"The tokenizer {tokenizer.name_or_path!r} has no chat template; LLMParaphraser needs an"
                             " instruct model's tokenizer (or set tokenizer.chat_template).")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be >= 1, or None for twice the input + 32.")
        if temperature < 0:
            raise ValueError(f"temperature={temperature} must be >= 0 (0 decodes greedily).")
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p={top_p} must be in (0, 1].")
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1: the texts generated together.")
        self.model, self.tokenizer, self.domain, self.batch_size = model, tokenizer, domain, batch_size
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p

    @classmethod
    def default(cls, **options: Any) -> LLMParaphraser:
        """An LLMParaphraser on the embedded SmolLM2-135M-Instruct."""
        return cls(*load_model(DEFAULT_MODEL), **options)

    @cached_property
    def _identity(self) -> dict[str, Any]:
        return model_identity(self.model, self.tokenizer)

    def settings(self) -> dict[str, Any]:
        """Domain, prompt, chat template, sampling and generation settings, device, and the model and tokenizer.

        `batch_size` is not among them: rows are sampled apart, so it changes no rewrite beyond float rounding.
        """
        generation = self.model.generation_config.to_json_string(use_diff=True, ignore_metadata=True)
        return {
            "domain": self.domain, "messages": build_messages("{text}", self.domain),
            "chat_template": self.tokenizer.chat_template, "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature, "top_p": self.top_p, "sampler": RowSeededSampler.__name__,
            "generation_config": json.loads(generation), "device": self.model.device.type, **self._identity,
        }

    def rewrite(self, text: str, *, seed: int) -> str:
        """The model's rewrite of `text`, cleaned of meta-text; sampling is seeded and leaves the global RNG alone."""
        return self.rewrite_many([text], seeds=[seed])[0]

    def rewrite_many(self, texts: Sequence[str], *, seeds: Sequence[int]) -> list[str]:
        """Each text's rewrite with its seed, as `rewrite` gives it, generated `batch_size` prompts at a time.

        Texts of similar length share a batch, so little of it is padding.
        """
        if len(texts) != len(seeds):
            raise ValueError(f"{len(texts)} texts but {len(seeds)} seeds; give one seed per text.")
        rewrites = [""] * len(texts)
        by_length = sorted(range(len(texts)), key=lambda index: len(texts[index]))
        for start in range(0, len(by_length), self.batch_size):
            rows = by_length[start:start + self.batch_size]
            for index, rewrite in zip(rows, self._generate([texts[i] for i in rows], [seeds[i] for i in rows])):
                rewrites[index] = rewrite
        return rewrites

    def _generate(self, texts: list[str], seeds: list[int]) -> list[str]:
        """One batch: left-padded chat prompts, generated together, each row cut at its own budget and end token."""
        prompts = [self.tokenizer.apply_chat_template(build_messages(text, self.domain), add_generation_prompt=True)
                   for text in texts]
        prompts = [prompt["input_ids"] if isinstance(prompt, Mapping) else prompt for prompt in prompts]
        budgets = [self._new_token_budget(text, len(prompt)) for text, prompt in zip(texts, prompts)]
        width = max(map(len, prompts))
        pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else start_token(self.tokenizer)
        device = self.model.device
        input_ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        processors = LogitsProcessorList(
            [RowSeededSampler(seeds, temperature=self.temperature, top_p=self.top_p, device=device)]
            if self.temperature else [])
        with torch.inference_mode():
            output = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=False,
                                         max_new_tokens=max(budgets), pad_token_id=pad_id,
                                         logits_processor=processors)
        ends = {*_token_ids(self.model.generation_config.eos_token_id), *_token_ids(self.tokenizer.eos_token_id)}
        replies = []
        for row, budget in zip(output[:, width:].tolist(), budgets):
            row = row[:budget]
            stop = next((at for at, token in enumerate(row) if token in ends), len(row))
            replies.append(clean_reply(self.tokenizer.decode(row[:stop], skip_special_tokens=True), self.domain))
        return replies

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


def _token_ids(ids: int | list[int] | None) -> list[int]:
    """A generation config's end-token id(s) as a list."""
    return [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
