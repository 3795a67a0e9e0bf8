"""`privft compare config.yaml`: full fine-tuning, LoRA ranks, SOFT rules and DP-LoRA on one split, audited alike.

Each cell is one `privft.pipeline.run_training` run (same split, canaries and audit settings; the
defence and its settings differ) written to `<cells_dir>/<slug>/` (default `<output_dir>/cells`),
with its table row in `cell.json`. A rerun skips every cell whose `cell.json` exists for the same config and
data, so an interrupted comparison resumes where it stopped. The results go into one table
(`compare.md`, `compare.json`), one privacy–utility plot (`compare.png`) and, with two LoRA
ranks or more, the rank curve (`compare-rank.png`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from transformers import PreTrainedModel, TrainerCallback

from privft.audit import run_audit
from privft.clock import CPU_NOT_RECORDED, Clock, cpu_model
from privft.config import config_changes, describe_changes, from_dict, save_yaml, to_dict
from privft.cpu_reference import CpuReference
from privft.data import MembershipSplit
from privft.defend.rules import get_rule
from privft.io import atomic_write_bytes, atomic_write_text
from privft.metrics import (
    AccuracyResult,
    AttackMetrics,
    evaluate_attack,
    paired_auc_difference,
    paired_perplexity_ratio,
    wilson_interval,
)
from privft.models import load_model
from privft.paper.adaptive import adaptive_scores
from privft.paraphrase import ParaphraseCache
from privft.pipeline import (
    RunConfig,
    RunResult,
    check_canary_room,
    load_split,
    record_rendering_of,
    run_training,
    soft_paraphraser,
)
from privft.report import package_versions
from privft.run_folder import changed_sides, recorded_hashes
from privft.scoring import StatsCache, start_token_rule, whole_records_cached
from privft.scoring.render import rendering_context
from privft.training_record import times_partial
from privft.tune import TuneSettings, check_tunable, grid_table, recorded_first_candidate, run_tuned

MIN_PERPLEXITY_GAIN = 0.01
"""A cell whose validation perplexity is not at least 1 % below the pretrained model's did not learn."""

NO_TRAINING = "no meaningful training"
HELD_OUT_NOTE = ("Test ppl: corpus perplexity on the split's test texts, which neither training, nor the audit, nor "
                 "SOFT's threshold, nor tuning read; test ppl ÷ {label}'s pairs it with the baseline's as above. Task "
                 "accuracy: the share of held-out tickets (the test side, else validation) whose greedy reply gives "
                 "the ticket's fix and no other, with a Wilson 95 % interval and counts; the pretrained row is the "
                 "base model's.")
PRETRAINED = "pretrained (not fine-tuned)"


@dataclass
class CellSpec:
    """A named cell of its own: the base run (no defence) with the settings in `set` changed.

    Keys are dotted paths into `RunConfig`, e.g. ``{"soft.rule": "release", "soft.mode": "rewrite-only"}``;
    they are checked like the YAML's own keys. With `tune`, the cell chooses its learning rate and epoch by
    validation loss and audits that checkpoint (`privft.tune`).
    """

    name: str
    family: str = "soft"  # the plot's colour group: "lora", "full", "soft", "dp" or "goldfish"
    set: dict[str, Any] = field(default_factory=dict)
    tune: TuneSettings | None = None  # None: one run at the cell's training.learning_rate and epochs


@dataclass
class AdaptiveSettings:
    """The adaptive attackers who know the defence (`privft.paper.adaptive`), run on every trained cell.

    They score a seeded subsample of the split (their rewrites cost a paraphrase per text);
    0 members turns them off.
    """

    n_members: int = 0
    n_non_members: int = 0
    attacker_fraction: float = 0.3  # the attacker's guess at a word-swap paraphraser's swap fraction
    seed: int = 0


@dataclass
class GridSettings:
    """The cells beside the base run's plain LoRA (`run.training.lora`, included unless `untuned_lora` is false).

    LoRA ranks keep the base alpha/rank ratio, so the adapters' scale does not change with rank.
    SOFT cells use `run.soft` with each rule; DP-LoRA cells use `run.dp` with each ε.
    """

    full_finetune: bool = True
    lora_ranks: tuple[int, ...] = (4, 64)
    soft_rules: tuple[str, ...] = ("paper", "release")
    dp_epsilons: tuple[float, ...] = (0.1, 1.0, 8.0)
    full_learning_rate: float | None = None  # None: run.training.learning_rate (full fine-tuning often wants less)
    dp_learning_rate: float | None = None  # None: run.training.learning_rate (DP-SGD often wants more)
    cells: tuple[CellSpec, ...] = ()  # further cells, each the base run with a few settings changed
    adaptive: AdaptiveSettings = field(default_factory=AdaptiveSettings)
    # Conversational records: also audit each cell's prompt tokens (which it did not train on) into <cell>/prompt-side/,
    # from the forward passes of its own audit when run.audit.cache_dir is set (`whole_records_cached`).
    prompt_side: bool = False
    # The cell every other is measured against (paired ΔAUC and perplexity ratios, gain kept, × cost), by name, e.g.
    # "LoRA r=16, tuned": the undefended model at its best. None: plain LoRA at the base rank. Until it has finished,
    # the table measures against plain LoRA and says so.
    baseline: str | None = None
    # False: no one-run plain-LoRA cell at the base rank (a grid that needs only its tuned row, e.g. a second seed);
    # `baseline` must then name a cell, which takes that cell's place right after the pretrained row.
    untuned_lora: bool = True


@dataclass
class CompareConfig:
    """A comparison: the base run (model, data, training, canaries, SOFT paraphraser, DP bounds, audit) and the grid."""

    run: RunConfig = field(default_factory=RunConfig)
    grid: GridSettings = field(default_factory=GridSettings)
    output_dir: str = "runs/compare"
    cells_dir: str | None = None  # None: <output_dir>/cells; give two grids one folder to share their common cells
    # A CpuReference file (privft.cpu_reference): converts the cost of a row trained on another CPU than the baseline
    # to the baseline's CPU. None: such a row's cost is marked as not comparable.
    cpu_reference: str | None = None

    @property
    def cells_path(self) -> Path:
        """Where the cells' run folders live."""
        return Path(self.cells_dir) if self.cells_dir else Path(self.output_dir) / "cells"


@dataclass(frozen=True)
class Cell:
    """One run of the grid."""

    name: str  # shown in the table, e.g. "DP-LoRA ε=1 (r=16)"
    family: str  # "full", "lora", "soft", "dp" or "goldfish"
    config: RunConfig
    tune: TuneSettings | None = None  # the learning rates it is tuned over, or None for one run

    @property
    def slug(self) -> str:
        """The cell's folder name."""
        return slug(self.name)


def slug(name: str) -> str:
    """A folder name for a cell name: "DP-LoRA ε=0.1 (r=16)" → "dp-lora-eps-0.1-r-16"."""
    return re.sub(r"[^a-z0-9.]+", "-", name.lower().replace("ε", "eps")).strip("-")


