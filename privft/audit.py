"""Run one membership-inference audit: score once per (text, model), then every attack and metric."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.attacks import ATTACKS, AttackInputs, attack_names, blind_baseline_scores, get_attack
from privft.attacks.ensemble import ensemble_components
from privft.audit_context import AuditContext
from privft.config import require
from privft.data import MembershipSplit
from privft.data.records import Record, map_turns, record_content
from privft.data.split import text_sha256
from privft.dataset_inference import check_set_sizes, dataset_inference_from_scores
from privft.extraction import ExtractionSettings, run_extraction
from privft.metrics import (
    DEFAULT_MAX_FPRS,
    PERPLEXITY_CONVENTION,
    AttackMetrics,
    evaluate_attack,
    paired_perplexity_ratio,
    perplexity,
    perplexity_interval,
)
from privft.ranks import is_main_rank
from privft.report import AuditReport, BasePerplexity, PerplexityResult
from privft.scoring import StatsCache, TokenStats, score_texts, single_token_warning, start_token_record
from privft.scoring.render import SCORED, RecordRendering, record_rendering, rendering_context, scored_texts
from privft.task_accuracy import TaskSettings, measure_task_accuracy


@dataclass
class AuditConfig:
    """Settings of an audit; `attacks=None` runs the default attacks the inputs allow (the token-level ones, plus
    ReCaLL, CON-ReCaLL and the neighbourhood attack when the audit is given their context)."""

    attacks: tuple[str, ...] | None = None
    max_fprs: tuple[float, ...] = DEFAULT_MAX_FPRS
    n_bootstrap: int = 1000
    seed: int = 0
    batch_size: int = 8
    max_length: int | None = None
    stride: int | None = None
    min_k_fraction: float = 0.2
    cache_dir: str | None = None
    ensemble_fit_fraction: float = 0.3  # share of the split whose labels the Ensemble attacker holds and fits on
    extraction: ExtractionSettings | None = None  # None: no extraction audit; ExtractionSettings() for the defaults
    dataset_inference: bool = False  # Maini et al.'s set-level test of the members against the non-members
    # Conversational records: which tokens the attacks score (privft.scoring.render.SCORED): "completion" (the
    # trained tokens), "prompt" (the untrained rest: were these customers' prompts trained on?) or "all".
    scored: str = "completion"
    task: TaskSettings | None = None  # task accuracy on held-out tickets-chat records; None: off, TaskSettings(): on

    def __post_init__(self) -> None:
        """Refuse settings the audit would only trip over after training and scoring."""
        for name in self.attacks or ():
            get_attack(name)  # an unknown name fails here, before any forward pass
        require(bool(self.max_fprs) and all(0 < f <= 1 for f in self.max_fprs), "max_fprs", self.max_fprs,
                "must hold at least one FPR ceiling, each in (0, 1], e.g. (0.01, 0.001).")
        for name, least in (("n_bootstrap", 1), ("batch_size", 1), ("max_length", 2), ("stride", 1), ("seed", 0)):
            value = getattr(self, name)
            require(value is None or value >= least, name, value, f"must be at least {least}.")
        require(0 < self.min_k_fraction <= 1, "min_k_fraction", self.min_k_fraction, "must be in (0, 1].")
        require(self.scored in SCORED, "scored", self.scored, f"must be one of {SCORED}.")
        require(0 < self.ensemble_fit_fraction < 1, "ensemble_fit_fraction", self.ensemble_fit_fraction,
                "must be in (0, 1): the ensemble is fitted on that share and scored on the rest.")
        if self.extraction is not None and self.max_length is not None:  # within one window, every context is whole
            require(self.max_length > self.extraction.longest_read, "max_length", self.max_length,
                    f"must exceed the {self.extraction.longest_read} tokens extraction reads (BOS + prefix + "
                    "suffix in one window); raise it or shorten extraction.prefix_lengths or suffix_length.")


def ensemble_known_labels(y_true: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """The labels the Ensemble attacker holds: a stratified random `fraction` of each class, -1 elsewhere."""
    rng = np.random.default_rng(seed)
    known = np.full(len(y_true), -1)
    for label in (0, 1):
        members_of_class = np.flatnonzero(y_true == label)
        chosen = rng.choice(members_of_class, size=round(fraction * len(members_of_class)), replace=False)
        known[chosen] = label
    return known


def unscored_note(name: str, y_true: np.ndarray, scored: np.ndarray) -> str:
    """How many members and non-members an attack scored, when it left some texts without a finite score."""
    members, non_members = int((y_true == 1).sum()), int((y_true == 0).sum())
    return (f"{name} is measured on {int(scored[y_true == 1].sum())} of {members} members and "
            f"{int(scored[y_true == 0].sum())} of {non_members} non-members: {int((~scored).sum())} text(s) have no "
            "finite score (the Ensemble's labelled fitting share, texts without a usable neighbour, or a "
            "non-finite statistic).")


def same_tokenizer(a: PreTrainedTokenizerBase, b: PreTrainedTokenizerBase) -> bool:
    """Whether two tokenizers map text to the same ids (same vocabulary)."""
    return a is b or a.get_vocab() == b.get_vocab()


def is_peft_model(model: PreTrainedModel) -> bool:
    """Whether `model` carries peft adapters that can be switched off."""
    return hasattr(model, "disable_adapter") and hasattr(model, "peft_config")


@contextlib.contextmanager
def _as_reference(model: PreTrainedModel) -> Iterator[PreTrainedModel]:
    """The peft model with its adapters disabled: the base model, without a second copy in memory."""
    with model.disable_adapter():
        yield model


def available_statistics(has_reference: bool, context: AuditContext | None = None) -> set[str]:
    """What `run_audit` can give the attacks: the lowercased copy and the Ensemble's labels always, the rest if set."""
    reference = {"reference"} if has_reference else set()
    return {"lowercase", "known_labels", *reference, *(context.provides() if context else ())}


