"""Canary extraction: does greedy decoding, or beam search, from a canary's template prefix yield its secret?

The prefix is the longest token prefix that the canaries and the plan's reference secrets all
share (as exposure measures them): the template's text before the secret, tokenized exactly as
in training, with no assumption about how it meets the secret at the token boundary. From there
the model writes as many tokens as the rest of the canary has; a continuation yields the secret
when the secret's text appears in it. A conversational canary is rendered as trained
(`privft.scoring.render`), so its prefix is the chat-templated prompt and the reply up to the
secret (or, prompt-side, the user turn up to the secret).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.attacks.exposure import CanaryExposure
from privft.data.canaries import CanaryPlan
from privft.data.pii import PIICanaryPlan
from privft.extraction.greedy import generate_continuations
from privft.scoring import score_texts
from privft.scoring.render import RecordRendering, record_rendering, render_records, rendering_context


def template_prefix_length(token_ids: Sequence[Sequence[int]]) -> int:
    """The number of leading tokens that every sequence in `token_ids` shares."""
    shared, shortest = 0, min(len(ids) for ids in token_ids)
    while shared < shortest and len({ids[shared] for ids in token_ids}) == 1:
        shared += 1
    return shared


def canary_rendering(plan: CanaryPlan) -> RecordRendering:
    """The rendering in force, scoring the turn that holds the plan's secret: the reply, or the prompt.

    A prompt-side canary is read from its untrained tokens ("prompt"), or from all of them when the trainer
    trains on the whole conversation (messages without `assistant_only_loss`), user turn included.
    """
    rendering = record_rendering()
    trains_all = plan.format == "messages" and not rendering.assistant_only_loss
    return replace(rendering, scored="all" if plan.secret_in == "prompt" and trains_all else plan.secret_in)


@dataclass(frozen=True)
class CanaryExtraction:
    """What decoding from one canary's template prefix produced, beside its exposure when it was measured."""

    secret: str
    secret_format: str  # "random digits" (CanaryPlan), or the PII kind ("email", "phone", …)
    inserted: bool  # trained on; False for a one-run audit's controls
    log_probability: float  # natural log of P(rest of the canary | BOS + template prefix)
    greedy: bool  # greedy decoding yields the secret
    beam: bool  # the best beam yields it
    in_beams: bool  # one of the beams yields it
    greedy_text: str  # what greedy decoding wrote after the prefix
    rank: int | None = None  # among the plan's references of the same format (1 = most likely); None: not measured
    n_alternatives: int | None = None
    exposure: float | None = None  # rank exposure in bits

    def to_dict(self) -> dict:
        """A JSON-ready dict of every field."""
        return dict(vars(self))


def canary_extraction(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, plan: CanaryPlan, *,
                      beams: int = 5, batch_size: int = 8,
                      exposures: Sequence[CanaryExposure] = ()) -> list[CanaryExtraction]:
    """Greedy and beam-search extraction of each of the plan's canaries, with its exposure from `exposures`.

    `exposures` (a `CanaryCallback`'s results) are joined by secret; a canary without one gets
    no rank. Scores the canaries once (loss only) for P(rest | prefix), then decodes from the prefix
    as rendered for training (after the start token; a conversational canary, from its chat template).
    """
    n_canaries, candidates = len(plan.secrets), plan.candidates()
    with rendering_context(canary_rendering(plan)):
        rendered = render_records(candidates, tokenizer)
        stats = score_texts(model, tokenizer, candidates[:n_canaries], batch_size=batch_size,
                            desc="canary extraction", distribution=False)
    shared = template_prefix_length([r.input_ids for r in rendered])
    prompts = [r.input_ids[:shared] for r in rendered[:n_canaries]]
    n_new = max(len(r.input_ids) for r in rendered[:n_canaries]) - shared
    greedy = generate_continuations(model, tokenizer, prompts, n_new, batch_size=batch_size)
    beam = generate_continuations(model, tokenizer, prompts, n_new, batch_size=batch_size, num_beams=beams)
    measured = {e.secret: e for e in exposures}
    secret_format = plan.kind if isinstance(plan, PIICanaryPlan) else "random digits"

    def yields(ids: list[int], prompt_ids: list[int], secret: str) -> bool:
        # the prefix's last token may hold the secret's first characters; the tokens before it cannot
        before = len(tokenizer.decode(prompt_ids[:-1], skip_special_tokens=True))
        return secret in tokenizer.decode(prompt_ids + ids, skip_special_tokens=True)[before:]

    found = []
    rows = zip(plan.secrets, plan.included(), rendered, stats, prompts, greedy, beam)
    for secret, inserted, canary, stat, prompt, greedy_beams, search_beams in rows:
        exposure = measured.get(secret)
        after_prefix = [t >= shared for t in canary.scored]  # the scored tokens the prefix does not hold
        found.append(CanaryExtraction(
            secret=secret, secret_format=secret_format, inserted=inserted,
            log_probability=float(stat.token_logprobs[after_prefix].astype(np.float64).sum()),
            greedy=yields(greedy_beams[0], prompt, secret), beam=yields(search_beams[0], prompt, secret),
            in_beams=any(yields(b, prompt, secret) for b in search_beams),
            greedy_text=tokenizer.decode(greedy_beams[0], skip_special_tokens=True),
            rank=exposure.rank if exposure else None, n_alternatives=exposure.n_alternatives if exposure else None,
            exposure=exposure.exposure_rank if exposure else None))
    return found
