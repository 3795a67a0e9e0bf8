"""`privft train config.yaml`: split, plant canaries, fine-tune (with SOFT, DP-LoRA or Goldfish if set), audit, save."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, astuple, dataclass, field, replace
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase, TrainerCallback

from privft.audit import AuditConfig
from privft.callbacks.audit import PrivacyAuditCallback, fine_tuned_name, write_model_card_section
from privft.callbacks.canary import CanaryCallback
from privft.callbacks.one_run import gradient_canary_epsilon_audit
from privft.callbacks.soft import SelectiveObfuscationCallback, prepare_soft
from privft.callbacks.training_clock import TrainingClockCallback
from privft.config import SAVED_BEFORE, config_changes, describe_changes, from_dict, require, to_dict
from privft.data import MembershipSplit
from privft.data.canaries import CanaryPlan, canary_format
from privft.data.canary_designs import CANARY_DESIGNS
from privft.data.designed_canaries import designed_plan
from privft.data.pii import PII_FORMATS, PIICanaryPlan
from privft.data.records import FORMATS, Record
from privft.data.sources import load_source
from privft.defend.evidence import finding_for
from privft.defend.goldfish import DropCounts, GoldfishSettings, add_goldfish, drop_counts
from privft.defend.rules import check_schedule, get_rule
from privft.defend.schedule import SoftSchedule, check_loss_source
from privft.dp import DPSettings, make_private
from privft.dp.callback import STATE_FILE as DP_STATE_FILE
from privft.gate import GatePolicy, Verdict, check
from privft.io import atomic_write_text
from privft.models import DEFAULT_MODEL, hub_lookups_skipped, load_model
from privft.paraphrase import ParaphraseCache, Paraphraser, build_paraphraser, obfuscate
from privft.paraphrase.obfuscate import FAILED_REWRITES, MODES, ObfuscationResult
from privft.paraphrase.registry import PARAPHRASERS, get_paraphraser
from privft.progress import library_bars
from privft.report import AuditReport, package_versions
from privft.run_folder import check_same_data
from privft.scoring import check_start_rule, start_token_record, start_token_rule
from privft.scoring.render import RecordRendering, record_rendering, rendering_context
from privft.training import FinetuneSettings, build_trainer, last_complete_checkpoint, tokenize_for_training
from privft.training_record import DPRecord, GoldfishRecord, SoftRecord, TrainingRecord


@dataclass
class DataSettings:
    """Where the texts come from and how they are split (a built-in corpus, or a file with `path`)."""

    corpus: str | None = "wiki"
    corpus_options: dict[str, Any] = field(default_factory=dict)  # the corpus's own, e.g. tickets: {seed: 1}
    path: str | None = None
    text_column: str = "text"
    max_words: int | None = 60  # keep texts short enough to train on whole; None keeps all
    n_members: int = 200
    n_non_members: int = 200
    n_validation: int = 50
    # Texts held out of everything but the final utility measurement (test perplexity, task accuracy): not trained
    # on, not audited, not read by SOFT's threshold or tuning. 0 draws the split as before the setting existed.
    n_test: int = 0
    seed: int = 0
    # The records' format (privft.data.records.FORMATS: text, prompt_completion, messages); auto detects it.
    format: str = "auto"
    # Conversational records: train on the assistant turns only (trl's SFTConfig.assistant_only_loss; the chat
    # template needs {% generation %} markers). Prompt–completion records train on the completion either way.
    assistant_only_loss: bool = False

    def __post_init__(self) -> None:
        """Refuse an unknown record format now, before any file is read."""
        require(self.format in ("auto", *FORMATS), "format", self.format, f"must be one of {('auto', *FORMATS)}.")

    def split_changes(self, other: DataSettings) -> dict[str, tuple[Any, Any]]:
        """The settings by which `other` draws another split than these (every one but assistant_only_loss)."""
        return {key: change for key, change in config_changes(self, other).items() if key != "assistant_only_loss"}


@dataclass
class CanarySettings:
    """Canaries planted in the training data (none when n_canaries is 0); `CanaryPlan`'s settings and defaults."""

    n_canaries: int = 0
    copies: int = CanaryPlan.copies  # the plan's own defaults: one definition of each
    template: str = CanaryPlan.template
    alphabet: str = CanaryPlan.alphabet
    secret_length: int = CanaryPlan.secret_length
    n_alternatives: int = CanaryPlan.n_alternatives
    one_run: bool = CanaryPlan.one_run  # insert each canary with probability ½ (the rest are controls): one-run ε
    # Conversational records: the canary's secret in the reply ("completion"), or in the user turn ("prompt").
    secret_in: str = CanaryPlan.secret_in
    # A kind of personal data (privft.data.pii.PII_FORMATS: name, email, phone, card, account) for realistic secrets
    # instead of digits; the digit template above then gives way to the kind's own, and alphabet/secret_length go.
    kind: str | None = None
    # How the secrets are drawn (privft.data.canary_designs.CANARY_DESIGNS): "random" is the digits above; "rare",
    # "new", "unigram" and "bigram" (Panda et al. 2025) draw secret_length tokens from the tokenizer and the training
    # records, once the model is loaded.
    design: str = "random"

    def __post_init__(self) -> None:
        """Refuse an unknown PII kind or design now, before a split or a manifest is written."""
        require(self.kind is None or self.kind in PII_FORMATS, "kind", self.kind,
                f"must be one of {sorted(PII_FORMATS)}, or null for digit secrets.")
        digits = (self.alphabet, self.secret_length) == (CanarySettings.alphabet, CanarySettings.secret_length)
        require(self.kind is None or digits, "kind", self.kind, "is set, so the format decides the secrets: leave "
                "alphabet and secret_length at their defaults (they apply to digit secrets only).")
        require(self.design in CANARY_DESIGNS, "design", self.design,
                f"is not a registered canary design; the registered ones are {sorted(CANARY_DESIGNS)}.")
        require(self.design == "random" or (self.kind is None and self.alphabet == CanarySettings.alphabet),
                "design", self.design, "draws the secrets itself: leave kind null and alphabet at its default, or "
                "set design: random.")