def grid_cells(config: CompareConfig) -> list[Cell]:
    """Every cell: the pretrained model (audited, not trained), plain LoRA at the base rank, then the grid.

    With `grid.untuned_lora` false, the cell `grid.baseline` names comes second instead of plain LoRA: the first two
    cells are the reference every table needs, and run first.

    The base run's own defences (`run.soft.rule`, `run.dp.target_epsilon`, `run.goldfish.k`) are ignored
    (a cell turns one on, e.g. ``{name: Goldfish k=4, family: goldfish, set: {goldfish.k: 4}}``). Unless
    `run.audit.cache_dir` says otherwise, every cell caches its token statistics in one folder
    beside the cells, so the base model's passes (the pretrained row, every LoRA cell's
    reference) are computed once per grid.
    """
    run, grid = config.run, config.grid
    lora = run.training.lora
    if lora is None:
        raise ValueError("run.training.lora is null, but the grid needs a LoRA reference: set run.training.lora (its "
                         "rank is the plain-LoRA baseline the overheads are measured against).")
    cells_dir = config.cells_path
    audit = run.audit if run.audit.cache_dir else dataclasses.replace(run.audit,
                                                                      cache_dir=str(cells_dir.parent / "stats-cache"))
    base = dataclasses.replace(run, soft=dataclasses.replace(run.soft, rule=None),
                               dp=dataclasses.replace(run.dp, target_epsilon=None),
                               goldfish=dataclasses.replace(run.goldfish, k=None), audit=audit)

    def cell(name: str, family: str, training: dict[str, Any] | None = None, **changes: Any) -> Cell:
        training = dataclasses.replace(base.training, **(training or {}), output_dir=str(cells_dir / slug(name)))
        return Cell(name, family, dataclasses.replace(base, training=training, **changes))

    def with_rank(rank: int):
        return dataclasses.replace(lora, rank=rank, alpha=max(1, round(lora.alpha * rank / lora.rank)))

    cells = [cell(PRETRAINED, "pretrained")] + ([cell(f"LoRA r={lora.rank}", "lora")] if grid.untuned_lora else [])
    cells += [cell(f"LoRA r={r}", "lora", training={"lora": with_rank(r)})
              for r in sorted(set(grid.lora_ranks) - {lora.rank})]
    if grid.full_finetune:
        cells.append(cell("full fine-tuning", "full", training={
            "lora": None, "learning_rate": grid.full_learning_rate or base.training.learning_rate}))
    for rule in grid.soft_rules:
        select_ratio = run.soft.select_ratio if get_rule(rule).takes_select_ratio else None
        soft = dataclasses.replace(run.soft, rule=rule, select_ratio=select_ratio)
        cells.append(cell(f"SOFT {rule} (r={lora.rank})", "soft", soft=soft))
    for epsilon in sorted(grid.dp_epsilons, reverse=True):
        cells.append(cell(f"DP-LoRA ε={epsilon:g} (r={lora.rank})", "dp",
                          dp=dataclasses.replace(base.dp, target_epsilon=float(epsilon)),
                          training={"learning_rate": grid.dp_learning_rate or base.training.learning_rate}))
    for spec in grid.cells:
        cells.append(_named_cell(spec, dataclasses.replace(
            base, training=dataclasses.replace(base.training, output_dir=str(cells_dir / slug(spec.name))))))
    names = [c.name for c in cells]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"Cell name(s) {repeated} appear twice in the grid; give grid.cells unique names.")
    if grid.baseline is not None and grid.baseline not in names:
        raise ValueError(f"grid.baseline names {grid.baseline!r}, which is not a cell of this grid; its cells "
                         f"are: {', '.join(map(repr, names))}.")
    if not grid.untuned_lora:
        if grid.baseline is None:
            raise ValueError("grid.untuned_lora is false, so the grid has no plain-LoRA cell to measure the others "
                             "against: name the cell that is the reference in grid.baseline (e.g. \"LoRA r=16, "
                             "tuned\"), or set grid.untuned_lora: true.")
        reference = names.index(grid.baseline)
        cells.insert(1, cells.pop(reference))
    folders: dict[str, str] = {}
    for each in cells:
        other = folders.setdefault(each.slug, each.name)
        if other != each.name:
            raise ValueError(f"Cells {other!r} and {each.name!r} would share one folder, {cells_dir / each.slug} "
                             "(folder names ignore case and punctuation); rename one of them in grid.cells.")
    return cells


def _named_cell(spec: CellSpec, base: RunConfig) -> Cell:
    """`base` with `spec.set`'s dotted keys changed, checked as the YAML's keys are."""
    if spec.family not in FAMILY_STYLE or spec.family == "pretrained":
        raise ValueError(f"grid.cells {spec.name!r}: family={spec.family!r} must be one of "
                         f"{sorted(set(FAMILY_STYLE) - {'pretrained'})}.")
    data = to_dict(base)
    for key, value in spec.set.items():
        *parents, leaf = key.split(".")
        node = data
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise ValueError(f"grid.cells {spec.name!r}: {key!r} is not a setting of the run (no {part!r}).")
            node = node[part]
        if leaf not in node:
            raise ValueError(f"grid.cells {spec.name!r}: {key!r} is not a setting of the run; valid keys under "
                             f"{'.'.join(parents) or 'the run'}: {sorted(node)}.")
        node[leaf] = value
    try:
        cell = Cell(spec.name, spec.family, from_dict(RunConfig, data, where=f"grid.cells {spec.name!r}"), spec.tune)
    except ValueError as error:
        raise ValueError(f"grid.cells {spec.name!r}: {error}") from None
    if spec.tune is not None:
        check_tunable(cell.config, f"grid.cells {spec.name!r}")
    split = {f"data.{key}": change for key, change in base.data.split_changes(cell.config.data).items()}
    if split:
        raise ValueError(f"grid.cells {spec.name!r} sets {describe_changes(split)}, which draws another split than "
                         "the grid's run.data: its row would not compare with the others. Drop that key from the "
                         "cell, or give the changed data a grid of its own (run.data, another output_dir).")
    return cell


def _attack_summary(metrics: AttackMetrics) -> dict[str, Any]:
    return {"auc": metrics.auc.auc, "auc_ci": [metrics.auc.ci_low, metrics.auc.ci_high],
            "tpr": [{"max_fpr": t.max_fpr, "tpr": t.tpr, "true_positives": t.true_positives,
                     "n_members": t.n_members, "n_non_members": t.n_non_members, "fpr_upper": t.fpr_upper}
                    for t in metrics.tpr_at_fpr]}


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
        "test_perplexity": report.test_perplexity.value if report.test_perplexity else None,
        "task_accuracy": report.task_accuracy.accuracy.to_dict() if report.task_accuracy else None,
        "task_accuracy_on": report.task_accuracy.on if report.task_accuracy else None,
        "blind_baseline_auc": report.blind_baseline.auc.auc,
        "blind_baseline_ci": [report.blind_baseline.auc.ci_low, report.blind_baseline.auc.ci_high],
        "distribution_shift": report.distribution_shift,
        "canary_exposure": report.canary_exposure, "train_seconds": result.train_seconds,
        "train_cpu_seconds": result.train_cpu_seconds, "resumed_from": result.resumed_from,
        "times_partial": result.times_partial, "cpus": [] if cell.family == "pretrained" else [cpu_model()],
        "split": report.split, "report": str(result.output_dir / "report.json"),
    }


PROMPT_SIDE = "prompt-side"  # a cell's prompt-side audit, beside its own report


