"""`privft compare config.yaml`: full fine-tuning, LoRA ranks, SOFT rules and DP-LoRA on one split, audited alike.

Each cell is one `privft.pipeline.run_training` run (same split, canaries and audit settings; the
defence and its settings differ) written to `<output_dir>/cells/<slug>/`, with its table row in
`cell.json`. A rerun skips every cell whose `cell.json` exists for the same config, so an
interrupted comparison resumes where it stopped. The results go into one table
(`compare.md`, `compare.json`) and one privacy–utility plot (`compare.png`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from privft.audit import run_audit
from privft.config import save_yaml, to_dict
from privft.io import atomic_write_bytes, atomic_write_text
from privft.metrics import AttackMetrics
from privft.models import load_model
from privft.pipeline import RunConfig, RunResult, load_split, run_training
from privft.report import package_versions

MIN_PERPLEXITY_GAIN = 0.01
"""A cell whose validation perplexity is not at least 1 % below the pretrained model's did not learn."""

NO_TRAINING = "no meaningful training"
PRETRAINED = "pretrained (not fine-tuned)"


@dataclass
class GridSettings:
    """The cells beside the base run's plain LoRA (`run.training.lora`, always included).

    LoRA ranks keep the base alpha/rank ratio, so the adapters' scale does not change with rank.
    SOFT cells use `run.soft` with each rule; DP-LoRA cells use `run.dp` with each ε.
    """

    full_finetune: bool = True
    lora_ranks: tuple[int, ...] = (4, 64)
    soft_rules: tuple[str, ...] = ("paper", "release")
    dp_epsilons: tuple[float, ...] = (0.1, 1.0, 8.0)
    full_learning_rate: float | None = None  # None: run.training.learning_rate (full fine-tuning often wants less)
    dp_learning_rate: float | None = None  # None: run.training.learning_rate (DP-SGD often wants more)


@dataclass
class CompareConfig:
    """A comparison: the base run (model, data, training, canaries, SOFT paraphraser, DP bounds, audit) and the grid."""

    run: RunConfig = field(default_factory=RunConfig)
    grid: GridSettings = field(default_factory=GridSettings)
    output_dir: str = "runs/compare"


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    name: str  # shown in the table, e.g. "DP-LoRA ε=1 (r=16)"
    family: str  # "full", "lora", "soft" or "dp"
    config: RunConfig

    @property
    def slug(self) -> str:
        """The cell's folder name."""
        return slug(self.name)


def slug(name: str) -> str:
    """A folder name for a cell name: "DP-LoRA ε=0.1 (r=16)" → "dp-lora-eps-0.1-r-16"."""
    return re.sub(r"[^a-z0-9.]+", "-", name.lower().replace("ε", "eps")).strip("-")


def grid_cells(config: CompareConfig) -> list[Cell]:
    """Every cell: the pretrained model (audited, not trained), plain LoRA at the base rank, then the grid.

    The base run's own defences (`run.soft.rule`, `run.dp.target_epsilon`) are ignored.
    """
    run, grid = config.run, config.grid
    lora = run.training.lora
    if lora is None:
        raise ValueError("run.training.lora is null, but the grid needs a LoRA reference: set run.training.lora (its "
                         "rank is the plain-LoRA baseline the overheads are measured against).")
    cells_dir = Path(config.output_dir) / "cells"
    base = dataclasses.replace(run, soft=dataclasses.replace(run.soft, rule=None),
                               dp=dataclasses.replace(run.dp, target_epsilon=None))

    def cell(name: str, family: str, training: dict[str, Any] | None = None, **changes: Any) -> Cell:
        training = dataclasses.replace(base.training, **(training or {}), output_dir=str(cells_dir / slug(name)))
        return Cell(name, family, dataclasses.replace(base, training=training, **changes))

    def with_rank(rank: int):
        return dataclasses.replace(lora, rank=rank, alpha=max(1, round(lora.alpha * rank / lora.rank)))

    cells = [cell(PRETRAINED, "pretrained"), cell(f"LoRA r={lora.rank}", "lora")]
    cells += [cell(f"LoRA r={r}", "lora", training={"lora": with_rank(r)})
              for r in sorted(set(grid.lora_ranks) - {lora.rank})]
    if grid.full_finetune:
        cells.append(cell("full fine-tuning", "full", training={
            "lora": None, "learning_rate": grid.full_learning_rate or base.training.learning_rate}))
    for rule in grid.soft_rules:
        select_ratio = run.soft.select_ratio if rule == "release" else None  # the paper rule takes none
        soft = dataclasses.replace(run.soft, rule=rule, select_ratio=select_ratio)
        cells.append(cell(f"SOFT {rule} (r={lora.rank})", "soft", soft=soft))
    for epsilon in sorted(grid.dp_epsilons, reverse=True):
        cells.append(cell(f"DP-LoRA ε={epsilon:g} (r={lora.rank})", "dp",
                          dp=dataclasses.replace(base.dp, target_epsilon=float(epsilon)),
                          training={"learning_rate": grid.dp_learning_rate or base.training.learning_rate}))
    return cells


