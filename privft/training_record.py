"""How a model was trained and defended (fine-tuning, SOFT, DP-SGD, Goldfish loss), for the report and model card."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class SoftRecord:
    """What SOFT did in a run: its rule, paraphraser and format, and how many samples it served obfuscated."""

    rule: str
    paraphraser: str
    paraphraser_model: str | None
    paraphraser_options: dict[str, Any]
    mode: str  # "rewrite-only" or "prefix+rewrite"
    prefix_keep_ratio: float
    n_samples: int
    n_selected: int  # selected at the last selection (cumulative unless the rule says otherwise)
    n_served_obfuscated: int  # of those, served with tokens that differ from the original's (soft/n_served_changed)
    n_selections: int
    failed_rewrites: str  # SoftSettings.failed_rewrites: "serve" or "skip" a rewrite the similarity filter rejected
    n_served_failed: int  # of those served obfuscated, rewrites the filter rejected (soft/n_served_failed_rewrites)
    n_skipped_failed: int  # selected, served as written: every rewrite rejected (soft/n_skipped_failed_rewrites)

    def markdown(self) -> str:
        """One bullet line: rule, paraphraser, format, the samples served obfuscated, the failed rewrites among them."""
        options = ", ".join(f"{k} {v}" for k, v in self.paraphraser_options.items())
        paraphraser = "; ".join(filter(None, [self.paraphraser_model, options]))
        kept = (f"the first {self.prefix_keep_ratio * 100:g} % kept verbatim" if self.prefix_keep_ratio
                else "the whole text rewritten")
        last = "its one selection" if self.n_selections == 1 else f"the last of its {self.n_selections} selections"
        served = (f"{self.n_served_obfuscated} of {self.n_samples} training samples served obfuscated after {last} "
                  f"({self.n_selected} selected)" if self.n_selections
                  else f"no selection ran, so none of the {self.n_samples} training samples was served obfuscated")
        failed = (f" Of those, {self.n_served_failed} were rewrites the similarity filter rejected (served anyway: "
                  "failed_rewrites: serve)." if self.n_served_failed else "")
        if self.n_skipped_failed:
            failed += (f" {self.n_skipped_failed} selected samples were served as written, every rewrite of theirs "
                       f"rejected by the similarity filter (failed_rewrites: {self.failed_rewrites}).")
        return (f"- SOFT: {self.rule} rule; {self.paraphraser} paraphraser"
                + (f" ({paraphraser})" if paraphraser else "") + f"; {self.mode}, {kept}; {served}.{failed}")


@dataclass(frozen=True)
class DPRecord:
    """A DP-LoRA run's guarantee and the DP-SGD settings behind it (from `privft.dp.DPLoraEngine.summary`)."""

    epsilon: float  # spent, by the accountant
    delta: float
    target_epsilon: float
    noise_multiplier: float  # σ
    sample_rate: float  # q
    steps: int  # T calibrated for
    noised_steps: int  # T run
    max_grad_norm: float  # C
    accountant: str
    privacy_unit: str
    max_multiplicity: int | None = None  # most copies of one training sequence
    group_epsilon: float | None = None  # the guarantee of a text present max_multiplicity times
    group_delta: float | None = None
    n_examples: int | None = None  # N, the training sequences: δ must be below 1/N to mean anything
    gradient_canaries: int | None = None  # white-box Dirac canaries added to the noised sums (dp.gradient_canaries)

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> DPRecord:
        """The record of an engine's `summary()` (the contents of `dp.json`)."""
        return cls(**{name: summary.get(name) for name in cls.__dataclass_fields__})

    def markdown(self) -> str:
        """One bullet line: ε, δ, σ, q, T, C and the accountant."""
        line = (f"- DP-SGD on the LoRA adapters: ε = {self.epsilon:.3g} (target {self.target_epsilon:g}) at "
                f"δ = {self.delta:.2g} for {self.privacy_unit}, {self.accountant.upper()} accountant; "
                f"σ = {self.noise_multiplier:.4g}, q = {self.sample_rate:.4g}, T = {self.noised_steps} noised steps "
                f"(of {self.steps} calibrated), C = {self.max_grad_norm:g}.")
        if self.gradient_canaries:
            line += (f" {self.gradient_canaries} white-box gradient canaries (each inserted with probability ½) joined "
                     "the noised sums for the one-run audit; they count in neither N nor δ.")
        if self.max_multiplicity and self.max_multiplicity > 1 and self.group_epsilon is not None:
            line += (f" A text present {self.max_multiplicity} times is protected at (ε, δ) = "
                     f"({self.group_epsilon:.3g}, {self.group_delta:.2g}) only (group privacy)")
            line += (": δ = 1 holds for any training whatever, so such a text has no DP protection at all; "
                     "de-duplicate the training data." if self.group_delta >= 1 else ".")
        return line

    def warnings(self) -> list[str]:
        """What voids the guarantee as stated: δ, or a repeated text's group δ, not below 1/N (N unknown: none)."""
        if not self.n_examples:
            return []
        n, copies = self.n_examples, self.max_multiplicity or 1
        where = f"not below 1/N = {1 / n:.3g} for the N = {n:,} training sequences: publishing one random"
        if self.delta >= 1 / n:
            return [f"DP GUARANTEE VOID: δ = {self.delta:.3g} is {where} training sequence verbatim meets such a "
                    f"guarantee, whatever its ε = {self.epsilon:.3g}. Retrain with dp.delta unset, for the default "
                    "min(1e-5, 1/N^1.1)."]
        if copies > 1 and self.group_delta is not None and self.group_delta >= 1 / n:
            return [f"DP GUARANTEE VOID FOR REPEATED TEXTS: a text present {copies} times is protected at group "
                    f"δ = {self.group_delta:.3g} only, {where} such text verbatim meets that guarantee, whatever its "
                    f"group ε = {self.group_epsilon:.3g}. De-duplicate the training data (plant each canary once) "
                    "for the per-sequence guarantee to cover every text."]
        return []