def audit_prompt_side(cell: Cell, result: RunResult) -> Path:
    """Audit a finished cell's model on the prompt tokens of its split, which no cell trains on, into
    `<cell>/prompt-side/`: the cell's attacks and settings, without extraction or task accuracy (they read replies).

    Under `whole_records_cached` with the cell's own cache, its audit's passes serve this one: no forward pass.
    """
    out = result.output_dir
    model_path = cell.config.model if cell.family == "pretrained" else str(out / "model")
    if cell.family != "pretrained" and not Path(model_path).is_dir():
        raise FileNotFoundError(f"{model_path} does not exist: the prompt side audits the cell's saved model.")
    model, tokenizer = load_model(model_path)
    config = dataclasses.replace(cell.config.audit, scored="prompt", extraction=None, task=None,
                                 dataset_inference=False)
    report = run_audit(model, tokenizer, MembershipSplit.load(out / "split.json"), config=config,
                       model_name=model_path)
    report.save(out / PROMPT_SIDE)
    return out / PROMPT_SIDE


def audit_pretrained(config: RunConfig) -> RunResult:
    """The same audit of the base model itself, its own reference: the leakage floor no training can go below.

    Members were never trained on, so every attack's AUC here measures chance, the split and what
    the pretrained model already knew; reference attacks compare the model with itself (AUC 0.5).
    """
    out = Path(config.training.output_dir)
    split = load_split(config.data)
    model, tokenizer = load_model(config.model)
    report = run_audit(model, tokenizer, split, reference=model, config=config.audit, model_name=config.model)
    split.save(out / "split.json")  # the texts it audited, which a rerun checks the data against
    report.save(out)
    return RunResult(report, out, train_seconds=0.0, train_cpu_seconds=0.0)


@dataclass
class Comparison:
    """The finished grid: one row per cell (the pretrained model first), and which cells ran in this call."""

    rows: list[dict[str, Any]]
    ran: list[str]
    output_dir: Path
    pending: list[str] = field(default_factory=list)  # cells not yet run, when the table is partial
    requested_baseline: str | None = None  # grid.baseline: the cell the others are measured against
    cpu_reference: CpuReference | None = None  # converts costs between the CPUs the rows were trained on

    @property
    def baseline(self) -> dict[str, Any]:
        """The row the others are measured against: the requested baseline once finished, else plain LoRA (a grid
        without it has its baseline second: it always finishes before any table is written)."""
        named = [row for row in self.rows if row["name"] == self.requested_baseline]
        return named[0] if named else next(row for row in self.rows if row["family"] == "lora")

    @property
    def measures_against_requested(self) -> bool:
        """Whether the rows are measured against grid.baseline (named and finished), not the plain-LoRA fall-back."""
        return self.requested_baseline is not None and self.baseline["name"] == self.requested_baseline

    @property
    def baseline_label(self) -> str:
        """The baseline as the table's headers name it: its cell name, or "LoRA" for the plain-LoRA fall-back."""
        return self.baseline["name"] if self.measures_against_requested else "LoRA"

    @property
    def pretrained_perplexity(self) -> float:
        """Validation perplexity of the base model before any fine-tuning."""
        return next(row["perplexity"] for row in self.rows if row["family"] == "pretrained")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: rows, reference perplexity, the no-training criterion and versions."""
        return {"pretrained_perplexity": self.pretrained_perplexity, "baseline": self.baseline["name"],
                "no_meaningful_training": f"validation perplexity not at least {MIN_PERPLEXITY_GAIN:.0%} below the "
                                          "pretrained model's", "rows": self.rows, "versions": package_versions()}


class AdaptiveAudit(TrainerCallback):
    """At the end of training, the two adaptive attackers on a seeded subsample of the cell's split."""

    def __init__(self, config: RunConfig, settings: AdaptiveSettings) -> None:
        self.config, self.settings = config, settings
        self.result: dict[str, Any] | None = None
        self.clock = Clock()  # the attackers' own time (their rewrites included), kept out of the training time

    def on_train_end(self, args: Any, state: Any, control: Any, model: PreTrainedModel | None = None,
                     processing_class: Any = None, **kwargs: Any) -> None:
        """Score the subsample with the non-adaptive Ratio attack and both adaptive attackers."""
        with self.clock.span():
            self.result = self._attack(model, processing_class)

    def _attack(self, model: PreTrainedModel, tokenizer: Any) -> dict[str, Any]:
        """Each attacker's AUC and TPR on the subsample."""
        config, settings = self.config, self.settings
        split = load_split(config.data)
        rng = np.random.default_rng(settings.seed)
        members = sorted(rng.choice(len(split.members), settings.n_members, replace=False))
        non_members = sorted(rng.choice(len(split.non_members), settings.n_non_members, replace=False))
        texts = [split.members[i] for i in members] + [split.non_members[i] for i in non_members]
        labels = np.repeat([1, 0], [len(members), len(non_members)])
        swaps = {"fraction": settings.attacker_fraction} if config.soft.paraphraser == "neighbour" else {}
        reference = load_model(config.model)[0]
        cache = StatsCache(config.audit.cache_dir) if config.audit.cache_dir else None
        scores = adaptive_scores(model.eval(), reference, tokenizer, texts, soft_paraphraser(config, **swaps),
                                 prefix_keep_ratio=config.soft.prefix_keep_ratio, cache=cache,
                                 paraphrase_cache=ParaphraseCache.default(),
                                 batch_size=config.audit.batch_size)
        return {name: _attack_summary(evaluate_attack(labels, values, max_fprs=config.audit.max_fprs,
                                                      n_bootstrap=config.audit.n_bootstrap, seed=config.audit.seed))
                for name, values in scores.items()}


def _finish_rows(rows: list[dict[str, Any]], reference_perplexity: float, baseline: dict[str, Any],
                 cpu_reference: CpuReference | None = None) -> None:
    """Add, against the `baseline` row (`Comparison.baseline`), the overhead, the paired AUC and perplexity
    comparisons and the share of its perplexity gain each cell keeps,
    (ppl_pretrained − ppl_cell) / (ppl_pretrained − ppl_baseline); the no-training flag; and the cost on the
    baseline's CPU of a row trained on another (`cost_on_baseline_cpu`, where `cpu_reference` covers both). The keys
    keep their historical names (`vs_lora`, `overhead_vs_lora`, ...): compare.json's `baseline` names the row they
    compare with."""
    gain = reference_perplexity - baseline["perplexity"]
    for row in rows:
        trained = row["family"] != "pretrained"
        on_cpu = bool(row.get("train_cpu_seconds") and baseline.get("train_cpu_seconds"))
        row["cost_on_baseline_cpu"] = converted = (_cost_on_baseline_cpu(row, baseline, cpu_reference) if on_cpu
                                                   else None)
        row["overhead_measure"] = "converted cpu" if converted else "cpu" if on_cpu else "wall"
        key = "train_cpu_seconds" if on_cpu else "train_seconds"
        seconds = converted["cpu_seconds"] if converted else row[key]
        row["overhead_vs_lora"] = seconds / baseline[key] if trained and baseline[key] > 0 else None
        row["learned"] = not trained or row["perplexity"] < reference_perplexity * (1 - MIN_PERPLEXITY_GAIN)
        row["gain_share"] = (reference_perplexity - row["perplexity"]) / gain if trained and gain > 0 else None
    saved = [json.loads(Path(row["report"]).read_text(encoding="utf-8")) for row in rows]  # each read once
    reference = saved[rows.index(baseline)]
    for row, report in zip(rows, saved, strict=True):
        held_out = report["perplexity"]
        measured = held_out.get("ci_low") is not None  # reports before per-text losses were kept have no interval
        row["perplexity_ci"] = [held_out["ci_low"], held_out["ci_high"]] if measured else None
        paired = row is not baseline and report["per_text"]["sha256"] == reference["per_text"]["sha256"]
        row["vs_lora"] = (_paired_vs(reference["per_text"], baseline["strongest_attack"], report["per_text"])
                          if paired else None)
        row["perplexity_vs_lora"] = _perplexity_vs(reference["perplexity"], held_out) if paired else None
        test = report.get("test_perplexity")  # the test side's, in reports of splits that have one
        row["test_perplexity_ci"] = [test["ci_low"], test["ci_high"]] if test else None
        row["test_perplexity_vs_lora"] = (_perplexity_vs(reference["test_perplexity"], test)
                                          if paired and test and reference.get("test_perplexity") else None)