def _attack_summary(metrics: AttackMetrics) -> dict[str, Any]:
    return {"auc": metrics.auc.auc, "auc_ci": [metrics.auc.ci_low, metrics.auc.ci_high],
            "tpr": [{"max_fpr": t.max_fpr, "tpr": t.tpr, "true_positives": t.true_positives,
                     "n_members": t.n_members} for t in metrics.tpr_at_fpr]}


def _mean_summary(attacks: dict[str, AttackMetrics]) -> dict[str, Any]:
    """Mean AUC and mean TPR over attacks; None where one is not estimable.

    The mean true-positive count is given only when every attack scored the same members (the
    Ensemble, or a text without neighbours, leaves some out); otherwise it and `n_members` are None.
    """
    metrics = list(attacks.values())
    tprs = []
    for i, first in enumerate(metrics[0].tpr_at_fpr):
        results = [m.tpr_at_fpr[i] for m in metrics]
        known = all(r.tpr is not None for r in results)
        common = len({r.n_members for r in results}) == 1
        tprs.append({"max_fpr": first.max_fpr, "n_members": first.n_members if common else None,
                     "tpr": sum(r.tpr for r in results) / len(results) if known else None,
                     "true_positives": (sum(r.true_positives for r in results) / len(results)
                                        if known and common else None)})
    return {"auc": sum(m.auc.auc for m in metrics) / len(metrics), "tpr": tprs}


def cell_row(cell: Cell, result: RunResult) -> dict[str, Any]:
    """The table row of a finished cell: strongest attack (highest AUC), mean over attacks, utility, cost."""
    report = result.report
    strongest = max(report.attacks, key=lambda name: report.attacks[name].auc.auc)
    privacy = result.privacy or {}
    return {
        "name": cell.name, "family": cell.family, "config": to_dict(cell.config),
        "epsilon": privacy.get("epsilon"), "delta": privacy.get("delta"), "privacy": result.privacy,
        "strongest_attack": strongest, "strongest": _attack_summary(report.attacks[strongest]),
        "mean_over_attacks": _mean_summary(report.attacks), "attacks": sorted(report.attacks),
        "perplexity": report.perplexity.value, "perplexity_on": report.perplexity.on,
        "blind_baseline_auc": report.blind_baseline.auc.auc, "distribution_shift": report.distribution_shift,
        "canary_exposure": report.canary_exposure, "train_seconds": result.train_seconds,
        "split": report.split, "report": str(result.output_dir / "report.json"),
    }