@dataclass
class SoftSettings:
    """Selective obfuscation (SOFT); off when `rule` is None. The schedule's settings and defaults are
    `privft.defend.schedule.SoftSchedule`'s (`schedule()`); the rest say how the samples are rewritten."""

    rule: str | None = None  # a registered rule: "paper", "release", or the controls "all" and "all-after-warmup"
    select_ratio: float | None = SoftSchedule.select_ratio
    warmup_epochs: int | None = SoftSchedule.warmup_epochs
    cumulative: bool = SoftSchedule.cumulative
    loss_source: str = SoftSchedule.loss_source
    paraphraser: str = "neighbour"
    paraphraser_model: str | None = None  # default: the run's base model
    # The defaults follow the SOFT study (docs/results/soft-study.md): the paper rule with eval-mode losses, every
    # eligible word of the second half swapped and that rewritten half trained on alone. It ties on protection per
    # unit of perplexity with the training-pass source (which protects less) and the LLM rewrite (which costs
    # seconds per text). `fraction` is the word-swap paraphrasers' option; give {} for "llm".
    paraphraser_options: dict[str, Any] = field(default_factory=lambda: {"fraction": 1.0})
    prefix_keep_ratio: float = 0.5
    mode: str = "rewrite-only"  # as the released code trained; or "prefix+rewrite" (the kept half leaks)
    # A text whose every rewrite the similarity filter rejected: "serve" its last changed candidate (often word salad),
    # or "skip" it (serve the original; counted, and warned about, when selected).
    failed_rewrites: str = FAILED_REWRITES[0]

    def __post_init__(self) -> None:
        """Check the settings now, not after every training text has been paraphrased."""
        try:
            if self.rule is None:  # SOFT off: the values alone
                check_schedule(None, self.select_ratio, self.warmup_epochs)
                check_loss_source(self.loss_source)
            else:
                self.schedule()
        except ValueError as error:  # the same checks as the callback's, named as config keys
            raise ValueError(f"soft.{error}") from None
        if self.paraphraser not in PARAPHRASERS:
            raise ValueError(f"soft.paraphraser={self.paraphraser!r} is not one of {sorted(PARAPHRASERS)}.")
        if self.mode not in MODES:
            raise ValueError(f"soft.mode={self.mode!r} is not one of {MODES}.")
        if self.failed_rewrites not in FAILED_REWRITES:
            raise ValueError(f"soft.failed_rewrites={self.failed_rewrites!r} is not one of {FAILED_REWRITES}.")
        if not 0 <= self.prefix_keep_ratio < 1:
            raise ValueError(f"soft.prefix_keep_ratio={self.prefix_keep_ratio} must be in [0, 1).")
        self.warn_measured("text", stacklevel=3)

    def warn_measured(self, records: str, stacklevel: int = 2) -> None:
        """Warn if privft measured this configuration on `records` ("text" or "conversations") as a poor choice."""
        finding = finding_for(self.rule, self.mode, self.paraphraser, self.paraphraser_options, self.prefix_keep_ratio,
                              records)
        if finding is not None:
            warnings.warn(f"soft: this SOFT configuration was measured on {records}: it {finding.verdict}; see "
                          f"{finding.source}.", stacklevel=stacklevel)

    def schedule(self) -> SoftSchedule:
        """The selection schedule these settings give (SOFT must be on: `rule` set)."""
        return SoftSchedule(rule=self.rule, select_ratio=self.select_ratio, warmup_epochs=self.warmup_epochs,
                            cumulative=self.cumulative, loss_source=self.loss_source)


