"""An audit's results and their renderings: JSON (everything), Markdown (the table), log-log ROC PNG."""

from __future__ import annotations

import io
import json
import platform
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from privft.attacks import SHIFT_AUC
from privft.io import atomic_write_bytes, atomic_write_text
from privft.metrics import AttackMetrics, TPRAtFPR

VERSIONED_PACKAGES = ("privft", "torch", "transformers", "peft", "trl", "opacus", "scikit-learn", "numpy")


@dataclass(frozen=True)
class PerplexityResult:
    """Perplexity of the target on held-out text, with the set it was measured on."""

    value: float
    on: str  # "validation" or "non-members"
    n_texts: int
    n_tokens: int
    convention: str


def package_versions() -> dict[str, str]:
    """Installed versions of the packages that determine an audit's numbers."""
    found = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def roc_png(scores: dict[str, np.ndarray], labels: np.ndarray, title: str, dashed: tuple[str, ...] = ()) -> bytes:
    """A log-log ROC plot of several score arrays on the same labels (1 = member) as PNG bytes."""
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
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def tpr_cell(result: TPRAtFPR) -> str:
    """A table cell: TPR with its counts, ⚠ when the estimate carries a resolution warning."""
    if result.tpr is None:
        return "not estimable"
    flag = " ⚠" if result.warning else ""
    return f"{result.tpr:.3f} ({result.true_positives}/{result.n_members}){flag}"


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
    canary_exposure: dict | None = None  # summary from privft's canary callback, when canaries were planted
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    versions: dict[str, str] = field(default_factory=package_versions)

    @property
    def distribution_shift(self) -> bool:
        """True when the model-free baseline separates the split: attack numbers then measure shift."""
        auc = self.blind_baseline.auc
        return auc.auc >= SHIFT_AUC and auc.ci_low > 0.5

    @property
    def warnings(self) -> list[str]:
        """Everything that changes how the numbers should be read, for display beside them."""
        found = []
        auc = self.blind_baseline.auc
        if self.distribution_shift:
            found.append(f"DISTRIBUTION SHIFT: the blind baseline (no model access) reaches AUC {auc.auc:.3f} "
                         f"[{auc.ci_low:.3f}, {auc.ci_high:.3f}]; every attack number below partly measures how "
                         "members and non-members differ as text, not what the model memorised.")
        elif auc.ci_low > 0.5:
            found.append(f"The blind baseline is above chance (AUC {auc.auc:.3f}, CI low {auc.ci_low:.3f}): "
                         "the split may differ mildly in distribution.")
        resolution = {t.warning for m in [self.blind_baseline, *self.attacks.values()]
                      for t in m.tpr_at_fpr if t.warning}
        return found + sorted(resolution) + list(self.notes)

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
            "warnings": self.warnings,
            "blind_baseline": self.blind_baseline.to_dict(),
            "attacks": {name: m.to_dict() for name, m in self.attacks.items()},
            "perplexity": asdict(self.perplexity),
            "canary_exposure": self.canary_exposure,
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
            f"(split: {self.split['source']}, seed {self.split['seed']}); reference: {self.reference or 'none'}.",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for name, m in [("blind baseline (no model)", self.blind_baseline), *self.attacks.items()]:
            a = m.auc
            cells = [name + (shift if m is self.blind_baseline else ""),
                     f"{a.auc:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}]", *map(tpr_cell, m.tpr_at_fpr)]
            lines.append("| " + " | ".join(cells) + " |")
        p = self.perplexity
        lines += ["", f"Perplexity on {p.on}: {p.value:.2f} ({p.n_texts} texts, {p.n_tokens} tokens; {p.convention})",
                  "", "TPR cells show (true positives / members) at the lowest threshold that keeps these "
                      "non-members' FPR within the ceiling; the interval covers the members' binomial noise only. "
                      "⚠ marks a resolution warning below.",
                  *filter(None, map(self.threshold_fpr_line, range(len(fprs))))]
        if self.canary_exposure:
            c = self.canary_exposure
            lines += ["", f"Canary exposure: mean {c['mean_exposure']:.2f} bits, max {c['max_exposure']:.2f} bits over "
                          f"{c['n_canaries']} canaries × {c['copies']} copies (ranked among {c['n_alternatives']} "
                          f"random alternatives; at most {c['max_measurable']:.2f} bits by rank)."]
        if self.warnings:
            lines += ["", "### Warnings", "", *[f"- {w}" for w in self.warnings]]
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

    def roc_png(self) -> bytes:
        """A log-log ROC plot (one curve per attack, the blind baseline dashed) as PNG bytes."""
        return roc_png(self.scores, self.labels, self.model, dashed=("blind_baseline",))

    def save(self, directory: str | Path) -> dict[str, Path]:
        """Write report.json, report.md and roc.png into `directory`, each atomically."""
        directory = Path(directory)
        return {
            "json": atomic_write_text(directory / "report.json", json.dumps(self.to_dict(), indent=1)),
            "markdown": atomic_write_text(directory / "report.md", self.to_markdown()),
            "roc": atomic_write_bytes(directory / "roc.png", self.roc_png()),
        }


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
             f"(split: {first.split['source']}, seed {first.split['seed']}).", "",
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
        lines.append(f"- {name}: perplexity {p.value:.2f} on {p.n_texts} {p.on} texts{extra}"
                     + ("; ⚠ distribution shift" if report.distribution_shift else ""))
    if bound := first.threshold_fpr_line(0):
        lines += ["", bound]
    warnings = sorted({w for r in reports.values() for w in r.warnings})
    if warnings:
        lines += ["", "Warnings:", *[f"- {w}" for w in warnings]]
    return "\n".join(lines) + "\n"
