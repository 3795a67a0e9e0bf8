"""A leave-one-out shadow-model audit: every LiRA variant and RMIA on the same stored losses, with counts.

Scores of all targets are pooled: LiRA's likelihood ratio and RMIA's score are calibrated per
example, so a shadow farm of K models over N candidates gives K·N scored (model, text) pairs,
half of them members. Candidates and planted canaries are reported apart; population texts
(never trained on) serve RMIA only.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from privft.io import atomic_write_bytes, atomic_write_text
from privft.lira.evaluate import ShadowAttack, leave_one_out
from privft.lira.gaussian import ESTIMATORS
from privft.lira.lira import COVARIANCES, LiRA
from privft.lira.rmia import RMIA
from privft.metrics import DEFAULT_MAX_FPRS, AttackMetrics, evaluate_attack
from privft.report import package_versions, roc_png, tpr_cell

REPORTED_KINDS = {"candidate": "Candidates", "canary": "Canaries"}  # kind → heading


def default_variants(population: np.ndarray, statistic: str = "loss") -> dict[str, ShadowAttack]:
    """Univariate, independent and OAS LiRA (shared, class-wise, offline), fixed variance, RMIA given a population."""
    variants: dict[str, ShadowAttack] = {
        f"{estimator} {covariance}": LiRA(estimator=estimator, covariance=covariance, statistic=statistic)
        for estimator in ESTIMATORS for covariance in COVARIANCES}
    variants |= {f"{estimator} offline": LiRA(estimator=estimator, online=False, statistic=statistic)
                 for estimator in ESTIMATORS}
    variants["univariate global-variance"] = LiRA(estimator="univariate", variance="global", statistic=statistic)
    variants["univariate offline global-variance"] = LiRA(estimator="univariate", online=False, variance="global",
                                                          statistic=statistic)
    if len(population):
        variants["rmia offline"] = RMIA(population)
    return variants


@dataclass
class LiraReport:
    """Leave-one-out scores and metrics of several shadow attacks on one farm."""

    source: str  # the farm folder
    variants: dict[str, dict]  # each variant's settings
    metrics: dict[str, dict[str, AttackMetrics]]  # kind ("candidate", "canary") → variant → metrics
    scores: dict[str, np.ndarray]  # variant → (n_shadows, n_texts) leave-one-out scores, higher = member
    keep: np.ndarray  # (n_shadows, n_texts) ground truth
    kinds: list[str]  # per text
    notes: list[str] = field(default_factory=list)
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    versions: dict[str, str] = field(default_factory=package_versions)

    def pooled(self, kind: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Scores per variant and labels of every (target, text) pair of one kind, flattened."""
        index = np.flatnonzero(np.array(self.kinds) == kind)
        return ({name: s[:, index].ravel() for name, s in self.scores.items()},
                self.keep[:, index].ravel().astype(np.int8))

    def to_dict(self) -> dict:
        """A JSON-ready dict of the settings, metrics, per-pair scores and versions."""
        return {
            "created": self.created, "source": self.source, "versions": self.versions, "notes": self.notes,
            "variants": self.variants,
            "metrics": {kind: {name: m.to_dict() for name, m in metrics.items()}
                        for kind, metrics in self.metrics.items()},
            "kinds": self.kinds, "keep": self.keep.astype(int).tolist(),
            "scores": {name: np.where(np.isnan(s), None, s).tolist() for name, s in self.scores.items()},
        }

    def to_markdown(self) -> str:
        """One table per kind of text: AUC with CI and TPR at each FPR ceiling with counts."""
        lines = [f"## Shadow-model audit (leave-one-out): {self.source}", "",
                 f"{self.keep.shape[0]} shadow models, each in turn the target of the others.", ""]
        for kind, metrics in self.metrics.items():
            first = next(iter(metrics.values()))
            fprs = [t.max_fpr for t in first.tpr_at_fpr]
            title = (f"### {REPORTED_KINDS[kind]}: {first.auc.n_members:,} member and {first.auc.n_non_members:,} "
                     "non-member (target, text) pairs")
            lines += [title, "",
                      "| Variant | AUC [95 % CI] | " + " | ".join(f"TPR @ FPR ≤ {f * 100:g} %" for f in fprs) + " |",
                      "|" + "---|" * (2 + len(fprs))]
            for name, m in metrics.items():
                cells = [f"{m.auc.auc:.3f} [{m.auc.ci_low:.2f}, {m.auc.ci_high:.2f}]", *map(tpr_cell, m.tpr_at_fpr)]
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            lines.append("")
        resolution = sorted({t.warning for metrics in self.metrics.values() for m in metrics.values()
                             for t in m.tpr_at_fpr if t.warning})
        pooled = ("lira.json's fpr_upper (the thresholds' FPR bound for new non-members) assumes independent "
                  "non-members; pooled (target, text) pairs share texts across targets, so it is optimistic here.")
        lines += ["### Warnings", "", *[f"- {w}" for w in [*resolution, *self.notes, pooled]]]
        return "\n".join(lines) + "\n"

    def save(self, directory: str | Path) -> dict[str, Path]:
        """Write lira.json, lira.md and one log-log ROC PNG per kind into `directory`, each atomically."""
        directory = Path(directory)
        paths = {"json": atomic_write_text(directory / "lira.json", json.dumps(self.to_dict())),
                 "markdown": atomic_write_text(directory / "lira.md", self.to_markdown())}
        for kind in self.metrics:
            scores, labels = self.pooled(kind)
            paths[f"roc_{kind}"] = atomic_write_bytes(directory / f"roc_{kind}.png",
                                                      roc_png(scores, labels, f"{REPORTED_KINDS[kind]}, leave-one-out"))
        return paths


def run_lira_audit(losses: np.ndarray, keep: np.ndarray, kinds: list[str], variants: dict[str, ShadowAttack], *,
                   max_fprs: tuple[float, ...] = DEFAULT_MAX_FPRS, n_bootstrap: int = 1000, seed: int = 0,
                   source: str = "shadow farm") -> LiraReport:
    """Leave-one-out scores of every variant, and metrics on the candidates and the canaries among `kinds`."""
    if len(kinds) != losses.shape[1]:
        raise ValueError(f"kinds has {len(kinds)} entries but the losses cover {losses.shape[1]} texts.")
    keep = np.asarray(keep, bool)
    trained = np.flatnonzero(keep.any(axis=0))  # LiRA needs IN models; population texts serve RMIA only
    scores, notes = {}, {}
    for name, attack in variants.items():
        columns = slice(None) if isinstance(attack, RMIA) else trained
        scores[name] = np.full(keep.shape, np.nan)
        scores[name][:, columns], fold_notes = leave_one_out(attack, losses[:, columns], keep[:, columns], seed)
        notes |= dict.fromkeys(f"{name}: {note}" for note in fold_notes)
    report = LiraReport(source, {name: _settings(a) for name, a in variants.items()}, {}, scores, keep,
                        list(kinds), list(notes))
    for kind in REPORTED_KINDS:
        if kind in kinds:
            pooled, labels = report.pooled(kind)
            report.metrics[kind] = {name: evaluate_attack(labels, s, max_fprs=max_fprs, n_bootstrap=n_bootstrap,
                                                          seed=seed) for name, s in pooled.items()}
    return report


def _settings(attack: ShadowAttack) -> dict:
    """An attack's constructor settings as plain JSON values, with its class name."""
    fields = {f.name: getattr(attack, f.name) for f in dataclasses.fields(attack) if f.init}  # type: ignore[arg-type]
    return {"attack": type(attack).__name__,
            **{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in fields.items()}}