@dataclass
class RunConfig:
    """One training run: model, data, training (LoRA rank, alpha, targets; `lora: null` for full), defences, audit."""

    model: str = DEFAULT_MODEL
    data: DataSettings = field(default_factory=DataSettings)
    training: FinetuneSettings = field(default_factory=FinetuneSettings)
    canaries: CanarySettings = field(default_factory=CanarySettings)
    soft: SoftSettings = field(default_factory=SoftSettings)
    audit: AuditConfig = field(default_factory=AuditConfig)
    audit_every_n_epochs: int | None = None
    dp: DPSettings = field(default_factory=DPSettings)
    goldfish: GoldfishSettings = field(default_factory=GoldfishSettings)  # Goldfish loss, off unless goldfish.k
    gate: GatePolicy | None = None  # release criteria checked at the end of the run ({} for the default policy)
    # The token every text starts from, in training and scoring (privft.scoring.start_token_rule): "auto" (the
    # tokenizer's own prepended token, else <|endoftext|>, else EOS), "bos-else-eos" (runs saved before this setting
    # existed used it), or a token's string.
    start_token: str = field(default="auto", metadata={SAVED_BEFORE: "bos-else-eos"})

    def __post_init__(self) -> None:
        check_start_rule(self.start_token)
        if self.dp.target_epsilon is not None and self.training.lora is None:
            raise ValueError("dp.target_epsilon is set but training.lora is null: DP-LoRA trains LoRA adapters only; "
                             "set training.lora or drop dp.target_epsilon.")
        if self.dp.target_epsilon is not None and self.soft.rule is not None:
            raise ValueError("dp.target_epsilon and soft.rule are both set: SOFT selects samples by their loss "
                             "outside DP-SGD, which the DP guarantee does not cover; use one of the two.")
        # Goldfish loss with DP-LoRA is allowed: a sequence's mask depends on its own ids alone, so its clipped
        # gradient still depends on that sequence only and the accountant's ε holds (`add_goldfish`).
        most_sequences = self.data.n_members + self.canaries.n_canaries * self.canaries.copies
        if self.dp.target_epsilon is not None and self.training.batch_size >= most_sequences:
            raise ValueError(f"training.batch_size={self.training.batch_size} must be below the number of training "
                             f"sequences (at most {most_sequences}: data.n_members plus canary copies) for DP-LoRA's "
                             "Poisson sampling.")
        if self.audit_every_n_epochs is not None and self.audit_every_n_epochs < 1:
            raise ValueError(f"audit_every_n_epochs={self.audit_every_n_epochs} must be a positive integer, or null "
                             "for the final audit only.")
        if self.audit.task is not None and not (self.data.n_test or self.data.n_validation):
            raise ValueError("audit.task is set but data.n_test and data.n_validation are 0: task accuracy reads "
                             "held-out tickets never trained on; set data.n_test (or data.n_validation), or drop "
                             "audit.task.")
        unaudited = sorted(ceiling for ceiling in (self.gate.max_tpr_at_fpr if self.gate else {})
                           if not any(math.isclose(ceiling, fpr) for fpr in self.audit.max_fprs))
        if unaudited:  # the gate matches ceilings as it does here; refused now, not as "cannot judge" after training
            raise ValueError(f"gate.max_tpr_at_fpr limits FPR ceiling(s) {unaudited} that audit.max_fprs = "
                             f"{list(self.audit.max_fprs)} does not measure; add them to audit.max_fprs, or drop them "
                             "from gate.max_tpr_at_fpr.")


