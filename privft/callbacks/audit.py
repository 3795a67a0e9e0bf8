"""Re-run the membership-inference audit when training ends, log it, and put it on the model card."""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback, TrainerControl, TrainerState
from transformers.training_args import TrainingArguments

from privft.audit import (
    AuditConfig,
    available_statistics,
    is_peft_model,
    run_audit,
    same_tokenizer,
    select_attacks,
)
from privft.callbacks.canary import CanaryCallback
from privft.callbacks.one_run import one_run_epsilon_audit
from privft.callbacks.soft import soft_report_notes
from privft.clock import Clock
from privft.data import MembershipSplit
from privft.extraction import canary_extraction
from privft.gate import Verdict
from privft.io import atomic_write_text
from privft.report import AuditReport
from privft.scoring.render import RecordRendering, render_records, rendering_context

CARD_START = "<!-- privft:privacy-audit:start -->"
CARD_END = "<!-- privft:privacy-audit:end -->"
CARD_HEADING = "## Privacy audit (privft)"
GATE_START = "<!-- privft:release-gate:start -->"
GATE_END = "<!-- privft:release-gate:end -->"


def fine_tuned_name(output_dir: str | Path, base: str | None) -> str:
    """How a report names a fine-tune: where it is written, and the model it was fine-tuned from when known."""
    return f"{output_dir} (fine-tuned from {base})" if base else str(output_dir)


def headline_metrics(report: AuditReport) -> dict[str, float]:
    """Flat `privacy/...` numbers for the Trainer's logs: AUC and TPR per attack, perplexity, exposure."""
    logs = {"privacy/perplexity": report.perplexity.value,
            "privacy/blind_baseline_auc": report.blind_baseline.auc.auc}
    if report.base_perplexity:
        logs["privacy/base_perplexity"] = report.base_perplexity.perplexity.value
    if report.test_perplexity:
        logs["privacy/test_perplexity"] = report.test_perplexity.value
    if report.task_accuracy:
        logs["privacy/task_accuracy"] = report.task_accuracy.accuracy.accuracy
    for name, metrics in report.attacks.items():
        logs[f"privacy/{name}/auc"] = metrics.auc.auc
        for result in metrics.tpr_at_fpr:
            if result.tpr is not None:
                logs[f"privacy/{name}/tpr@{result.max_fpr * 100:g}%"] = result.tpr
    if report.canary_exposure:
        logs["privacy/canary_exposure_mean"] = report.canary_exposure["mean_exposure"]
        logs["privacy/canary_exposure_max"] = report.canary_exposure["max_exposure"]
    if report.extraction:
        logs |= report.extraction.headline()
    if report.epsilon_audit:
        logs["privacy/epsilon_lower_bound"] = report.epsilon_audit["epsilon_lower_bound"]
        for count in ("n_canaries", "n_guesses", "n_correct"):
            logs[f"privacy/epsilon_lower_bound/{count}"] = report.epsilon_audit[count]
        if report.epsilon_audit.get("fdp"):  # Mahloujifar et al.'s Gaussian-DP reading of the same guesses
            logs["privacy/epsilon_lower_bound_fdp"] = report.epsilon_audit["fdp"]["epsilon_lower_bound"]
            logs["privacy/mu_lower_bound_fdp"] = report.epsilon_audit["fdp"]["mu_lower_bound"]
    if report.dataset_inference:
        test = report.dataset_inference["test"]
        logs |= {"privacy/dataset_inference_p": test["p_value"],
                 "privacy/dataset_inference_control_p": report.dataset_inference["control"]["p_value"],
                 "privacy/dataset_inference/n_members": test["n_suspect"],
                 "privacy/dataset_inference/n_non_members": test["n_held_out"]}
    return logs