def _cost_on_baseline_cpu(row: dict[str, Any], baseline: dict[str, Any], reference: CpuReference | None
                          ) -> dict[str, Any] | None:
    """The CPU seconds of a row (both it and the baseline have them) converted to the baseline's CPU; None where the
    row ran on the baseline's CPU, on more than one, or on a CPU the reference does not cover."""
    cpus, target = _cpus(row), _cpus(baseline)
    if reference is None or len(cpus) != 1 or len(target) != 1 or cpus == target:
        return None
    factor = reference.factor(cpus[0], target[0])
    if factor is None:
        return None
    return {"cpu": target[0], "factor": factor, "cpu_seconds": row["train_cpu_seconds"] * factor}


def _perplexity_vs(baseline: dict[str, Any], held_out: dict[str, Any]) -> dict[str, Any] | None:
    """The row's held-out perplexity over the baseline's, paired over the same texts; None without per-text losses
    (reports written before they were kept) or when the two tokenised the texts differently."""
    if not baseline.get("nll_sums") or not held_out.get("nll_sums") or \
            baseline["token_counts"] != held_out["token_counts"]:
        return None
    ratio = paired_perplexity_ratio(held_out["nll_sums"], baseline["nll_sums"], baseline["token_counts"])
    return {"ratio": ratio.ratio, "ci": [ratio.ci_low, ratio.ci_high], "significant": ratio.significant}


def _paired_vs(baseline: dict[str, Any], attack: str, per_text: dict[str, Any]) -> dict[str, Any] | None:
    """The row's AUC minus the baseline's on `attack`, paired over the split's texts (both reports' per_text)."""
    texts = [baseline, per_text]
    if attack not in texts[1]["scores"]:
        return None
    labels, (a, b) = np.array(texts[0]["label"]), (np.array(t["scores"][attack], dtype=float) for t in texts)
    scored = np.isfinite(a) & np.isfinite(b)
    difference = paired_auc_difference(labels[scored], a[scored], b[scored])
    return {"attack": attack, "difference": difference.difference, "ci": [difference.ci_low, difference.ci_high],
            "significant": difference.significant}


def finished_cell_config(cell_dir: Path) -> RunConfig:
    """The run config a finished cell folder's `cell.json` saved, with today's defaults for settings added since."""
    return from_dict(RunConfig, json.loads((cell_dir / "cell.json").read_text(encoding="utf-8"))["config"], saved=True)


def _finished_row(path: Path, cell: Cell) -> dict[str, Any] | None:
    """The row a finished cell saved, or None if it has not finished; a cell run with another config is refused.

    The saved config is read with today's defaults for settings added since, so a new option
    with its default value does not invalidate finished cells.
    """
    if not path.exists():
        return None
    row = json.loads(path.read_text(encoding="utf-8"))
    try:
        changes = describe_changes(config_changes(from_dict(RunConfig, row["config"], saved=True), cell.config))
    except (ValueError, TypeError) as error:  # a key this version no longer knows
        changes = f"a config this version cannot read: {error}"
    if changes:
        raise ValueError(f"{path} was produced by other settings for cell {cell.name!r} ({changes}). Restore them to "
                         "use the finished cell; to run the new settings beside it, give the grid another cells_dir "
                         "(or, for a cell of grid.cells, another name). The finished cell stays as it is.")
    recorded = row["tune"]["learning_rates"] if row.get("tune") else None
    if recorded != (list(cell.tune.learning_rates) if cell.tune else None):
        raise ValueError(f"{path} was tuned over learning rates {recorded} for cell {cell.name!r}, which is now "
                         f"tuned over {list(cell.tune.learning_rates) if cell.tune else None}. Restore its tune to use "
                         "the finished cell, or give the new tune another cell name (or cells_dir).")
    return row


def _check_same_data(config: CompareConfig, cells: list[Cell]) -> None:
    """Refuse a grid whose data changed since some of its cells ran, naming the data, changed sides and cells."""
    recorded = {cell.name: hashes for cell in cells
                if (hashes := recorded_hashes(Path(cell.config.training.output_dir))) is not None}
    if not recorded:
        return
    split = load_split(config.run.data)
    changed: dict[str, list[str]] = {}
    for name, hashes in recorded.items():
        sides = changed_sides(hashes, split)
        if sides:
            changed.setdefault(sides, []).append(name)
    if changed:
        found = "; ".join(f"other {sides} than cell(s) {', '.join(map(repr, names))} ran on"
                          for sides, names in changed.items())
        raise ValueError(f"The data changed since cells of {config.output_dir} ran: {split.source} now gives {found}. "
                         "Restore that data file to resume the grid, or give the new data a grid of its own (another "
                         "output_dir and cells_dir); the cells that ran stay as they are.")


def _runs(cell: Cell) -> int:
    """How many trainings a cell runs: one per learning rate of a tuned cell, else one (the pretrained row's audit)."""
    return len(cell.tune.learning_rates) if cell.tune else 1


def _progress(index: int, cells: list[Cell], todo: list[Cell], timed: list[tuple[Cell, float]]) -> str:
    """A progress line: which cell starts, and the grid's ETA from the cells timed so far in this call, a tuned cell
    weighing as one run per learning rate (a cell resumed part-way was timed for its rest alone, so it shortens the
    ETA)."""
    line = f"[privft compare] cell {index + 1}/{len(cells)}: {cells[index].name}"
    if timed:
        mean = sum(seconds for _, seconds in timed) / sum(_runs(cell) for cell, _ in timed)
        line += (f"; {len(todo)} cell(s) to run incl. this one, ETA {sum(map(_runs, todo)) * mean / 60:.0f} min "
                 f"(mean {mean / 60:.1f} min per training run so far)")
    return line


@contextlib.contextmanager
def cell_conditions(cell: Cell) -> Iterator[None]:
    """What a cell's training and audit run under: its start token and record rendering (the pretrained row and its
    adaptive attackers read them too)."""
    with start_token_rule(cell.config.start_token), rendering_context(record_rendering_of(cell.config)):
        yield


def cells_to_run(cells: list[Cell], only: Sequence[str] | None) -> list[Cell]:
    """The cells `only` names (all when None), always with the first two (pretrained, the reference) every table
    needs."""
    if only is None:
        return cells
    names = [cell.name for cell in cells]
    unknown = sorted(set(only) - set(names))
    if unknown:
        raise ValueError(f"No cell named {', '.join(map(repr, unknown))} in this grid; its cells are: "
                         f"{', '.join(map(repr, names))}.")
    return [cell for index, cell in enumerate(cells) if index < 2 or cell.name in only]