@dataclass
class RunResult:
    """What a run produced: the final audit (with canary exposure), the SOFT selections, the training time."""

    report: AuditReport | None  # None for a tuning run (`train_epochs`), which is not audited
    output_dir: Path
    train_seconds: float  # trainer.train() without the audits run inside it
    soft_history: list[dict] = field(default_factory=list)
    privacy: dict | None = None  # DP-LoRA's guarantee and settings (privft.dp.DPLoraEngine.summary), if private
    verdict: Verdict | None = None  # the release gate's, when the config has a `gate` policy
    train_cpu_seconds: float | None = None  # the process's CPU seconds over the same span (TrainingClockCallback)
    resumed_from: str | None = None  # the checkpoint a resumed run restarted from; its times include those before it
    times_partial: bool = False  # resumed from a checkpoint that kept no training clock: both times count after it


def training_record(config: RunConfig, n_texts: int, soft: SelectiveObfuscationCallback | None,
                    privacy: dict | None, goldfish_drops: DropCounts | None = None) -> TrainingRecord:
    """How this run trained and defended its model, for the report and the model card."""
    lora, settings = config.training.lora, config.soft
    soft_record = None
    if soft is not None:
        last = soft.history[-1] if soft.history else {}
        soft_record = SoftRecord(
            rule=settings.rule, paraphraser=settings.paraphraser,
            paraphraser_model=soft_paraphraser_model(config),
            paraphraser_options=dict(settings.paraphraser_options), mode=settings.mode,
            prefix_keep_ratio=settings.prefix_keep_ratio, n_samples=n_texts, n_selected=last.get("n_selected", 0),
            n_served_obfuscated=last.get("n_served_changed", 0), n_selections=len(soft.history),
            failed_rewrites=settings.failed_rewrites, n_served_failed=last.get("n_served_failed_rewrites", 0),
            n_skipped_failed=last.get("n_skipped_failed_rewrites", 0))
    canaries, drops = config.canaries, asdict(goldfish_drops) if goldfish_drops else {}
    planted = (f"{canaries.n_canaries} canaries × {canaries.copies} copies"
               + (f" ({canaries.design} design)" if canaries.design != "random" else "")
               + (", each inserted with probability ½ (one-run ε audit)" if canaries.one_run else ""))
    return TrainingRecord(
        method="DP-LoRA" if privacy else "LoRA" if lora else "full fine-tuning", epochs=config.training.epochs,
        n_training_texts=n_texts, lora_rank=lora.rank if lora else None, lora_alpha=lora.alpha if lora else None,
        lora_targets=tuple(lora.targets) if lora else None, soft=soft_record,
        dp=DPRecord.from_summary(privacy) if privacy else None,
        goldfish=GoldfishRecord(config.goldfish.k, config.goldfish.h, **drops) if config.goldfish.on else None,
        canaries=planted if canaries.n_canaries else None)


def load_split(settings: DataSettings) -> MembershipSplit:
    """The seeded membership split of the configured texts."""
    texts, source = load_source(corpus=settings.corpus, path=settings.path, text_column=settings.text_column,
                                max_words=settings.max_words, corpus_options=settings.corpus_options,
                                format=settings.format)
    return MembershipSplit.random(texts, n_members=settings.n_members, n_non_members=settings.n_non_members,
                                  n_validation=settings.n_validation, n_test=settings.n_test, seed=settings.seed,
                                  source=source)