def model_card_section(report: AuditReport, verdict: Verdict | None = None) -> str:
    """The privacy section of a model card: the gate's verdict when given, headline numbers with counts, warnings."""
    return "\n".join([CARD_START, CARD_HEADING, "", *([gate_block(verdict), ""] if verdict else []),
                      f"Audited {report.created} with privft {report.versions.get('privft', '?')}.", "",
                      report.to_markdown().split("\n", 2)[2].strip(), CARD_END])


def gate_block(verdict: Verdict) -> str:
    """The release gate's verdict and criteria, between markers so that a later verdict replaces it."""
    return "\n".join([GATE_START, verdict.to_markdown().strip(), GATE_END])


def _replace_between(card: str, start: str, end: str, block: str) -> str | None:
    """`card` with the text from marker `start` to marker `end` replaced by `block`; None without the markers."""
    if start not in card or end not in card:
        return None
    before, rest = card.split(start, 1)
    return before + block + rest.split(end, 1)[1]


def _appended(card: str, section: str) -> str:
    """`card` with `section` added at its end."""
    return (card.rstrip() + "\n\n" if card.strip() else "") + section + "\n"


def write_model_card_section(directory: str | Path, report: AuditReport, verdict: Verdict | None = None) -> Path:
    """Add or replace the privacy section of `directory/README.md`, keeping everything else."""
    path = Path(directory) / "README.md"
    card = path.read_text(encoding="utf-8") if path.exists() else ""
    section = model_card_section(report, verdict)
    return atomic_write_text(path, _replace_between(card, CARD_START, CARD_END, section) or _appended(card, section))


def write_gate_verdict(directory: str | Path, verdict: Verdict) -> Path:
    """Head the privacy section of `directory/README.md` with `verdict` (`privft gate`), replacing an earlier one."""
    path = Path(directory) / "README.md"
    card = path.read_text(encoding="utf-8") if path.exists() else ""
    block, head = gate_block(verdict), f"{CARD_START}\n{CARD_HEADING}\n"
    updated = _replace_between(card, GATE_START, GATE_END, block)
    if updated is None and head in card:
        updated = card.replace(head, f"{head}\n{block}\n", 1)
    return atomic_write_text(path, updated or _appended(card, "\n".join([CARD_START, CARD_HEADING, "", block,
                                                                          CARD_END])))