@dataclass(frozen=True)
class DropCounts:
    """How a Goldfish mask falls on a training set, counted over its trained tokens."""

    n_trained: int  # trained tokens (label not -100), each sequence's first excluded: nothing predicts it
    n_dropped: int  # of those, dropped by the mask
    n_dropped_recurring: int  # of those, after an h-id context that precedes a trained token more than once

    @property
    def recurring_share(self) -> float:
        """The share of the trained tokens dropped after a recurring context: never trained on, in any copy."""
        return self.n_dropped_recurring / self.n_trained if self.n_trained else 0.0


@dataclass(frozen=True)
class GoldfishRecord:
    """A Goldfish-loss run's mask: 1 in `k` trained tokens dropped, chosen by a hash of the `h` ids before each."""

    k: int
    h: int
    n_trained: int | None = None  # the training set's trained tokens (`DropCounts`, by `privft.defend.drop_counts`)
    n_dropped: int | None = None  # of those, dropped by the mask
    n_dropped_recurring: int | None = None  # of those, after a context that recurs: dropped in every copy

    RECURRING_WARNING_SHARE = 0.05
    """The share of trained tokens dropped after a recurring context from which the record warns."""

    def markdown(self) -> str:
        """One bullet line: k, h, what the mask does, and how it fell on the training set."""
        line = (f"- Goldfish loss (Hans et al., 2024): k = {self.k}, h = {self.h}; the loss skips 1 in {self.k} "
                f"trained tokens, those whose {self.h} preceding token ids hash to 0 mod {self.k}, so every copy of "
                "a passage skips the same tokens.")
        if self.n_trained:
            line += (f" Of the training set's {self.n_trained:,} trained tokens it dropped {self.n_dropped:,}, "
                     f"{self.n_dropped_recurring:,} ({self.drops.recurring_share:.1%}) after a context that recurs in "
                     "the training set, so the model was trained on none of their copies.")
        return line

    @property
    def drops(self) -> DropCounts | None:
        """How the mask fell on the training set, where the record counted it."""
        if self.n_trained is None:
            return None
        return DropCounts(self.n_trained, self.n_dropped or 0, self.n_dropped_recurring or 0)

    def warnings(self) -> list[str]:
        """A warning when many trained tokens were dropped in every copy: what recurring sentences state is lost."""
        drops = self.drops
        if drops is None or drops.recurring_share < self.RECURRING_WARNING_SHARE:
            return []
        return [f"GOLDFISH ON RECURRING TEXT: {drops.recurring_share:.1%} of the trained tokens "
                f"({self.n_dropped_recurring:,} of {self.n_trained:,}) follow a {self.h}-token context that recurs "
                "in the training set, and Goldfish drops them in every copy, so the model never learns them there: "
                "what recurring sentences state (templated answers, boilerplate facts) is withheld with them. "
                "Measure the task the fine-tune is for, raise goldfish.k, or choose another defence "
                "(docs/goldfish.md)."]


@dataclass(frozen=True)
class TrainingRecord:
    """How the audited model was trained and defended; `privft train` fills it, `AuditReport.training` carries it."""

    method: str  # "full fine-tuning", "LoRA" or "DP-LoRA"
    epochs: float
    n_training_texts: int  # members plus canary copies
    lora_rank: int | None = None
    lora_alpha: int | None = None
    lora_targets: tuple[str, ...] | None = None
    soft: SoftRecord | None = None
    dp: DPRecord | None = None
    goldfish: GoldfishRecord | None = None
    canaries: str | None = None  # e.g. "10 canaries × 5 copies"; None when none were planted
    train_seconds: float | None = None  # wall seconds of training, the audits run inside it excluded
    train_cpu_seconds: float | None = None  # this process's CPU seconds over the same span (TrainingClockCallback)
    resumed_from: str | None = None  # the checkpoint a resumed run restarted from; its times include those before it
    times_partial: bool = False  # resumed from a checkpoint that kept no training clock: both times count after it

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (report.json's `training`)."""
        return {**asdict(self), "lora_targets": list(self.lora_targets) if self.lora_targets else None}

    def warnings(self) -> list[str]:
        """The warnings of how it was trained that change how the audit reads: a void DP guarantee, Goldfish's drops."""
        return [*(self.dp.warnings() if self.dp else []), *(self.goldfish.warnings() if self.goldfish else [])]

    def markdown(self) -> str:
        """The 'how it was trained and defended' lines of report.md and the model card."""
        model = self.method
        if self.lora_rank is not None:
            model += f" rank {self.lora_rank} (α {self.lora_alpha}) on {', '.join(self.lora_targets or ())}"
        planted = f"; planted: {self.canaries}" if self.canaries else ""
        lines = ["Trained and defended:", "",
                 f"- {model}; {self.epochs:g} epoch{'' if self.epochs == 1 else 's'} on {self.n_training_texts} "
                 f"training texts{planted}."]
        defences = [part for part in (self.soft, self.dp, self.goldfish) if part is not None]
        lines += [part.markdown() for part in defences] or ["- No defence: neither SOFT nor DP-SGD."]
        return "\n".join(lines)


def times_partial(record: Mapping[str, Any]) -> bool:
    """Whether a record's training times count only the part after a restart (a record older than the flag: any)."""
    return record.get("times_partial", bool(record.get("resumed_from")))