def default_attacks(available: set[str]) -> tuple[str, ...]:
    """The registered defaults: those without context, plus each context attack whose statistics the audit was given."""
    return attack_names(lambda attack: attack.default and (not attack.needs_context or attack.needs <= available))


def select_attacks(config: AuditConfig, available: set[str], same_tok: bool) -> tuple[list[str], list[str]]:
    """The attacks to run and notes on those skipped; explicitly requested ones must be runnable.

    `available` names the statistics that will exist ("reference", "lowercase"). Call it before
    training to fail early on an audit that cannot run.
    """
    names = list(config.attacks or default_attacks(available))
    chosen, notes = [], []
    for name in names:
        refusal = ATTACKS[name].refusal(available, same_tok)
        if refusal is None:
            chosen.append(name)
        elif config.attacks is None:
            notes.append(f"{name} skipped: {refusal[0]}.")
        else:
            reason, hint = refusal
            raise ValueError(f"Attack {name!r} cannot run: {reason}. To run it, {hint}; or drop it from the attacks.")
    return chosen, notes


def needed_statistics(names: Sequence[str]) -> set[str]:
    """The statistics the attacks `names` read; the Ensemble reads those of all its components."""
    readers = [*names, *(ensemble_components() if "ensemble" in names else ())]
    return set().union(*(ATTACKS[name].needs for name in readers))


@dataclass
class AuditReference:
    """What the reference attacks compare the target with: a model (entered as a context), its tokenizer, its name."""

    name: str | None  # as the report names it; None without a reference
    model: contextlib.AbstractContextManager[PreTrainedModel] | None
    tokenizer: PreTrainedTokenizerBase
    same_tokenizer: bool  # whether per-token ratios are defined (the ref_ratio rule)


def audit_reference(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, reference: PreTrainedModel | None,
                    reference_tokenizer: PreTrainedTokenizerBase | None) -> AuditReference:
    """The given reference, else a peft target with its adapters disabled, else none."""
    reference_tokenizer = reference_tokenizer or tokenizer
    same = same_tokenizer(tokenizer, reference_tokenizer)
    if reference is not None:
        return AuditReference(getattr(reference, "name_or_path", "reference model"), contextlib.nullcontext(reference),
                              reference_tokenizer, same)
    if is_peft_model(model):
        return AuditReference("base model (adapters disabled)", _as_reference(model), reference_tokenizer, same)
    return AuditReference(None, None, reference_tokenizer, same)


@dataclass
class AuditPasses:
    """The statistics of every forward pass an audit's attacks read, one `TokenStats` per text."""

    target: list[TokenStats]  # with μ and σ (Min-K%++)
    reference: list[TokenStats] | None
    lowercase: list[TokenStats] | None
    held_out: list[TokenStats]  # perplexity: the validation texts, else the non-members
    context: dict[str, Any]  # ReCaLL, CON-ReCaLL and neighbourhood statistics (`AuditContext.statistics`)
    base_held_out: list[TokenStats] | None = None  # the held-out texts under the reference (same tokenizer only)
    test: list[TokenStats] | None = None  # the test side's trained tokens, when the split has one


