"""An audit's results and their renderings: JSON (everything), Markdown (the table), log-log ROC PNG."""

from __future__ import annotations

import hashlib
import io
import json
import math
import platform
import re
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from privft.attacks import distribution_shift
from privft.extraction import ExtractionReport
from privft.io import atomic_write_bytes, atomic_write_text, remove_temp_files
from privft.metrics import MIN_RESOLVING_FALSE_POSITIVES, MIN_SAMPLE_PER_CLASS, AttackMetrics, PerplexityRatio, TPRAtFPR
from privft.task_accuracy import TaskAccuracy
from privft.training_record import TrainingRecord

REPORT_FILES = ("report.json", "report.md", "roc.png")
GENERATION_KEY = "privft-report-generation"  # shared by the three files of one save
VERSIONED_PACKAGES = ("privft", "torch", "transformers", "peft", "trl", "opacus", "scikit-learn", "numpy")


@dataclass(frozen=True)
class PerplexityResult:
    """Perplexity of the target on held-out text, with the set it was measured on."""

    value: float
    on: str  # "validation", "non-members" or "test"
    n_texts: int
    n_tokens: int
    convention: str
    ci_low: float | None = None  # bootstrap 95 % interval over the texts
    ci_high: float | None = None
    nll_sums: list[float] | None = None  # per text, so two models on the same texts compare paired
    token_counts: list[int] | None = None

    def interval(self) -> str:
        """' [low, high]' when the interval was measured, else ''."""
        return f" [{self.ci_low:.2f}, {self.ci_high:.2f}]" if self.ci_low is not None else ""

    def line(self) -> str:
        """The report.md line: the perplexity, its interval, what it was measured on and how."""
        bootstrap = " The interval is a 95 % bootstrap over the texts." if self.ci_low is not None else ""
        return (f"Perplexity on {self.on}: {self.value:.2f}{self.interval()} ({self.n_texts} texts, {self.n_tokens} "
                f"tokens; {self.convention}{bootstrap})")