def canary_plan(settings: CanarySettings, seed: int, format: str = "text", *,
                tokenizer: PreTrainedTokenizerBase | None = None,
                training: Sequence[Record] = ()) -> CanaryPlan | None:
    """The configured canaries (secrets drawn with the data seed), records of `format`; None when none are planted.

    A design other than "random" draws from `tokenizer` and the `training` records the canaries join.
    """
    if settings.n_canaries == 0:
        return None
    if settings.design != "random":
        if tokenizer is None:
            raise ValueError(f"canaries.design={settings.design!r} draws its secrets from the tokenizer and the "
                             "training records: pass tokenizer= and training= to canary_plan.")
        return designed_plan(settings.design, tokenizer, training, secret_length=settings.secret_length,
                             template=settings.template, n_canaries=settings.n_canaries, copies=settings.copies,
                             n_alternatives=settings.n_alternatives, seed=seed, one_run=settings.one_run,
                             format=format, secret_in=settings.secret_in)
    if settings.kind is not None:
        template = "" if settings.template == CanarySettings.template else settings.template  # "": the kind's own
        return PIICanaryPlan(template=template, kind=settings.kind, n_canaries=settings.n_canaries,
                             copies=settings.copies, n_alternatives=settings.n_alternatives, seed=seed,
                             one_run=settings.one_run, format=format, secret_in=settings.secret_in)
    return CanaryPlan(template=settings.template, alphabet=settings.alphabet, secret_length=settings.secret_length,
                      n_canaries=settings.n_canaries, copies=settings.copies,
                      n_alternatives=settings.n_alternatives, seed=seed, one_run=settings.one_run, format=format,
                      secret_in=settings.secret_in)


def soft_paraphraser_model(config: RunConfig) -> str | None:
    """The model the run's SOFT paraphraser rewrites with (the run's own unless set); None if it needs no model."""
    if not get_paraphraser(config.soft.paraphraser).needs_model:
        return None
    return config.soft.paraphraser_model or config.model


def soft_paraphraser(config: RunConfig, **overrides: Any) -> Paraphraser:
    """The run's SOFT paraphraser (`overrides` replace some of its options), on the run's model unless set."""
    soft = config.soft
    model = soft_paraphraser_model(config)
    options = {"model": model} if model is not None else {}
    return build_paraphraser(soft.paraphraser, **options, **{**soft.paraphraser_options, **overrides})


def _obfuscations(config: RunConfig, texts: list[Record], out: Path) -> list[ObfuscationResult]:
    """Local paraphrases of the training texts, cached by content hash under the user's cache."""
    soft = config.soft
    if texts and not isinstance(texts[0], str):
        soft.warn_measured("conversations")
    paraphraser = soft_paraphraser(config)
    results = obfuscate(texts, paraphraser, prefix_keep_ratio=soft.prefix_keep_ratio, mode=soft.mode,
                        cache=ParaphraseCache.default(), seed=config.data.seed,
                        failed_rewrites=soft.failed_rewrites)
    atomic_write_text(out / "obfuscations.json", json.dumps(
        [{"original": r.original, "text": r.text, "fallback": r.fallback, "reason": r.reason} for r in results],
        ensure_ascii=False, indent=1))
    return results


def check_canary_room(config: RunConfig) -> None:
    """Refuse, before any model loads, a run whose canary texts would outnumber its `data.n_members` members."""
    settings = config.canaries
    if settings.n_canaries:
        plan = CanaryPlan(n_canaries=settings.n_canaries, copies=settings.copies, seed=config.data.seed,
                          one_run=settings.one_run)
        plan.check_room(config.data.n_members, "Lower canaries.n_canaries or canaries.copies, or raise "
                                               "data.n_members.")


def check_output_dir(out: Path, config: RunConfig) -> None:
    """Refuse a folder holding another run, whose model and reports would end up beside this run's split.

    The same config (read with today's defaults for fields added since) may re-run in place.
    """
    manifest = out / "manifest.json"
    if not manifest.exists():
        return
    try:
        previous = from_dict(RunConfig, json.loads(manifest.read_text(encoding="utf-8"))["config"], saved=True)
    except (ValueError, KeyError, TypeError) as error:  # unreadable, or from a config this version no longer knows
        raise ValueError(f"{out} holds another run ({manifest} records a config this version cannot read: {error}); "
                         "set another training.output_dir for this run (that run stays as it is).") from None
    if previous != config:
        raise ValueError(f"{out} holds another run: {manifest} records other settings "
                         f"({describe_changes(config_changes(previous, config))}); restore them to resume or re-run "
                         "that run, or set another training.output_dir for this run (that run stays as it is).")