def run_compare(config: CompareConfig, *, finished_only: bool = False, only: Sequence[str] | None = None
                ) -> Comparison:
    """Run (or resume) the cells, then write compare.json, compare.md and compare.png into `output_dir`.

    Finished cells (their `cell.json` in the cells folder) are read, never recomputed. `only`
    names the cells to run in this call (the pretrained and plain-LoRA rows always run first);
    `finished_only` runs nothing. Either way the table holds every finished cell and names the pending ones.
    """
    out = Path(config.output_dir)
    cells = grid_cells(config)
    paths = [config.cells_path / cell.slug / "cell.json" for cell in cells]
    rows: list[dict[str, Any] | None] = [_finished_row(path, cell) for path, cell in zip(paths, cells)]
    _check_same_data(config, cells)
    if config.grid.prompt_side and load_split(config.run.data).format == "text":
        raise ValueError("grid.prompt_side audits the prompt tokens of conversational records, but this grid's data "
                         "are plain texts, which have no prompt; set grid.prompt_side: false, or use records "
                         "(data.format).")
    for cell in cells:
        try:
            check_canary_room(cell.config)
        except ValueError as error:
            raise ValueError(f"grid cell {cell.name!r}: {error}") from None
    chosen = [] if finished_only else cells_to_run(cells, only)
    todo = [cell for cell, row in zip(cells, rows) if row is None and cell in chosen]
    if finished_only and not all(rows[:2]):
        raise ValueError(f"The cells every table needs, {cells[0].name!r} and {cells[1].name!r}, of "
                         f"{config.output_dir} have not finished; run `privft compare` without --finished-only first.")
    cpu_reference = CpuReference.load(config.cpu_reference) if config.cpu_reference else None
    save_yaml(config, out / "compare.yaml")  # only once every check passed: a refused config replaces no record
    ran, timed = [], []
    for index, (cell, path) in enumerate(zip(cells, paths)):
        if cell not in todo:
            continue
        print(_progress(index, cells, todo, timed), flush=True)
        start = time.perf_counter()
        adaptive = AdaptiveAudit(cell.config, config.grid.adaptive) if config.grid.adaptive.n_members else None
        tuned = None  # a tuned cell's selection: its learning rate, epoch and grid
        with cell_conditions(cell), whole_records_cached() if config.grid.prompt_side else contextlib.nullcontext():
            if cell.family == "pretrained":
                result = audit_pretrained(cell.config)
            elif cell.tune is not None:
                result, tuned = run_tuned(cell.config, cell.tune, extra_callbacks=[adaptive] if adaptive else [])
            else:
                result = run_training(cell.config, extra_callbacks=[adaptive] if adaptive else [])
            if config.grid.prompt_side:
                audit_prompt_side(cell, result)
        timed.append((cell, time.perf_counter() - start))
        row = cell_row(cell, result)
        if adaptive:  # its attackers run at the end of training, inside the training clock: not training time
            row["train_seconds"] -= adaptive.clock.seconds
            row["train_cpu_seconds"] -= adaptive.clock.cpu_seconds
        if tuned:  # its cost is every learning rate's run: the audit resumes the chosen checkpoint and trains no step
            row.update({key: tuned[key] for key in ("train_seconds", "train_cpu_seconds", "resumed_from",
                                                    "times_partial", "cpus")})
        rows[index] = {**row, "tune": tuned, "adaptive": adaptive.result if adaptive else None,
                       "adaptive_seconds": adaptive.clock.seconds if adaptive else None, "cell_seconds": timed[-1][1]}
        atomic_write_text(path, json.dumps(rows[index], indent=1))
        todo.remove(cell)
        ran.append(cell.name)
        if index >= 1 and todo:  # the table needs the first two rows (pretrained, reference); commit as cells land
            _write_outputs(_comparison(cells, rows, ran, config, cpu_reference))
    return _write_outputs(_comparison(cells, rows, ran, config, cpu_reference))


def _comparison(cells: list[Cell], rows: list[dict[str, Any] | None], ran: list[str], config: CompareConfig,
                cpu_reference: CpuReference | None) -> Comparison:
    """The finished rows, in grid order, naming the cells still pending."""
    return Comparison([row for row in rows if row is not None], list(ran), Path(config.output_dir),
                      [cell.name for cell, row in zip(cells, rows) if row is None], config.grid.baseline,
                      cpu_reference)


def _write_outputs(comparison: Comparison) -> Comparison:
    """Check the rows share one split, finish them, and write compare.json, compare.md and compare.png."""
    out = comparison.output_dir
    first = comparison.rows[0]
    others = [row["name"] for row in comparison.rows if row["split"] != first["split"]]
    if others:
        raise ValueError(f"Cell(s) {', '.join(map(repr, others))} were audited on another split than "
                         f"{first['name']!r} ({first['split']}); every cell must share run.data.")
    _finish_rows(comparison.rows, comparison.pretrained_perplexity, comparison.baseline, comparison.cpu_reference)
    atomic_write_text(out / "compare.json", json.dumps(comparison.to_dict(), indent=1))
    atomic_write_text(out / "compare.md", comparison_table(comparison))
    atomic_write_bytes(out / "compare.png", privacy_utility_png(comparison))
    if len(_lora_rows(comparison.rows)) >= 2:
        atomic_write_bytes(out / "compare-rank.png", rank_curve_png(comparison))
    return comparison


def _rate(tpr: dict[str, Any], mean: bool = False) -> str:
    if tpr["tpr"] is None:
        return "not estimable"
    if tpr["n_members"] is None:
        return f"{tpr['tpr']:.3f} (attacks scored different members)"
    count = f"{tpr['true_positives']:.1f}" if mean else f"{tpr['true_positives']}"
    bound = f"; FPR ≤ {tpr['fpr_upper'] * 100:.2g} %" if tpr.get("fpr_upper") is not None else ""
    return f"{tpr['tpr']:.3f} ({'mean ' if mean else ''}{count}/{tpr['n_members']}{bound})"


def _delta(vs: dict[str, Any] | None) -> str:
    """A paired AUC difference against the baseline, marked when its interval excludes 0."""
    if vs is None:
        return "n/a"
    mark = " ✱" if vs["significant"] else ""
    return f"{vs['difference']:+.3f} [{vs['ci'][0]:+.3f}, {vs['ci'][1]:+.3f}]{mark}"


def _perplexity(row: dict[str, Any], key: str = "perplexity") -> str:
    """Validation (or `key`'s) perplexity, with its bootstrap interval where the report kept per-text losses."""
    if row.get(key) is None:
        return "n/a"
    ci = row.get(f"{key}_ci")
    return f"{row[key]:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _task_accuracy(row: dict[str, Any]) -> str:
    """Task accuracy with its Wilson interval and counts; n/a where the cell did not measure it."""
    return AccuracyResult(**row["task_accuracy"]).format() if row.get("task_accuracy") else "n/a"


def _held_out_columns(rows: list[dict[str, Any]], label: str) -> dict[str, Callable[[dict[str, Any]], str]]:
    """The test-side utility columns the rows measured, by header (`label` names the baseline): none for a grid
    without a test side or task."""
    columns: dict[str, Callable[[dict[str, Any]], str]] = {}
    if any(row.get("test_perplexity") is not None for row in rows):
        columns["Test ppl [95 % CI]"] = lambda row: _perplexity(row, "test_perplexity")
        columns[f"test ppl ÷ {label}'s [paired 95 % CI]"] = lambda row: _ratio(row.get("test_perplexity_vs_lora"))
    if any(row.get("task_accuracy") for row in rows):
        columns["Task accuracy [95 % CI] (k/n)"] = _task_accuracy
    return columns