def score_passes(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, split: MembershipSplit,
                 reference: AuditReference, context: AuditContext, needed: set[str], config: AuditConfig,
                 shard: bool = False) -> AuditPasses:
    """Score only the passes the attacks read, each text once per model, through one cached scorer."""
    texts, _ = split.labels_and_texts()
    cache = StatsCache(config.cache_dir) if config.cache_dir else None

    def score(m: PreTrainedModel, tok: PreTrainedTokenizerBase, items: Sequence[Record], desc: str,
              prefix: str | None = None, distribution: bool = False, trained: bool = False) -> list[TokenStats]:
        rendering = replace(record_rendering(), scored="completion") if trained else record_rendering()
        with rendering_context(rendering):  # perplexity reads the trained tokens, whatever the attacks score
            return score_texts(m, tok, items, batch_size=config.batch_size, max_length=config.max_length,
                               stride=config.stride, cache=cache, desc=desc, prefix=prefix,
                               distribution=distribution, shard=shard)

    # Without validation texts, perplexity reads the non-members' target pass, when it scored the trained tokens.
    held_out_texts = split.validation or split.non_members
    reuse = not split.validation and config.scored == "completion"
    target = score(model, tokenizer, texts, "target", distribution=True)  # the only pass Min-K%++ reads μ, σ of
    reference_stats = lowercase = base_held_out = None
    if reference.model is not None and ("reference" in needed or reference.same_tokenizer):
        with reference.model as reference_model:
            if "reference" in needed:
                reference_stats = score(reference_model, reference.tokenizer, texts, "reference")
            if reference.same_tokenizer:  # the base model's perplexity on the held-out texts, comparable per token
                base_held_out = (reference_stats[len(split.members):] if reference_stats and reuse
                                 else score(reference_model, reference.tokenizer, held_out_texts, "base perplexity",
                                            trained=True))
    if "lowercase" in needed:
        lowercase = score(model, tokenizer, [map_turns(t, str.lower) for t in texts], "lowercase")
    held_out = (target[len(split.members):] if reuse
                else score(model, tokenizer, held_out_texts, "perplexity", trained=True))
    extra = context.statistics(texts, lambda items, desc, prefix: score(model, tokenizer, items, desc, prefix), needed)
    test = score(model, tokenizer, split.test, "test perplexity", trained=True) if split.test else None
    return AuditPasses(target, reference_stats, lowercase, held_out, extra, base_held_out, test)


def held_out_perplexity(held_out: Sequence[TokenStats], on: str, config: AuditConfig) -> PerplexityResult:
    """Corpus perplexity of the held-out pass, its bootstrap interval over texts, and the per-text losses."""
    nll, tokens = [s.nll_sum for s in held_out], [s.n_tokens for s in held_out]
    low, high = perplexity_interval(nll, tokens, n_bootstrap=config.n_bootstrap, seed=config.seed)
    return PerplexityResult(value=perplexity(nll, tokens), on=on, n_texts=len(held_out), n_tokens=sum(tokens),
                            convention=PERPLEXITY_CONVENTION, ci_low=low, ci_high=high, nll_sums=nll,
                            token_counts=tokens)


def base_perplexity(passes: AuditPasses, reference: AuditReference, on: str, config: AuditConfig
                    ) -> BasePerplexity | None:
    """The reference's perplexity on the target's held-out texts, with the target's paired ratio to it."""
    if passes.base_held_out is None:
        return None
    target_nll = [s.nll_sum for s in passes.held_out]
    base = held_out_perplexity(passes.base_held_out, on, config)
    ratio = paired_perplexity_ratio(target_nll, base.nll_sums, [s.n_tokens for s in passes.held_out],
                                    n_bootstrap=config.n_bootstrap, seed=config.seed)
    return BasePerplexity(reference.name, base, ratio)


def measure(name: str, values: np.ndarray, y_true: np.ndarray, config: AuditConfig, notes: list[str]
            ) -> AttackMetrics:
    """An attack's metrics on the texts it scored; a note in `notes` says how many it left unscored."""
    scored = np.isfinite(values)
    if not scored.all():
        notes.append(unscored_note(name, y_true, scored))
    return evaluate_attack(y_true[scored], values[scored], max_fprs=config.max_fprs, n_bootstrap=config.n_bootstrap,
                           seed=config.seed)