def run_training(config: RunConfig, *, split: MembershipSplit | None = None,
                 extra_callbacks: Sequence[TrainerCallback] = (), resume_from: str | None = None) -> RunResult:
    """Run the configured fine-tune with its callbacks and return the final audit.

    A given `split` replaces the one drawn from `config.data`; `extra_callbacks` run after
    privft's own (so at the end of training they see the final audit's cached statistics).
    Every text starts from the token `config.start_token` chooses. `resume_from` continues from that
    checkpoint (a tuned cell's chosen epoch, `privft.tune`: with `training.epochs` at that epoch, no step is left).
    """
    with start_token_rule(config.start_token), rendering_context(record_rendering_of(config)):
        return _train_and_audit(config, split, extra_callbacks, resume_from)


def train_epochs(config: RunConfig, *, resume_from: str | None = None,
                 extra_callbacks: Sequence[TrainerCallback] = ()) -> RunResult:
    """`run_training` without its audit: the Trainer evaluates the validation texts after every epoch and keeps each
    epoch's checkpoint, which `privft.tune` chooses from. The result has no report (None)."""
    with start_token_rule(config.start_token), rendering_context(record_rendering_of(config)):
        return _train_and_audit(config, None, extra_callbacks, resume_from, audit=False)


def record_rendering_of(config: RunConfig) -> RecordRendering:
    """How the run renders conversational records: its max_length (trl's default if unset), loss mask, scored tokens."""
    return RecordRendering(**({"max_length": config.training.max_length} if config.training.max_length else {}),
                           assistant_only_loss=config.data.assistant_only_loss, scored=config.audit.scored)