def audit_pretrained(config: RunConfig) -> RunResult:
    """The same audit of the base model itself, its own reference: the leakage floor no training can go below.

    Members were never trained on, so every attack's AUC here measures chance, the split and what
    the pretrained model already knew; reference attacks compare the model with itself (AUC 0.5).
    """
    out = Path(config.training.output_dir)
    split = load_split(config.data)
    model, tokenizer = load_model(config.model)
    report = run_audit(model, tokenizer, split, reference=model, config=config.audit, model_name=config.model)
    report.save(out)
    return RunResult(report, out, train_seconds=0.0)


@dataclass
class Comparison:
    """The finished grid: one row per cell (the pretrained model first), and which cells ran in this call."""

    rows: list[dict[str, Any]]
    ran: list[str]
    output_dir: Path

    @property
    def pretrained_perplexity(self) -> float:
        """Validation perplexity of the base model before any fine-tuning."""
        return next(row["perplexity"] for row in self.rows if row["family"] == "pretrained")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: rows, reference perplexity, the no-training criterion and versions."""
        return {"pretrained_perplexity": self.pretrained_perplexity,
                "no_meaningful_training": f"validation perplexity not at least {MIN_PERPLEXITY_GAIN:.0%} below the "
                                          "pretrained model's", "rows": self.rows, "versions": package_versions()}


def _finish_rows(rows: list[dict[str, Any]], reference_perplexity: float) -> None:
    """Add the overhead against plain LoRA at the base rank (the first LoRA row) and the no-training flag."""
    baseline = next(row["train_seconds"] for row in rows if row["family"] == "lora")
    for row in rows:
        trained = row["family"] != "pretrained"
        row["overhead_vs_lora"] = row["train_seconds"] / baseline if trained and baseline > 0 else None
        row["learned"] = not trained or row["perplexity"] < reference_perplexity * (1 - MIN_PERPLEXITY_GAIN)


def run_compare(config: CompareConfig) -> Comparison:
    """Run (or resume) every cell, then write compare.json, compare.md and compare.png into `output_dir`."""
    out = Path(config.output_dir)
    save_yaml(config, out / "compare.yaml")
    cells = grid_cells(config)
    rows, ran = [], []
    for cell in cells:
        path = out / "cells" / cell.slug / "cell.json"
        if path.exists():
            row = json.loads(path.read_text(encoding="utf-8"))
            if row["config"] != to_dict(cell.config):
                raise ValueError(f"{path} was produced by a different config for cell {cell.name!r}; use a new "
                                 "output_dir, or delete that cell's folder to re-run it.")
        else:
            result = audit_pretrained(cell.config) if cell.family == "pretrained" else run_training(cell.config)
            row = cell_row(cell, result)
            atomic_write_text(path, json.dumps(row, indent=1))
            ran.append(cell.name)
        rows.append(row)
    splits = {json.dumps(row["split"], sort_keys=True) for row in rows}
    if len(splits) != 1:
        raise ValueError("The cells were audited on different splits; every cell must share run.data.")
    comparison = Comparison(rows, ran, out)
    _finish_rows(comparison.rows, comparison.pretrained_perplexity)
    atomic_write_text(out / "compare.json", json.dumps(comparison.to_dict(), indent=1))
    atomic_write_text(out / "compare.md", comparison_table(comparison))
    atomic_write_bytes(out / "compare.png", privacy_utility_png(comparison))
    return comparison


def _rate(tpr: dict[str, Any], mean: bool = False) -> str:
    if tpr["tpr"] is None:
        return "not estimable"
    if tpr["n_members"] is None:
        return f"{tpr['tpr']:.3f} (attacks scored different members)"
    count = f"{tpr['true_positives']:.1f}" if mean else f"{tpr['true_positives']}"
    return f"{tpr['tpr']:.3f} ({'mean ' if mean else ''}{count}/{tpr['n_members']})"


def comparison_table(comparison: Comparison) -> str:
    """The Markdown table: one row per cell, counts beside every rate, notes below."""
    rows = comparison.rows
    fprs = [t["max_fpr"] for t in rows[0]["strongest"]["tpr"]]
    fpr_names = [f"{f * 100:g} %" for f in fprs]
    header = ["Cell", "ε (δ)", "Strongest attack: AUC [95 % CI]", *[f"TPR@{f}" for f in fpr_names],
              "Mean AUC", *[f"Mean TPR@{f}" for f in fpr_names], "Val. ppl", "Train s", "× LoRA", "Note"]
    split = rows[0]["split"]
    lines = [f"{split['n_members']} members vs {split['n_non_members']} non-members (split: {split['source']}, "
             f"seed {split['seed']}); every cell audited with the same attacks ({', '.join(rows[0]['attacks'])}). "
             f"Pretrained model: validation perplexity {comparison.pretrained_perplexity:.2f}.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        s, m = row["strongest"], row["mean_over_attacks"]
        epsilon = f"{row['epsilon']:.3g} ({row['delta']:.0e})" if row["epsilon"] is not None else "∞"
        if row["family"] == "pretrained":
            epsilon = "0 (not trained)"
        notes = ([] if row["learned"] else [NO_TRAINING]) + (["⚠ distribution shift"] if row["distribution_shift"]
                                                             else [])
        overhead = f"{row['overhead_vs_lora']:.2f}" if row["overhead_vs_lora"] is not None else "n/a"
        cells = [row["name"], epsilon,
                 f"{row['strongest_attack']} {s['auc']:.3f} [{s['auc_ci'][0]:.2f}, {s['auc_ci'][1]:.2f}]",
                 *[_rate(t) for t in s["tpr"]], f"{m['auc']:.3f}", *[_rate(t, mean=True) for t in m["tpr"]],
                 f"{row['perplexity']:.2f}", f"{row['train_seconds']:.0f}", overhead, "; ".join(notes)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "TPR cells: rate (true positives / members) at the best threshold whose FPR stays within the "
                  "ceiling on the evaluated non-members; the strongest attack is picked after the fact, which "
                  "flatters it; mean cells average rate and count over the attacks. ε is the PRV bound spent by "
                  "DP-LoRA (∞: no DP guarantee). × LoRA: training time over plain LoRA at the base rank (audits "
                  "excluded, and so is SOFT's paraphrasing, done once before training and cached). "
                  f"{NO_TRAINING}: validation perplexity not at least {MIN_PERPLEXITY_GAIN:.0%} below the "
                  "pretrained model's."]
    return "\n".join(lines) + "\n"


FAMILY_STYLE = {"pretrained": ("grey", "*"), "lora": ("tab:blue", "o"), "full": ("tab:red", "s"),
                "soft": ("tab:green", "^"), "dp": ("tab:purple", "D")}


def privacy_utility_png(comparison: Comparison) -> bytes:
    """TPR at the first FPR ceiling (strongest attack) against validation perplexity, one labelled point per cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = comparison.rows[0]["strongest"]["tpr"][0]
    fig, ax = plt.subplots(figsize=(7, 5))
    for index, row in enumerate(comparison.rows):
        tpr = row["strongest"]["tpr"][0]["tpr"]
        if tpr is None or not math.isfinite(row["perplexity"]):
            continue
        color, marker = FAMILY_STYLE[row["family"]]
        ax.scatter(row["perplexity"], tpr, color=color, marker=marker, s=50,
                   facecolors="none" if not row["learned"] else color)
        ax.annotate(row["name"], (row["perplexity"], tpr), fontsize=7, xytext=(4, 3 + 9 * (index % 3)),
                    textcoords="offset points")  # staggered: cells at the same point stay readable
    ax.axhline(first["max_fpr"], color="grey", linestyle="--", label="chance (TPR = FPR ceiling)")
    ax.set(xlabel="validation perplexity (lower = more useful)",
           ylabel=f"TPR @ FPR ≤ {first['max_fpr'] * 100:g} %, strongest attack ({first['n_members']} members)",
           title="Privacy–utility: each cell audited on the same split")
    ax.legend(fontsize=7, loc="upper right")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