@dataclass(frozen=True)
class BasePerplexity:
    """The reference model's perplexity on the target's held-out texts, and the target's paired ratio to it."""

    model: str  # as the report names the reference, e.g. "base model (adapters disabled)"
    perplexity: PerplexityResult
    ratio: PerplexityRatio  # target over reference, paired over the same texts

    def line(self) -> str:
        """The report.md line under the target's perplexity."""
        p, r = self.perplexity, self.ratio
        return (f"The {self.model} on the same texts: {p.value:.2f}{p.interval()}; the audited model's perplexity is "
                f"×{r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] of it (paired bootstrap over the texts).")

    def warning(self, audited: PerplexityResult) -> str | None:
        """A warning when the audited model is worse than the reference on the held-out texts; None otherwise."""
        r = self.ratio
        if r.ratio <= 1:
            return None
        noise = "" if r.significant else " (the paired interval includes 1: possibly noise)"
        return (f"WORSE THAN THE BASE MODEL: perplexity {audited.value:.2f} on {audited.n_texts} {audited.on} texts "
                f"against {self.perplexity.value:.2f} for the {self.model} on the same texts, ×{r.ratio:.3f} "
                f"[{r.ci_low:.3f}, {r.ci_high:.3f}]{noise}. The fine-tune lost utility on held-out text; lower the "
                "learning rate or train fewer epochs.")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (report.json's `base_perplexity`)."""
        return {"model": self.model, "perplexity": asdict(self.perplexity), "ratio": asdict(self.ratio)}


def split_description(split: dict[str, Any]) -> str:
    """'split: SOURCE, seed N'; a split given as two sets of texts has no seed and reads 'as given'. A split of
    conversational records adds what was scored, e.g. 'scored: completion tokens of 500 prompt–completion records'."""
    seed = split.get("seed")
    drawn = f"seed {seed}" if seed is not None else "members and non-members as given"
    scored = f"; scored: {split['unit']}" if split.get("unit") else ""
    return f"split: {split.get('source', '?')}, {drawn}{scored}"


def max_fpr_hint(metrics: list[AttackMetrics]) -> str | None:
    """What to ask for when no TPR cell is estimable: an FPR ceiling these non-members resolve; None otherwise."""
    cells = [t for m in metrics for t in m.tpr_at_fpr]
    if not cells or any(t.tpr is not None for t in cells):
        return None
    n = max(t.n_non_members for t in cells)
    ceiling = min(1.0, math.ceil(MIN_RESOLVING_FALSE_POSITIVES / max(n, 1) * 1000) / 1000)  # rounded up
    return (f"No TPR at any FPR ceiling is estimable on {n:,} non-members. Ask for a ceiling they resolve: FPR ≤ "
            f"{ceiling:g} allows {math.floor(n * ceiling + 1e-9)} false positives (`privft audit --max-fpr "
            f"{ceiling:g}`, or `audit: {{max_fprs: [{ceiling:g}]}}` in a `privft train` config); or audit more "
            "non-members.")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that determine an audit's numbers."""
    found = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def roc_png(scores: dict[str, np.ndarray], labels: np.ndarray, title: str, dashed: tuple[str, ...] = (),
            metadata: dict[str, str] | None = None) -> bytes:
    """A log-log ROC plot of score arrays on the same labels (1 = member) as PNG bytes, with `metadata` text chunks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    n_out = int((labels == 0).sum())
    floor = 1.0 / max(n_out, 1)
    fig, ax = plt.subplots(figsize=(6, 5))
    for name, values in scores.items():
        scored = np.isfinite(values)  # an attack may leave texts unscored (the Ensemble's fitting part)
        fpr, tpr, _ = roc_curve(labels[scored], np.asarray(values)[scored])
        ax.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), "--" if name in dashed else "-", label=name)
    ax.plot([floor, 1], [floor, 1], ":", color="grey", label="chance")
    ax.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1),
           xlabel=f"false positive rate ({n_out} non-members)",
           ylabel=f"true positive rate ({int(labels.sum())} members)", title=title)
    ax.legend(fontsize=7, loc="lower right")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight", metadata=metadata)
    plt.close(fig)
    return buffer.getvalue()


def tpr_cell(result: TPRAtFPR) -> str:
    """A table cell: TPR with its counts, ⚠ when the estimate carries a resolution warning."""
    if result.tpr is None:
        return "not estimable"
    flag = " ⚠" if result.warning else ""
    return f"{result.tpr:.3f} ({result.true_positives}/{result.n_members}){flag}"


def epsilon_audit_line(entry: dict, title: str = "One-run ε audit") -> str:
    """The one-run ε lower bound in words, with its counts, its ceiling and the accountant's ε beside it."""
    e = entry
    line = (f"{title} (Steinke et al. 2023): ε ≥ {e['epsilon_lower_bound']:.2f} at "
            f"{e['confidence'] * 100:g} % confidence, δ = {e['delta']:.3g}, from {e['n_canaries']} canaries "
            f"({e['n_included']} inserted × {e['copies']} copies, {e['n_canaries'] - e['n_included']} controls): "
            f"{e['n_correct']}/{e['n_guesses']} guesses correct ({e['strategy']}; score: {e['score']}). "
            f"These canaries can show at most ε ≥ {e['ceiling']:.2f}.")
    if e.get("fdp"):
        line += " " + fdp_audit_sentence(e["fdp"])
    if e["accountant_epsilon"] is None:
        return line + " No DP accountant: this is a lower bound on leakage only; nothing bounds it from above."
    return line + (f" DP accountant: ε = {e['accountant_epsilon']:.3g}, δ = {e['accountant_delta']:.3g} per canary "
                   f"(ε = {e['accountant_epsilon_per_sequence']:.3g} per training sequence).")


def fdp_audit_sentence(fdp: dict) -> str:
    """The f-DP (Gaussian) one-run bound in words, with its guesses and its ceiling."""
    return (f"f-DP analysis (Mahloujifar et al. 2025) of the same canaries: μ ≥ {fdp['mu_lower_bound']:.2f} "
            f"(Gaussian DP), i.e. ε ≥ {fdp['epsilon_lower_bound']:.2f} at δ = {fdp['delta']:.3g} if the mechanism "
            f"is Gaussian-shaped, from {fdp['n_correct']}/{fdp['n_guesses']} guesses correct; at most "
            f"ε ≥ {fdp['ceiling']:.2f} (μ ≥ {fdp['mu_ceiling']:.2f}) with these canaries.")


def p_value_text(p: float) -> str:
    """A p-value as shown: three significant digits, or "< 1e-300" where it underflows float64."""
    return "< 1e-300" if p == 0 else f"= {p:.3g}"


def dataset_inference_line(entry: dict) -> str:
    """The dataset-inference p-value with both set sizes, the false-positive control beside it."""
    test, control = entry["test"], entry["control"]
    return (f"Dataset inference (Maini et al. 2024): p {p_value_text(test['p_value'])} that the "
            f"{test['n_suspect']} members score no higher than the {test['n_held_out']} non-members "
            f"(linear model fitted on {test['n_suspect_fit']} + {test['n_held_out_fit']}, one-sided Welch t-test "
            f"on {test['n_suspect_test']} vs {test['n_held_out_test']}; features: {', '.join(entry['features'])}). "
            f"False-positive control (non-members, half against half, {control['n_suspect_test']} vs "
            f"{control['n_held_out_test']} tested): p {p_value_text(control['p_value'])}.")


def beyond_membership_warnings(report: AuditReport) -> list[str]:
    """Warnings of the one-run ε audits and dataset inference: a refuted DP claim, an uncalibrated control."""
    found = list(report.dataset_inference["warnings"]) if report.dataset_inference else []
    return found + one_run_audit_warnings(report.epsilon_audit, "one-run audit")


def one_run_audit_warnings(e: dict | None, audit: str) -> list[str]:
    """A one-run ε audit's warnings, first whether it refutes (Steinke) or doubts (f-DP) the accountant's ε."""
    found = []
    if e and e["accountant_epsilon"] is not None and e["epsilon_lower_bound"] > e["accountant_epsilon"]:
        found.append(f"DP GUARANTEE REFUTED: the {audit} shows ε ≥ {e['epsilon_lower_bound']:.2f} at "
                     f"{e['confidence'] * 100:g} % confidence, above the accountant's ε = "
                     f"{e['accountant_epsilon']:.3g} per canary. A correct DP implementation shows this in at most "
                     f"{(1 - e['confidence']) * 100:g} % of runs: check the training before trusting its guarantee.")
    fdp = (e or {}).get("fdp")
    if fdp and e["accountant_epsilon"] is not None and e["epsilon_lower_bound"] <= e["accountant_epsilon"] \
            < fdp["epsilon_lower_bound"]:
        found.append(f"DP GUARANTEE IN DOUBT: the f-DP analysis of the {audit} shows ε ≥ "
                     f"{fdp['epsilon_lower_bound']:.2f} (μ ≥ {fdp['mu_lower_bound']:.2f}), above the accountant's ε = "
                     f"{e['accountant_epsilon']:.3g} "
                     "per canary, if the mechanism's privacy is Gaussian-shaped as DP-SGD's is; check the training.")
    return found + list((e or {}).get("warnings", []))


@dataclass
class AuditReport:
    """Every number of one audit, the per-text scores behind them, and the settings that produced them."""

    model: str
    reference: str | None
    config: dict
    split: dict
    blind_baseline: AttackMetrics
    attacks: dict[str, AttackMetrics]
    perplexity: PerplexityResult
    scores: dict[str, np.ndarray]
    labels: np.ndarray
    text_sha256: list[str]
    notes: list[str] = field(default_factory=list)
    training_steps: int | None = None  # optimizer steps taken before the audit, when a training callback ran it
    canary_exposure: dict | None = None  # summary from privft's canary callback, when canaries were planted
    extraction: ExtractionReport | None = None  # when AuditConfig.extraction was set (canaries: the audit callback)
    epsilon_audit: dict | None = None  # one-run ε lower bound (privft.callbacks.one_run), with one_run canaries
    gradient_epsilon_audit: dict | None = None  # the white-box one, from DP-LoRA's gradient canaries (privft train)
    dataset_inference: dict | None = None  # DatasetInferenceResult.to_dict(), when AuditConfig.dataset_inference
    training: TrainingRecord | None = None  # how the model was trained and defended (`privft train` fills it)
    start_token: dict | None = None  # the token every text was scored after: rule, token, id (run_audit fills it)
    base_perplexity: BasePerplexity | None = None  # the reference's, on the same held-out texts (run_audit fills it)
    test_perplexity: PerplexityResult | None = None  # on the split's test side, when it has one
    task_accuracy: TaskAccuracy | None = None  # on held-out tickets, when AuditConfig.task is set
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    versions: dict[str, str] = field(default_factory=package_versions)

    @property
    def distribution_shift(self) -> bool | None:
        """True when the model-free baseline separates the split: attack numbers then measure shift.

        None (no verdict) below MIN_SAMPLE_PER_CLASS members or non-members: its interval cannot tell then.
        """
        return distribution_shift(self.blind_baseline.auc)

    @property
    def warnings(self) -> list[str]:
        """Everything that changes how the numbers should be read, for display beside them."""
        found = self.training.warnings() if self.training else []  # first: a void DP guarantee
        if self.training_steps == 0:
            found.append("NO TRAINING: the model took 0 optimizer steps before this audit, so every number below "
                         "describes the model as it was before fine-tuning; an AUC near 0.5 here is not evidence of "
                         "privacy.")
        metrics = [self.blind_baseline, *self.attacks.values()]
        found += sorted({m.auc.warning for m in metrics if m.auc.warning})
        auc = self.blind_baseline.auc
        if self.distribution_shift is None:
            found.append(f"The blind baseline gives no verdict on {auc.n_members} members vs {auc.n_non_members} "
                         f"non-members (fewer than {MIN_SAMPLE_PER_CLASS} on a side): at this size it can neither "
                         "show nor rule out a distribution shift between them.")
        elif self.distribution_shift:
            found.append(f"DISTRIBUTION SHIFT: the blind baseline (no model access) reaches AUC {auc.auc:.3f} "
                         f"[{auc.ci_low:.3f}, {auc.ci_high:.3f}]; every attack number below partly measures how "
                         "members and non-members differ as text, not what the model memorised.")
        elif auc.ci_low > 0.5:
            found.append(f"The blind baseline is above chance (AUC {auc.auc:.3f}, CI low {auc.ci_low:.3f}): "
                         "the split may differ mildly in distribution.")
        if self.base_perplexity and (worse := self.base_perplexity.warning(self.perplexity)):
            found.append(worse)
        resolution = sorted({t.warning for m in metrics for t in m.tpr_at_fpr if t.warning})
        hint = max_fpr_hint(metrics)
        return (found + resolution + ([hint] if hint else []) + beyond_membership_warnings(self)
                + one_run_audit_warnings(self.gradient_epsilon_audit, "white-box one-run audit (gradient canaries)")
                + list(self.notes))

    def to_dict(self) -> dict:
        """A JSON-ready dict of every number, per-text score, setting and version."""
        return {
            "created": self.created,
            "model": self.model,
            "reference": self.reference,
            "split": self.split,
            "config": self.config,
            "versions": self.versions,
            "distribution_shift": self.distribution_shift,
            "training_steps": self.training_steps,
            "start_token": self.start_token,
            "warnings": self.warnings,
            "blind_baseline": self.blind_baseline.to_dict(),
            "attacks": {name: m.to_dict() for name, m in self.attacks.items()},
            "perplexity": asdict(self.perplexity),
            "base_perplexity": self.base_perplexity.to_dict() if self.base_perplexity else None,
            "test_perplexity": asdict(self.test_perplexity) if self.test_perplexity else None,
            "task_accuracy": self.task_accuracy.to_dict() if self.task_accuracy else None,
            "canary_exposure": self.canary_exposure,
            "extraction": self.extraction.to_dict() if self.extraction else None,
            "epsilon_audit": self.epsilon_audit,
            "gradient_epsilon_audit": self.gradient_epsilon_audit,
            "dataset_inference": self.dataset_inference,
            "training": self.training.to_dict() if self.training else None,
            "per_text": {
                "sha256": self.text_sha256,
                "label": self.labels.tolist(),
                "scores": {name: np.asarray(v).tolist() for name, v in self.scores.items()},
            },
        }

    def to_markdown(self) -> str:
        """The audit table: blind baseline first, one row per attack, counts and warnings beside it."""
        fprs = [t.max_fpr for t in self.blind_baseline.tpr_at_fpr]
        header = ["Attack", "AUC [95 % CI]", *[f"TPR @ FPR ≤ {f * 100:g} %" for f in fprs]]
        shift = " ⚠ shift" if self.distribution_shift else ""
        lines = [
            f"## Membership-inference audit: {self.model}",
            "",
            f"{self.split['n_members']} members vs {self.split['n_non_members']} non-members "
            f"({split_description(self.split)}); reference: {self.reference or 'none'}"
            + (f"; every text scored after `{self.start_token['token']}` (start_token: {self.start_token['rule']})."
               if self.start_token else "."),
            "",
            *([self.training.markdown(), ""] if self.training else []),
            *(["### Warnings", "", *[f"- {w}" for w in self.warnings], ""] if self.warnings else []),
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        rows = [[name + (shift if m is self.blind_baseline else ""),
                 f"{m.auc.auc:.3f} [{m.auc.ci_low:.3f}, {m.auc.ci_high:.3f}]" + (" ⚠" if m.auc.warning else ""),
                 *map(tpr_cell, m.tpr_at_fpr)]
                for name, m in [("blind baseline (no model)", self.blind_baseline), *self.attacks.items()]]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
        flagged = " ⚠ marks a warning above (sample size or resolution)." if any(
            cell.endswith(" ⚠") for cells in rows for cell in cells) else ""
        lines += ["", self.perplexity.line(),
                  *([self.base_perplexity.line()] if self.base_perplexity else []),
                  *([self.test_perplexity.line()] if self.test_perplexity else []),
                  *([self.task_accuracy.line()] if self.task_accuracy else []),
                  "", "TPR cells show (true positives / members) at the lowest threshold that keeps these "
                      "non-members' FPR within the ceiling; the interval covers the members' binomial noise only."
                      + flagged,
                  *filter(None, map(self.threshold_fpr_line, range(len(fprs))))]
        if self.canary_exposure:
            c = self.canary_exposure
            lines += ["", f"Canary exposure: mean {c['mean_exposure']:.2f} bits, max {c['max_exposure']:.2f} bits over "
                          f"{c['n_canaries']} canaries × {c['copies']} copies (ranked among {c['n_alternatives']} "
                          f"random alternatives; at most {c['max_measurable']:.2f} bits by rank)."]
        if self.extraction:
            lines += ["", *self.extraction.markdown_lines()]
        if self.epsilon_audit:
            lines += ["", epsilon_audit_line(self.epsilon_audit)]
        if self.gradient_epsilon_audit:
            lines += ["", epsilon_audit_line(self.gradient_epsilon_audit,
                                             "White-box one-run ε audit, gradient canaries on the LoRA parameters")]
        if self.dataset_inference:
            lines += ["", dataset_inference_line(self.dataset_inference)]
        return "\n".join(lines) + "\n"

    def threshold_fpr_line(self, index: int) -> str | None:
        """How high, on new non-members, the FPR of ceiling `index`'s threshold may be (95 % upper bound)."""
        results = [m.tpr_at_fpr[index] for m in (self.blind_baseline, *self.attacks.values())
                   if m.tpr_at_fpr[index].fpr_upper is not None]
        if not results:
            return None
        loosest = max(results, key=lambda result: result.fpr_upper)
        return (f"On new non-members, the threshold set for FPR ≤ {loosest.max_fpr * 100:g} % may reach FPR "
                f"{loosest.fpr_upper * 100:.2g} % (95 % upper bound from the order statistics of "
                f"{loosest.n_non_members:,} non-members): read its TPR as that of a looser ceiling.")

    def roc_png(self, metadata: dict[str, str] | None = None) -> bytes:
        """A log-log ROC plot (one curve per attack, the blind baseline dashed) as PNG bytes."""
        return roc_png(self.scores, self.labels, self.model, dashed=("blind_baseline",), metadata=metadata)

    def save(self, directory: str | Path) -> dict[str, Path]:
        """Write roc.png, report.md, then report.json into `directory`, each atomically, sharing one generation id.

        report.json goes last, so a kill between files leaves it with the previous generation (or
        none) while a newer report.md or roc.png carries another: `read_report` then refuses the mix.
        Temporary files of an earlier, killed save are removed first.
        """
        directory = Path(directory)
        payload = self.to_dict()
        payload["generation"] = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]
        png = self.roc_png(metadata={GENERATION_KEY: payload["generation"]})  # all rendered before any file changes
        markdown = self.to_markdown() + generation_marker(payload["generation"])
        for name in REPORT_FILES:
            remove_temp_files(directory / name)
        return {
            "roc": atomic_write_bytes(directory / "roc.png", png),
            "markdown": atomic_write_text(directory / "report.md", markdown),
            "json": atomic_write_text(directory / "report.json", json.dumps(payload, indent=1)),
        }


class ReportMismatchError(ValueError):
    """A folder's report.json, report.md and roc.png come from different audits (a save was interrupted)."""


def generation_marker(generation: str) -> str:
    """The line that ties a report.md to its report.json: an HTML comment, invisible when rendered."""
    return f"\n<!-- {GENERATION_KEY} {generation} -->\n"


def _markdown_generation(path: Path) -> str | None:
    """The generation id a report.md ends with; None when it is absent or has none."""
    if not path.is_file():
        return None
    marker = re.search(rf"<!-- {GENERATION_KEY} (\w+) -->", path.read_text(encoding="utf-8"))
    return marker.group(1) if marker else None


def _png_generation(path: Path) -> str | None:
    """The generation id in a roc.png's text chunk; None when it is absent or has none."""
    if not path.is_file():
        return None
    from PIL import Image  # matplotlib's own dependency

    with Image.open(path) as image:
        return image.info.get(GENERATION_KEY)


def read_report(directory: str | Path) -> dict:
    """report.json of `directory`, after checking that report.md and roc.png beside it belong to the same save.

    Reports written before generation ids existed carry none and are read unchecked.
    """
    directory = Path(directory)
    report = json.loads((directory / "report.json").read_text(encoding="utf-8"))
    if not isinstance(report, dict):
        raise ValueError(f"{directory / 'report.json'} holds a JSON {type(report).__name__}, not an audit report's "
                         "object: rerun the audit to rewrite it.")
    generation = report.get("generation")
    if generation is None:
        return report
    found = {"report.md": _markdown_generation(directory / "report.md"),
             "roc.png": _png_generation(directory / "roc.png")}
    stale = [name for name, value in found.items() if value != generation]
    if stale:
        raise ReportMismatchError(f"{' and '.join(stale)} in {directory} are missing or come from another save than "
                                  f"report.json (generation {generation}): a save was interrupted; rerun the audit to "
                                  "rewrite all three files.")
    return report


def comparison_markdown(reports: dict[str, AuditReport]) -> str:
    """Audits of several runs on the same split, side by side: AUC and TPR at the first FPR ceiling per attack."""
    names = list(reports)
    first = reports[names[0]]
    splits = {json.dumps(r.split, sort_keys=True) for r in reports.values()}
    if len(splits) != 1:
        raise ValueError(f"Runs {names} were audited on different splits; compare runs on the same split only.")
    fpr = first.blind_baseline.tpr_at_fpr[0].max_fpr
    header = ["Attack", *[f"AUC {n}" for n in names], *[f"TPR@{fpr * 100:g} % {n}" for n in names]]
    lines = [f"{first.split['n_members']} members vs {first.split['n_non_members']} non-members "
             f"({split_description(first.split)}).", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    rows = {"blind baseline (no model)": [r.blind_baseline for r in reports.values()]}
    rows |= {a: [r.attacks[a] for r in reports.values()] for a in first.attacks if all(a in r.attacks for r in
                                                                                      reports.values())}
    for attack, metrics in rows.items():
        aucs = [f"{m.auc.auc:.3f} [{m.auc.ci_low:.2f}, {m.auc.ci_high:.2f}]" for m in metrics]
        lines.append("| " + " | ".join([attack, *aucs, *[tpr_cell(m.tpr_at_fpr[0]) for m in metrics]]) + " |")
    lines.append("")
    for name, report in reports.items():
        p = report.perplexity
        extra = ""
        if report.canary_exposure:
            extra = f"; canary exposure mean {report.canary_exposure['mean_exposure']:.2f} bits"
        lines.append(f"- {name}: perplexity {p.value:.2f}{p.interval()} on {p.n_texts} {p.on} texts{extra}"
                     + ("; ⚠ distribution shift" if report.distribution_shift else ""))
    if bound := first.threshold_fpr_line(0):
        lines += ["", bound]
    warnings = sorted({w for r in reports.values() for w in r.warnings})
    if warnings:
        lines += ["", "Warnings:", *[f"- {w}" for w in warnings]]
    return "\n".join(lines) + "\n"
