"""The one-run ε audit of a trained model: score every canary, inserted or control, and bound ε two ways.

Steinke et al.'s (ε, δ) bound (privft.epsilon_audit) and Mahloujifar et al.'s Gaussian-DP bound
(privft.fdp_audit) read the same guesses; each comes with its ceiling, and `one_run_warnings`
names what keeps a run from showing more.

The guarantee the bound is set beside is the one a canary has: a canary inserted `copies` times
fills that many training sequences, so under DP-LoRA it is protected at group level
(`privft.dp.group_privacy`), and the audit tests that (ε, δ). DP-LoRA's white-box gradient
canaries (`privft.dp.gradient_canaries`) are read the same way (`gradient_canary_epsilon_audit`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.audit import is_peft_model, same_tokenizer
from privft.callbacks.canary import canary_logps
from privft.data.canaries import CanaryPlan
from privft.dp import DPLoraEngine, group_privacy
from privft.dp.gradient_canaries import SCORE as GRADIENT_SCORE
from privft.epsilon_audit import audit_one_run
from privft.fdp_audit import audit_one_run_fdp

MIN_USEFUL_CEILING = 1.0  # a Steinke ceiling below this: even a perfect attack could show little


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
    score = ("reference ratio (secret log-likelihood, target − reference)" if reference_context is not None
             else "secret log-likelihood (loss)")
    return one_run_entry(scores, plan.included(), accountant_guarantee(log_history), copies=plan.copies, score=score)


def gradient_canary_epsilon_audit(engine: DPLoraEngine) -> dict[str, Any]:
    """The white-box one-run ε bound of a DP-LoRA run from its gradient canaries (`dp.gradient_canaries`).

    Each canary is one Poisson-sampled "sequence" of one copy, so the bound faces the accountant's
    per-sequence (ε, δ).
    """
    if engine.canaries is None or engine.canaries.included is None:
        raise ValueError("This DP-LoRA run has no gradient canaries to audit: set dp.gradient_canaries (e.g. 1000) "
                         "and train at least one step.")
    return one_run_entry(engine.canaries.scores, engine.canaries.included,
                         (engine.epsilon(), engine.calibration.delta), copies=1, score=GRADIENT_SCORE)


def one_run_entry(scores: ArrayLike, included: ArrayLike, guarantee: tuple[float, float] | None, *, copies: int,
                  score: str) -> dict[str, Any]:
    """Both one-run bounds of these scores, beside the accountant's per-sequence `guarantee` (group level `copies`).

    The entry keeps each canary's score and inclusion bit, so anyone can recompute both bounds from it.
    """
    canary_guarantee = group_privacy(*guarantee, copies) if guarantee else None
    delta = canary_guarantee[1] if canary_guarantee else 0.0
    entry = {
        **audit_one_run(scores, included, delta=delta).to_dict(),
        "score": score,
        "copies": copies,
        "accountant_epsilon": canary_guarantee[0] if canary_guarantee else None,
        "accountant_delta": canary_guarantee[1] if canary_guarantee else None,
        "accountant_epsilon_per_sequence": guarantee[0] if guarantee else None,
        "fdp": audit_one_run_fdp(scores, included, delta=delta).to_dict(),
        "scores": np.asarray(scores, dtype=float).tolist(),
        "included": np.asarray(included, dtype=bool).tolist(),
    }
    return {**entry, "warnings": one_run_warnings(entry)}


def one_run_warnings(entry: Mapping[str, Any]) -> list[str]:
    """What limits how a one-run audit reads: copies > 1, too few canaries, a ceiling below the accountant's ε."""
    e, fdp = entry, entry["fdp"]
    ceilings = f"ε ≥ {e['ceiling']:.2f} (Steinke) and ε ≥ {fdp['ceiling']:.2f} (f-DP)"
    found = []
    if e["copies"] > 1:
        vacuous = (f" Its δ = {e['delta']:.3g} makes Steinke's δ term 2·m·δ ≥ 1: little or nothing left to show."
                   if 2 * e["n_canaries"] * e["delta"] >= 1 else "")
        found.append(f"One-run audit with {e['copies']} copies per canary: the protocol wants 1. Each canary fills "
                     f"{e['copies']} training sequences, so the bound measures a repeated text, and under DP it tests "
                     f"the group guarantee, not the per-sequence ε.{vacuous} Ceilings: {ceilings}. Set "
                     "canaries.copies: 1.")
    if e["ceiling"] < MIN_USEFUL_CEILING:
        found.append(f"{e['n_canaries']} canaries are too few for a bound that says much: every guess right would "
                     f"show at most {ceilings}. Use hundreds (docs/epsilon-audit.md).")
    if e["accountant_epsilon"] is not None and fdp["ceiling"] <= e["accountant_epsilon"]:
        found.append(f"These {e['n_canaries']} canaries cannot refute the accountant's ε = "
                     f"{e['accountant_epsilon']:.3g}: every guess right would show at most {ceilings}. More canaries "
                     "raise the ceiling (docs/epsilon-audit.md).")
    return found
