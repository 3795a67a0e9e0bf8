"""The one-run ε audit of a trained model: score every canary, inserted or control, and bound ε (privft.epsilon_audit).

The guarantee the bound is set beside is the one a canary has: a canary inserted `copies` times
fills that many training sequences, so under DP-LoRA it is protected at group level
(`privft.dp.group_privacy`), and the audit tests that (ε, δ).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.audit import is_peft_model, same_tokenizer
from privft.callbacks.canary import canary_logps
from privft.data.canaries import CanaryPlan
from privft.dp import group_privacy
from privft.epsilon_audit import audit_one_run


def accountant_guarantee(log_history: Sequence[Mapping[str, Any]]) -> tuple[float, float] | None:
    """The DP accountant's last logged (ε, δ) per training sequence (`dp/epsilon`, `dp/delta`); None without DP."""
    for entry in reversed(log_history):
        if "dp/epsilon" in entry and "dp/delta" in entry:
            return float(entry["dp/epsilon"]), float(entry["dp/delta"])
    return None


def one_run_epsilon_audit(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, plan: CanaryPlan,
                          log_history: Sequence[Mapping[str, Any]], *, reference: PreTrainedModel | None = None,
                          reference_tokenizer: PreTrainedTokenizerBase | None = None,
                          batch_size: int = 32) -> dict[str, Any]:
    """The ε lower bound of this run from its canaries, beside the accountant's guarantee when the run is DP.

    Each canary's score is its secret's log-likelihood under the model, minus the reference's
    (`reference`, or a peft model with its adapters disabled) when one with the same tokenizer
    exists: the reference ratio, which removes how likely a secret is before fine-tuning.
    Without DP the bound is at δ = 0.
    """
    if not plan.one_run:
        raise ValueError("The one-run ε audit needs a plan with one_run=True (half the canaries left out as "
                         "controls); set canaries.one_run: true, or CanaryPlan(one_run=True).")
    scores = canary_logps(model, tokenizer, plan, batch_size=batch_size)
    if reference is not None and (reference_tokenizer is None or same_tokenizer(tokenizer, reference_tokenizer)):
        reference_context = contextlib.nullcontext(reference)
    elif reference is None and is_peft_model(model):
        reference_context = model.disable_adapter()
    else:
        reference_context = None
    if reference_context is not None:
        with reference_context:
            scores = scores - canary_logps(model if reference is None else reference, tokenizer, plan,
                                           batch_size=batch_size)
    guarantee = accountant_guarantee(log_history)
    canary_guarantee = group_privacy(*guarantee, plan.copies) if guarantee else None
    audit = audit_one_run(scores, plan.included(), delta=canary_guarantee[1] if canary_guarantee else 0.0)
    return {
        **audit.to_dict(),
        "score": "reference ratio (secret log-likelihood, target − reference)" if reference_context is not None
                 else "secret log-likelihood (loss)",
        "copies": plan.copies,
        "accountant_epsilon": canary_guarantee[0] if canary_guarantee else None,
        "accountant_delta": canary_guarantee[1] if canary_guarantee else None,
        "accountant_epsilon_per_sequence": guarantee[0] if guarantee else None,
    }