def run_audit(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    split: MembershipSplit,
    *,
    reference: PreTrainedModel | None = None,
    reference_tokenizer: PreTrainedTokenizerBase | None = None,
    config: AuditConfig | None = None,
    model_name: str | None = None,
    context: AuditContext | None = None,
    shard: bool = False,
) -> AuditReport | None:
    """Audit `model` on the split's members vs non-members and return the report.

    Each text costs one forward pass under the target, one under the reference and one of its
    lowercased form, the latter two only when a chosen attack reads them; every attack is then a
    cheap function of those statistics. Without an explicit reference, a peft model is compared
    with itself with adapters disabled. A `context` adds ReCaLL, CON-ReCaLL and neighbourhood
    statistics through the same scorer. Attacks that leave texts unscored (NaN: the Ensemble's
    fitting part, a text without usable neighbours) are measured on the rest, with a note giving the counts.
    A split's test side is scored for its perplexity alone; `config.task` adds task accuracy on held-out
    tickets (`privft.task_accuracy`).

    The steps: the reference (`audit_reference`), the attacks the inputs allow (`select_attacks`),
    the passes they read (`score_passes`), the attack scores, and the report.

    `shard=True` (every rank calls it, under torch.distributed) shares each pass's texts across
    the ranks (`score_texts(shard=True)`); rank 0 computes the attacks and metrics from the
    gathered statistics and returns the report, equal to a single process's; the other ranks
    return None once the last pass is scored.
    """
    config = config or AuditConfig()
    rendering = replace(record_rendering(), scored=config.scored)
    with rendering_context(rendering):
        return _run_audit(model, tokenizer, split, reference, reference_tokenizer, config, model_name, context, shard,
                          rendering)


def _run_audit(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, split: MembershipSplit,
               reference: PreTrainedModel | None, reference_tokenizer: PreTrainedTokenizerBase | None,
               config: AuditConfig, model_name: str | None, context: AuditContext | None, shard: bool,
               rendering: RecordRendering) -> AuditReport | None:
    """`run_audit`'s steps, under the record rendering it set."""
    texts, y_true = split.labels_and_texts()
    ref = audit_reference(model, tokenizer, reference, reference_tokenizer)
    records = split.format != "text"
    if records and context and context.provides():
        raise ValueError("ReCaLL, CON-ReCaLL and the neighbourhood attack read texts; for "
                         f"{split.format} records leave out the audit context.")
    context = context or AuditContext()
    context.check(texts)  # before any forward pass
    if config.dataset_inference:
        check_set_sizes(len(split.members), len(split.non_members))
    names, notes = select_attacks(config, available_statistics(ref.model is not None, context), ref.same_tokenizer)
    passes = score_passes(model, tokenizer, split, ref, context, needed_statistics(names), config, shard)
    if shard and not is_main_rank():
        return None  # its share is scored and gathered; rank 0 alone computes the rest

    blind = blind_baseline_scores([record_content(t) for t in texts], y_true, seed=config.seed)
    held_out_on = "validation" if split.validation else "non-members"
    inputs = AttackInputs(scored_texts(texts, tokenizer) if records else texts, passes.target, passes.reference,
                          passes.lowercase, ref.same_tokenizer,
                          config.min_k_fraction, known_labels=ensemble_known_labels(
                              y_true, config.ensemble_fit_fraction, config.seed), **passes.context)
    scores = {name: get_attack(name)(inputs) for name in names}
    extraction = None
    if config.extraction is not None:  # probabilistic extraction reads the target pass: no forward pass of its own
        extraction = run_extraction(model, tokenizer, texts, y_true, passes.target, config.extraction,
                                    seed=config.seed, batch_size=config.batch_size)
        notes.extend(extraction.notes)
    task = (measure_task_accuracy(model, tokenizer, split, config.task, batch_size=config.batch_size)
            if config.task is not None else None)
    for warning in (split.near_duplicate_warning,  # scored as non-members, they read like members
                    single_token_warning([record_content(t) for t in texts], [s.n_tokens for s in passes.target])):
        if warning:
            notes.append(warning)

    return AuditReport(
        model=model_name or str(getattr(model, "name_or_path", type(model).__name__)),
        reference=ref.name,
        config=asdict(config),
        split={"source": split.source, "seed": split.seed, "n_members": len(split.members),
               "n_non_members": len(split.non_members), "n_validation": len(split.validation),
               **({"n_test": len(split.test)} if split.test else {}),
               **({"format": split.format, "scored": config.scored, "unit": rendering.describe(split.members)}
                  if records else {})},
        blind_baseline=measure("blind baseline", blind, y_true, config, notes),
        attacks={name: measure(name, values, y_true, config, notes) for name, values in scores.items()},
        perplexity=held_out_perplexity(passes.held_out, held_out_on, config),
        base_perplexity=base_perplexity(passes, ref, held_out_on, config),
        test_perplexity=held_out_perplexity(passes.test, "test", config) if passes.test else None,
        task_accuracy=task,
        scores={"blind_baseline": blind, **scores},
        labels=y_true,
        text_sha256=[text_sha256(t) for t in texts],
        notes=notes,
        start_token=start_token_record(tokenizer),
        extraction=extraction,
        dataset_inference=(dataset_inference_from_scores(scores, y_true, seed=config.seed).to_dict()
                           if config.dataset_inference else None),
    )