class PrivacyAuditCallback(TrainerCallback):
    """Audit members vs non-members of `split` at train end (and every `every_n_epochs` epochs).

    Under several processes every rank scores its share of the texts (and of the canaries'
    exposure), and the main process computes the audit from the gathered statistics: the same
    report as a single process's. Its headline numbers go into the Trainer's logs,
    the full report into `output_dir` (default `<args.output_dir>/privacy-audit`), and a
    privacy section into `<args.output_dir>/README.md`. Without a reference, a peft model is
    compared with itself with adapters disabled. Pass `canary_callback` to add exposure. The
    report names the model `model_name`, by default `args.output_dir` and the model it was
    fine-tuned from.

    A split of conversational records is scored as the trainer trains on them: `rendering`, else
    the trainer's own args (`RecordRendering.from_args`: trl's `max_length`, `completion_only_loss`,
    `assistant_only_loss`), with `config.scored` choosing completion, prompt or all tokens.
    """

    def __init__(
        self,
        split: MembershipSplit,
        tokenizer: PreTrainedTokenizerBase,
        *,
        reference: PreTrainedModel | None = None,
        reference_tokenizer: PreTrainedTokenizerBase | None = None,
        config: AuditConfig | None = None,
        every_n_epochs: int | None = None,
        output_dir: str | None = None,
        canary_callback: CanaryCallback | None = None,
        model_name: str | None = None,
        rendering: RecordRendering | None = None,
    ) -> None:
        if every_n_epochs is not None and every_n_epochs < 1:
            raise ValueError(f"every_n_epochs must be a positive integer or None, got {every_n_epochs!r}.")
        self.split = split
        self.tokenizer = tokenizer
        self.reference = reference
        self.reference_tokenizer = reference_tokenizer
        self.config = config or AuditConfig()
        self.every_n_epochs = every_n_epochs
        self.output_dir = output_dir
        self.canary_callback = canary_callback
        self.model_name = model_name
        self.rendering = rendering  # how conversational records are scored; None: from the trainer's own args
        self.reports: list[AuditReport] = []
        self.clock = Clock()  # time spent auditing, so callers can report training time without it

    @property
    def report(self) -> AuditReport | None:
        """The latest audit, or None before the first one."""
        return self.reports[-1] if self.reports else None

    def _rendering(self, args: TrainingArguments) -> RecordRendering:
        """The records' rendering: the one given, else the trainer's (its max_length, completion or assistant loss)."""
        return self.rendering or RecordRendering.from_args(args, scored=self.config.scored)

    def _audit(self, args: TrainingArguments, state: TrainerState, model: PreTrainedModel, tag: str) -> None:
        with rendering_context(self._rendering(args)), self.clock.span():
            self._audit_rendered(args, state, model, tag)

    def _audit_rendered(self, args: TrainingArguments, state: TrainerState, model: PreTrainedModel, tag: str
                        ) -> None:
        model = getattr(model, "module", model)  # unwrap DistributedDataParallel
        name = self.model_name or fine_tuned_name(args.output_dir, getattr(model, "name_or_path", None))
        report = run_audit(model, self.tokenizer, self.split, reference=self.reference,
                           reference_tokenizer=self.reference_tokenizer, config=self.config,
                           model_name=name, shard=True)  # None on ranks other than 0
        exposure = self.canary_callback.exposure_at(state, model) if self.canary_callback is not None else None
        if report is None:
            return
        if self.canary_callback is not None:
            report.canary_exposure = exposure
            if report.extraction is not None:  # the canaries' secrets, decoded from their template prefix
                report.extraction.canaries = canary_extraction(
                    model, self.tokenizer, self.canary_callback.plan, beams=self.config.extraction.canary_beams,
                    batch_size=self.config.batch_size, exposures=self.canary_callback.results)
            if self.canary_callback.plan.one_run:  # every canary scored, inserted or control: an ε lower bound
                report.epsilon_audit = one_run_epsilon_audit(
                    model, self.tokenizer, self.canary_callback.plan, state.log_history, reference=self.reference,
                    reference_tokenizer=self.reference_tokenizer, batch_size=self.config.batch_size)
        report.notes.extend(soft_report_notes(state.log_history))  # a defence that protected less than it logged
        report.training_steps = state.global_step  # 0 puts a "no training" warning at the top of the report
        out = Path(self.output_dir or Path(args.output_dir) / "privacy-audit")
        report.save(out / tag if tag != "final" else out)
        state.log_history.append({**headline_metrics(report), "epoch": state.epoch, "step": state.global_step})
        self.reports.append(report)
        if tag == "final":
            write_model_card_section(args.output_dir, report)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: PreTrainedModel | None = None, **kwargs) -> None:
        """Refuse an audit that could not run, before any training is spent."""
        has_reference = self.reference is not None or is_peft_model(getattr(model, "module", model))
        same_tok = self.reference_tokenizer is None or same_tokenizer(self.tokenizer, self.reference_tokenizer)
        select_attacks(self.config, available_statistics(has_reference), same_tok)
        if self.split.format != "text":  # a record the trainer cannot train on is refused now, not after training
            texts, _ = self.split.labels_and_texts()
            render_records(texts + self.split.validation + self.split.test, self.tokenizer, self._rendering(args))

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     model: PreTrainedModel | None = None, **kwargs) -> None:
        """Audit every `every_n_epochs` epochs (every rank scores its share)."""
        epoch = round(state.epoch or 0)
        if self.every_n_epochs and epoch % self.every_n_epochs == 0:
            self._audit(args, state, model, f"epoch-{epoch}")

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     model: PreTrainedModel | None = None, **kwargs) -> None:
        """The final audit (every rank scores its share)."""
        self._audit(args, state, model, "final")