def _train_and_audit(config: RunConfig, split: MembershipSplit | None, extra_callbacks: Sequence[TrainerCallback],
                     resume_from: str | None = None, audit: bool = True) -> RunResult:
    """`run_training`'s steps, under the run's start-token rule."""
    out = Path(config.training.output_dir)
    check_output_dir(out, config)
    split = split or load_split(config.data)
    check_same_data(out, split)
    model, tokenizer = load_model(config.model)  # before anything is written: a bad model name changes no file
    plan = canary_plan(config.canaries, config.data.seed, canary_format(split.members), tokenizer=tokenizer,
                       training=split.members)
    train_texts = list(split.members)
    if plan is not None:
        plan.check_absent(split.non_members, split.validation, split.test)
        train_texts = plan.insert(train_texts)
    split.save(out / "split.json")
    atomic_write_text(out / "manifest.json", json.dumps({
        "config": to_dict(config), "versions": package_versions(), "split": "split.json",
        "start_token": start_token_record(tokenizer),
        "canaries": plan.to_dict() if plan else None,
        "canaries_included": list(plan.included()) if plan else None}, indent=1))

    callbacks: list[TrainerCallback] = []
    canary_callback = CanaryCallback(plan, tokenizer) if plan else None
    soft_callback = None
    if config.soft.rule is not None:
        obfuscations = _obfuscations(config, train_texts, out)
        dataset, soft_callback = prepare_soft(
            tokenizer, train_texts, [r.text for r in obfuscations],
            split.validation if get_rule(config.soft.rule).needs_validation else None,
            schedule=config.soft.schedule(), max_length=config.training.max_length, batch_size=config.audit.batch_size,
            score_max_length=config.audit.max_length, rewrite_failed=[r.failed_filter for r in obfuscations],
            rendering=record_rendering())
        callbacks.append(soft_callback)
    else:
        dataset = tokenize_for_training(tokenizer, train_texts, config.training.max_length)
    if canary_callback:
        callbacks.append(canary_callback)  # before the audit, which reads its exposure
    # Full fine-tuning has no adapters to switch off: audit it against a fresh copy of the base model, as
    # LoRA runs are audited against their base with adapters disabled, so both get the same attacks.
    reference = load_model(config.model)[0] if config.training.lora is None and audit else None
    audit_callback = PrivacyAuditCallback(split, tokenizer, reference=reference, config=config.audit,
                                          canary_callback=canary_callback, every_n_epochs=config.audit_every_n_epochs,
                                          output_dir=str(out), model_name=fine_tuned_name(out / "model", config.model),
                                          rendering=record_rendering())
    if audit:
        callbacks.append(audit_callback)
    private = config.dp.target_epsilon is not None
    checkpoint = resume_from or (last_complete_checkpoint(out, required=(DP_STATE_FILE,) if private else ())
                                 if config.training.save_steps else None)
    timer = TrainingClockCallback(exclude=audit_callback.clock, resumed_from=checkpoint)  # kept in each checkpoint
    callbacks += [timer, *extra_callbacks]

    validation = None if audit else tokenize_for_training(tokenizer, split.validation, config.training.max_length)
    trainer = build_trainer(model, tokenizer, dataset, config.training, callbacks,
                            max_grad_norm=0.0 if private else 1.0, eval_dataset=validation)  # DP clips per sequence
    goldfish_drops = None
    if config.goldfish.on:  # wraps the collator, so DP-LoRA's Poisson batches are masked too
        goldfish_drops = drop_counts(dataset, config.goldfish)  # the training set as written, before any SOFT swap
        add_goldfish(trainer, config.goldfish)
    if private:
        make_private(trainer, config.dp)
    times_partial = timer.times_partial
    if checkpoint:  # a given one, or with training.save_steps an interrupted run's last save: it continues there
        warnings.warn(f"Resuming the run in {out} from {checkpoint}; " + (
            "it kept no training clock (an older privft's, or a save cut short), so its training time counts this "
            "part only." if times_partial else
            f"its training time adds the {timer.carried.seconds:.0f} s spent up to it."), stacklevel=2)
    trainer.train(resume_from_checkpoint=checkpoint)
    train_seconds, train_cpu_seconds = astuple(timer.elapsed())
    if not audit:  # a tuning run: its epochs' checkpoints and validation losses are its result
        return RunResult(None, out, train_seconds, train_cpu_seconds=train_cpu_seconds, resumed_from=checkpoint,
                         times_partial=times_partial)
    if soft_callback:  # after a resume the Trainer holds a SOFT callback rebuilt from the checkpoint
        soft_callback = next(cb for cb in trainer.callback_handler.callbacks
                             if isinstance(cb, SelectiveObfuscationCallback))
    privacy = trainer.dp.summary() if private else None
    if privacy:
        atomic_write_text(out / "dp.json", json.dumps(privacy, indent=1))
    if soft_callback:
        atomic_write_text(out / "soft_selections.json", json.dumps(soft_callback.history, indent=1))
    with hub_lookups_skipped(config.model), library_bars():  # a full model's save draws a bar
        trainer.save_model(str(out / "model"))
    tokenizer.save_pretrained(str(out / "model"))
    report = audit_callback.report
    if config.dp.gradient_canaries:  # the white-box audit, beside the canaries' black-box one
        report.gradient_epsilon_audit = gradient_canary_epsilon_audit(trainer.dp)
        atomic_write_text(out / "gradient_canaries.json", json.dumps(trainer.dp.canaries.state_dict(), indent=1))
    report.training = replace(training_record(config, len(train_texts), soft_callback, privacy, goldfish_drops),
                              train_seconds=train_seconds, train_cpu_seconds=train_cpu_seconds, resumed_from=checkpoint,
                              times_partial=times_partial)
    report.save(out)  # again, now saying how the model was trained and defended
    verdict = check(report, config.gate) if config.gate else None
    if verdict:
        atomic_write_text(out / "gate.json", json.dumps(verdict.to_dict(), indent=1, ensure_ascii=False))
    for card in (out, out / "model"):
        write_model_card_section(card, report, verdict)
    return RunResult(report, out, train_seconds, soft_callback.history if soft_callback else [], privacy, verdict,
                     train_cpu_seconds=train_cpu_seconds, resumed_from=checkpoint, times_partial=times_partial)