def _ratio(vs: dict[str, Any] | None) -> str:
    """A paired perplexity ratio against the baseline, marked when its interval excludes 1."""
    if vs is None:
        return "n/a"
    return f"{vs['ratio']:.3f} [{vs['ci'][0]:.3f}, {vs['ci'][1]:.3f}]" + (" ✱" if vs["significant"] else "")


def _blind_baseline(row: dict[str, Any]) -> str:
    """The split's blind baseline (a text classifier that never sees a model), which guards every row."""
    ci = row.get("blind_baseline_ci")
    interval = f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
    verdict = "distribution shift: read no row as leakage" if row["distribution_shift"] else "near chance"
    return f"Blind baseline AUC {row['blind_baseline_auc']:.3f}{interval} ({verdict})."


def comparison_table(comparison: Comparison) -> str:
    """The Markdown table: one row per cell, counts beside every rate, notes below."""
    rows = comparison.rows
    fprs = [t["max_fpr"] for t in rows[0]["strongest"]["tpr"]]
    fpr_names = [f"{f * 100:g} %" for f in fprs]
    label, baseline = comparison.baseline_label, comparison.baseline
    held_out = _held_out_columns(rows, label)
    header = ["Cell", "ε (δ)", "Strongest attack: AUC [95 % CI]", *[f"TPR@{f}" for f in fpr_names],
              f"ΔAUC vs {label} [paired 95 % CI]", "Mean AUC", *[f"Mean TPR@{f}" for f in fpr_names],
              "Val. ppl [95 % CI]", f"ppl ÷ {label}'s [paired 95 % CI]", *held_out, "Gain kept", "Canary exposure",
              "Train s", "CPU s", f"× {label}", "Note"]
    split = rows[0]["split"]
    lines = [f"{split['n_members']} members vs {split['n_non_members']} non-members (split: {split['source']}, "
             f"seed {split['seed']}); every cell audited with the same attacks ({', '.join(rows[0]['attacks'])}). "
             f"{_blind_baseline(rows[0])} "
             f"Pretrained model: validation perplexity {comparison.pretrained_perplexity:.2f}.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        s, m = row["strongest"], row["mean_over_attacks"]
        epsilon = f"{row['epsilon']:.3g} ({row['delta']:.0e})" if row["epsilon"] is not None else "∞"
        if row["family"] == "pretrained":
            epsilon = "0 (not trained)"
        notes = ([] if row["learned"] else [NO_TRAINING]) + (["⚠ distribution shift"] if row["distribution_shift"]
                                                             else [])
        notes += [_tuned(row)] if row.get("tune") else []
        converted = row.get("cost_on_baseline_cpu")
        overhead = ("n/a" if row["overhead_vs_lora"] is None else ("≈ " if converted else "")
                    + f"{row['overhead_vs_lora']:.2f}" + (" (wall)" if row["overhead_measure"] == "wall" else ""))
        gain = f"{row['gain_share']:.0%}" if row.get("gain_share") is not None else "n/a"
        exposure = row.get("canary_exposure")
        exposure = (f"{exposure['mean_exposure']:.1f} / {exposure['max_measurable']:.1f} bits" if exposure
                    else "n/a")
        cells = [row["name"], epsilon,
                 f"{row['strongest_attack']} {s['auc']:.3f} [{s['auc_ci'][0]:.2f}, {s['auc_ci'][1]:.2f}]",
                 *[_rate(t) for t in s["tpr"]], _delta(row.get("vs_lora")), f"{m['auc']:.3f}",
                 *[_rate(t, mean=True) for t in m["tpr"]],
                 _perplexity(row), _ratio(row.get("perplexity_vs_lora")),
                 *[column(row) for column in held_out.values()], gain, exposure,
                 _seconds(row, "train_seconds"),
                 _seconds(row, "train_cpu_seconds") + (" ‡" if _cpus(row) not in ((), _cpus(baseline)) else "")
                 + (f" (≈ {converted['cpu_seconds']:.0f})" if converted else ""),
                 overhead, "; ".join(notes)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "TPR cells: rate (true positives / members) at the best threshold whose FPR stays within the "
                  "ceiling on the evaluated non-members, and the 95 % upper bound on that threshold's FPR for new "
                  "non-members (strongest attack); the strongest attack is picked after the fact, which "
                  "flatters it; mean cells average rate and count over the attacks. ε is the PRV bound spent by "
                  f"DP-LoRA (∞: no DP guarantee). × {label}: training CPU seconds over those of "
                  f"{_baseline_words(comparison)} (wall seconds, marked \"(wall)\", where either has none; "
                  "audits excluded, and so is SOFT's paraphrasing, done once before training and cached; the "
                  "adaptive attackers too in cells that record their time as adaptive_seconds, while earlier cells "
                  "include it). CPU s: the training process's CPU seconds over the same span as Train s (all its "
                  "threads), which time spent waiting for a core held by other work does not inflate (n/a: a cell "
                  "run before they were recorded). "
                  f"{NO_TRAINING}: validation perplexity not at least {MIN_PERPLEXITY_GAIN:.0%} below the "
                  f"pretrained model's. ΔAUC vs {label}: the cell's AUC minus the baseline's on the baseline's "
                  "strongest attack, over the same texts, with a paired bootstrap interval (✱: excludes 0). Val. "
                  "ppl: corpus perplexity on the validation texts, with a bootstrap interval over those texts. ppl ÷ "
                  f"{label}'s: the cell's perplexity over the baseline's on the same texts, with a paired bootstrap "
                  "interval (✱: excludes 1; n/a where the report predates per-text losses). Gain kept: the share of "
                  "the baseline's perplexity gain the cell keeps. Canary exposure: mean over canaries, of the most a "
                  "rank among the alternatives can show."]
    if held_out:
        lines += ["", HELD_OUT_NOTE.format(label=label)]
    if comparison.requested_baseline and not comparison.measures_against_requested:
        lines += ["", f"The grid's baseline, {comparison.requested_baseline}, has not finished: until it has, every "
                      "row is measured against plain LoRA at the base rank."]
    if any(row.get("tune") for row in rows):
        lines += ["", TUNED_NOTE]
        lines += [line for row in rows if row.get("tune") for line in ("", grid_table(row["name"], row["tune"]))]
    if any(times_partial(row) for row in rows):
        lines += ["", "†: the cell resumed after a restart from a checkpoint that kept no training clock; its times, "
                      "and its × LoRA, count the part after the restart only (a resume from a checkpoint that kept "
                      "one adds the time spent up to it, and is not marked)."]
    if {_cpus(row) for row in rows} - {(), _cpus(baseline)}:
        any_converted = any(row.get("cost_on_baseline_cpu") for row in rows)
        lines += ["", "‡: trained on another CPU than the baseline, so its CPU s do not measure its cost against the "
                      f"baseline's, nor does its × {label}" + (" unless marked ≈ (converted, below)" if any_converted
                                                              else "") + ". " + cpu_note(rows)
                      + _conversion_note(rows, comparison.cpu_reference)]
    if comparison.pending:
        lines += ["", "Pending cells (not yet run; rerun `privft compare` to resume): "
                      f"{', '.join(comparison.pending)}."]
    return "\n".join(lines) + "\n" + adaptive_table(rows)


TUNED_NOTE = ("Tuned rows: one run of the cell's epochs per learning rate, each epoch's checkpoint evaluated on the "
              "validation texts; the (learning rate, epoch) of least validation loss is audited (the grids below, "
              "and compare.json's `tune.grid`, hold every rate × epoch loss). A tuned plain LoRA row is early "
              "stopping; a tuned SOFT row chooses among the epochs after its warm-up, when it had served paraphrases. "
              "Their Train s and CPU s count every learning rate's run; their validation perplexity read "
              "the texts that chose them, so it flatters them. DP-LoRA rows choose the learning rate at the last "
              "epoch (the noise is calibrated to all of them), and choosing on the private data spends privacy their "
              "ε does not count.")


def _baseline_words(comparison: Comparison) -> str:
    """The baseline as the table's notes name it."""
    return comparison.baseline["name"] if comparison.measures_against_requested else "plain LoRA at the base rank"


def _tuned(row: dict[str, Any]) -> str:
    """A tuned row's note: the learning rate and epoch chosen, the grid's size, and DP's uncounted privacy."""
    tune = row["tune"]
    kind = "early stopping: " if row["family"] == "lora" else ""
    if tune["epochs_tuned"]:
        from_epoch = recorded_first_candidate(tune)
        eligible = sum(entry["epoch"] >= from_epoch for entry in tune["grid"])
        among = f"{eligible} lr × epoch" + (f", epochs {from_epoch} on" if from_epoch > 1 else "")
    else:
        among = f"{len(tune['learning_rates'])} lr at the last epoch"
    note = (f"tuned ({kind}lr {tune['learning_rate']:g}, epoch {tune['epoch']}/{tune['of_epochs']}, "
            f"least val. loss of {among})")
    if tune.get("retrained_validation_loss") is not None:  # its checkpoint was trained again on another machine
        note += (f"; checkpoint retrained: val. loss {tune['retrained_validation_loss']:.4f} (chosen at "
                 f"{tune['chosen_validation_loss']:.4f})")
    return note + (f"; ⚠ {tune['uncounted_privacy']}" if tune.get("uncounted_privacy") else "")


def _cpus(row: dict[str, Any]) -> tuple[str, ...]:
    """The CPU models a row's training seconds were counted on; none for the pretrained row."""
    if row["family"] == "pretrained":
        return ()
    return tuple(row.get("cpus") or (CPU_NOT_RECORDED,))


def cpu_note(rows: Sequence[dict[str, Any]]) -> str:
    """Which CPU each trained row's seconds were counted on: CPU seconds compare only between rows on one model."""
    by_cpus: dict[tuple[str, ...], list[str]] = {}
    for row in rows:
        if _cpus(row):
            by_cpus.setdefault(_cpus(row), []).append(row["name"])
    return ("CPU seconds compare only between rows trained on one CPU model; trained on "
            + "; ".join(f"{' and '.join(cpus)}: {', '.join(names)}" for cpus, names in by_cpus.items()) + ".")


def _conversion_note(rows: Sequence[dict[str, Any]], reference: CpuReference | None) -> str:
    """How the ≈ costs were converted to the baseline's CPU; empty where no row's was."""
    if reference is None or not any(row.get("cost_on_baseline_cpu") for row in rows):
        return ""
    return (" ≈: the row's CPU seconds converted to the baseline's CPU, and × computed from them, by the CPU "
            f"reference: {reference.describe()}. One workload stands for all, so read ≈ as an estimate.")


def _seconds(row: dict[str, Any], key: str) -> str:
    """A cell's training seconds (wall or CPU), † when they count the part after a restart only; n/a if not recorded."""
    value = row.get(key)
    if value is None:
        return "n/a"
    return f"{value:.0f}" + (" †" if times_partial(row) else "")


MAX_PICK_ROWS = 8


def pick_table(rows: list[dict[str, Any]], names: Sequence[str]) -> str:
    """The README's "What to pick" table: for each named cell (at most eight, in the given order), its strongest
    attack's AUC, TPR at the lowest FPR ceiling with counts, task accuracy, test perplexity and training cost."""
    by_name = {row["name"]: row for row in rows}
    missing = [name for name in names if name not in by_name]
    if missing or not 0 < len(names) <= MAX_PICK_ROWS:
        raise ValueError(f"pick_table takes one to {MAX_PICK_ROWS} finished cells; got {len(names)}"
                         + (f", of which {missing} are not among the finished cells {sorted(by_name)}" if missing
                            else "") + ". Name finished cells only, at most eight.")
    lowest = min(range(len(rows[0]["strongest"]["tpr"])), key=lambda i: rows[0]["strongest"]["tpr"][i]["max_fpr"])
    ceiling = rows[0]["strongest"]["tpr"][lowest]["max_fpr"]
    lines = [f"| Configuration | Strongest attack: AUC [95 % CI] | TPR @ {ceiling * 100:g} % FPR (k/members; bound) "
             "| Task accuracy [95 % CI] (k/n) | Test ppl [95 % CI] | Training: CPU h (wall h) |", "|---" * 6 + "|"]
    for name in names:
        row = by_name[name]
        strongest = row["strongest"]
        converted = row.get("cost_on_baseline_cpu")
        cost = ("none" if row["family"] == "pretrained" else
                "n/a" if row.get("train_cpu_seconds") is None else
                f"{row['train_cpu_seconds'] / 3600:.1f} ({row['train_seconds'] / 3600:.1f})"
                + (" †" if times_partial(row) else "")
                + (f"; ≈ {converted['cpu_seconds'] / 3600:.1f} on the baseline's CPU" if converted else ""))
        lines.append(f"| {name}{_schedule(row)} | {row['strongest_attack']} {strongest['auc']:.3f} "
                     f"[{strongest['auc_ci'][0]:.2f}, {strongest['auc_ci'][1]:.2f}] | "
                     f"{_rate(strongest['tpr'][lowest])} | {_task_accuracy(row)} | "
                     f"{_perplexity(row, 'test_perplexity')} | {cost} |")
    n_non_members = rows[0]["split"]["n_non_members"]
    lines += ["", f"{rows[0]['split']['n_members']} members vs {n_non_members} non-members. TPR: the strongest "
                  f"attack's, at a threshold passing at most {math.floor(ceiling * n_non_members + 1e-9)} of the "
                  f"{n_non_members} non-members, with the 95 % upper bound on its FPR for new non-members. "
                  "Training: the process's CPU hours (wall hours), a tuned row's over every learning rate it tried; "
                  "†: the part after a restart only."]
    picked = [by_name[name] for name in names]
    if len({_cpus(row) for row in picked} - {()}) > 1:
        lines += ["", cpu_note(picked) + (" ≈: CPU hours converted to the baseline's CPU by the CPU reference "
                                          "(one training workload timed on both; an estimate)."
                                          if any(row.get("cost_on_baseline_cpu") for row in picked) else "")]
    return "\n".join(lines) + "\n"


def _schedule(row: dict[str, Any]) -> str:
    """A trained row's learning rate and epochs, the chosen ones for a tuned row; nothing for the pretrained row."""
    if row["family"] == "pretrained":
        return ""
    if row.get("tune"):
        tune = row["tune"]
        return f" (chosen: lr {tune['learning_rate']:g}, epoch {tune['epoch']} of {tune['of_epochs']})"
    training = row["config"]["training"]
    epochs = training["epochs"]
    return f" (lr {training['learning_rate']:g}, {epochs} epoch{'s' if epochs != 1 else ''})"


def adaptive_table(rows: list[dict[str, Any]]) -> str:
    """The adaptive attackers per cell (AUC and TPR with counts on their subsample); empty when none ran."""
    measured = [row for row in rows if row.get("adaptive")]
    if not measured:
        return ""
    names = list(measured[0]["adaptive"])
    fprs = [f"{t['max_fpr'] * 100:g} %" for t in measured[0]["adaptive"][names[0]]["tpr"]]
    first = measured[0]["adaptive"][names[0]]["tpr"][0]
    header = ["Cell", *[f"{name}: AUC [95 % CI], TPR@{fprs[0]}" for name in names]]
    lines = ["", f"### Attackers who know the defence ({first['n_members']} members vs {first['n_non_members']} "
                 "non-members, a seeded subsample)", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in measured:
        cells = [row["name"]]
        for name in names:
            m = row["adaptive"][name]
            cells.append(f"{m['auc']:.3f} [{m['auc_ci'][0]:.2f}, {m['auc_ci'][1]:.2f}], {_rate(m['tpr'][0])}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


FAMILY_STYLE = {"pretrained": ("grey", "*"), "lora": ("tab:blue", "o"), "full": ("tab:red", "s"),
                "soft": ("tab:green", "^"), "dp": ("tab:purple", "D"), "goldfish": ("tab:orange", "v")}


def utility_axis(rows: list[dict[str, Any]]) -> tuple[str, Callable[[dict[str, Any]], tuple[float, float, float]]]:
    """The plot's utility axis: task accuracy where every row measured it (what the fine-tune is for), else
    validation perplexity; its label and each row's (value, interval low, interval high)."""
    if rows and all(row.get("task_accuracy") for row in rows):
        def accuracy(row: dict[str, Any]) -> tuple[float, float, float]:
            task = row["task_accuracy"]
            return task["accuracy"], task["ci_low"], task["ci_high"]
        first = rows[0]["task_accuracy"]
        return (f"task accuracy on {first['n_total']} held-out tickets, 95 % Wilson CI (higher = more useful; "
                "hollow: no meaningful training)", accuracy)

    def validation_perplexity(row: dict[str, Any]) -> tuple[float, float, float]:
        low, high = row.get("perplexity_ci") or (row["perplexity"], row["perplexity"])
        return row["perplexity"], low, high
    return "validation perplexity (lower = more useful; hollow: no meaningful training)", validation_perplexity


def privacy_utility_png(comparison: Comparison) -> bytes:
    """TPR at the first FPR ceiling (strongest attack) against utility (`utility_axis`): one numbered point per cell.

    The numbers key the cells' names in a legend beside the axes, so many cells stay readable.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = comparison.rows[0]["strongest"]["tpr"][0]
    label, utility = utility_axis(comparison.rows)
    fig, ax = plt.subplots(figsize=(9, 5))
    number = 0
    numbers_at: dict[tuple[float, float], list[str]] = {}  # cells at one point (a tuned run that equals an untuned)
    for row in comparison.rows:
        rate = row["strongest"]["tpr"][0]
        tpr = rate["tpr"]
        value, low, high = utility(row)
        if tpr is None or not math.isfinite(value):
            continue
        number += 1
        color, marker = FAMILY_STYLE[row["family"]]
        # the rate's own uncertainty over the members (Wilson), which at the tail spans most differences between cells
        tpr_low, tpr_high = wilson_interval(rate["true_positives"], rate["n_members"])
        ax.errorbar(value, tpr, xerr=[[value - low], [high - value]], yerr=[[tpr - tpr_low], [tpr_high - tpr]],
                    color=color, alpha=0.4, linewidth=1)
        ax.scatter(value, tpr, color=color, marker=marker, s=50,
                   facecolors="none" if not row["learned"] else color, label=f"{number}  {row['name']}")
        numbers_at.setdefault((value, tpr), []).append(str(number))
    for point, numbers in numbers_at.items():
        ax.annotate(", ".join(numbers), point, fontsize=8, xytext=(5, 3), textcoords="offset points")
    ax.axhline(first["max_fpr"], color="grey", linestyle="--", label="chance (TPR = FPR ceiling)")
    ax.set(xlabel=label,
           ylabel=f"TPR @ FPR ≤ {first['max_fpr'] * 100:g} %, strongest attack\n({first['n_members']} members, "
                  "95 % Wilson CI)",
           title="Privacy–utility: each cell audited on the same split")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _lora_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plain LoRA rows, by rank (tuned ones aside: each rank's curve point is its one-run cell)."""
    lora = [row for row in rows if row["family"] == "lora" and not row.get("tune")]
    return sorted(lora, key=lambda row: row["config"]["training"]["lora"]["rank"])


def rank_curve_png(comparison: Comparison) -> bytes:
    """LoRA rank as a privacy parameter: the strongest attack's AUC (95 % CI) and TPR, and perplexity, by rank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _lora_rows(comparison.rows)
    ranks = [row["config"]["training"]["lora"]["rank"] for row in rows]
    auc = [row["strongest"]["auc"] for row in rows]
    low = [row["strongest"]["auc"] - row["strongest"]["auc_ci"][0] for row in rows]
    high = [row["strongest"]["auc_ci"][1] - row["strongest"]["auc"] for row in rows]
    fig, (privacy, utility) = plt.subplots(1, 2, figsize=(10, 4))
    privacy.errorbar(ranks, auc, yerr=[low, high], marker="o", capsize=3, label="strongest attack's AUC (95 % CI)")
    for index, tpr in enumerate(rows[0]["strongest"]["tpr"]):
        values = [row["strongest"]["tpr"][index]["tpr"] for row in rows]
        if all(v is not None for v in values):
            privacy.plot(ranks, values, marker="s", linestyle="--", label=f"TPR @ FPR ≤ {tpr['max_fpr'] * 100:g} %")
    privacy.set(xscale="log", xticks=ranks, xticklabels=[str(r) for r in ranks], xlabel="LoRA rank",
                ylim=(0, 1.02), title=f"Leakage by rank ({rows[0]['split']['n_members']} members vs "
                                      f"{rows[0]['split']['n_non_members']} non-members)")
    privacy.legend(fontsize=7)
    cis = [row.get("perplexity_ci") or [row["perplexity"]] * 2 for row in rows]  # no bar where none was measured
    utility.errorbar(ranks, [row["perplexity"] for row in rows], marker="o", color="tab:green", capsize=3,
                     yerr=[[row["perplexity"] - ci[0] for row, ci in zip(rows, cis, strict=True)],
                           [ci[1] - row["perplexity"] for row, ci in zip(rows, cis, strict=True)]],
                     label="validation perplexity (95 % CI)")
    utility.axhline(comparison.pretrained_perplexity, color="grey", linestyle="--", label="pretrained")
    utility.set(xscale="log", xticks=ranks, xticklabels=[str(r) for r in ranks], xlabel="LoRA rank",
                ylabel="validation perplexity", title="Utility by rank")
    utility.legend(fontsize=7)
    for axes in (privacy, utility):
        axes.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # the ranks alone, not log-scale minors
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
