"""`privft reproduce`: the SOFT paper's protocol on local data, one resumable cell per (domain, method).

A cell trains (or, for the pretrained model, only loads) one model, audits it with the paper's
ten attacks plus the neighbourhood attack, and writes `cell.json`; a finished cell is never
recomputed. Every table is a view of the same cells.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

from privft.audit import AuditConfig, run_audit
from privft.audit_context import AuditContext, generate_neighbours
from privft.config import SAVED_BEFORE, from_dict
from privft.data import MembershipSplit
from privft.io import atomic_write_text
from privft.metrics import evaluate_attack
from privft.models import DEFAULT_MODEL, cache_dir, load_model
from privft.paper.adaptive import adaptive_scores
from privft.paper.published import domain_analogues
from privft.paraphrase import NeighbourParaphraser, ParaphraseCache
from privft.pipeline import (
    DataSettings,
    DPSettings,
    RunConfig,
    SoftSettings,
    load_split,
    run_training,
)
from privft.report import AuditReport
from privft.scoring import StatsCache, start_token_rule
from privft.training import FinetuneSettings, LoraSettings

logger = logging.getLogger(__name__)

METHODS = ("pretrained", "full_ft", "lora", "soft")
DP_METHODS = {"dp_eps_0.01": 0.01, "dp_eps_100": 100.0}  # Table 5's DP-LoRA rows: target ε of each
PAPER_ATTACKS = ("loss", "zlib", "lowercase", "min_k", "min_k_pp", "ref_ratio", "recall", "con_recall",
                 "ensemble", "neighbourhood")
SOFT_FRACTION = 0.5  # the defender's neighbour paraphraser swaps half the words of each rewritten part
ATTACKER_FRACTION = 0.3  # the adaptive attacker's guess at that hyperparameter


@dataclass
class PaperScale:
    """Sizes of one reproduction (the defaults are `quick`: two domains on 2 CPU cores in about half an hour)."""

    model: str = DEFAULT_MODEL
    domains: tuple[str, ...] = ("Wiki", "GitHub")  # paper names, mapped to local corpora by datasets.yaml
    n_members: int = 50  # evaluated members
    n_non_members: int = 100  # 100 is the fewest that resolve TPR at FPR ≤ 1 % (one false positive)
    n_validation: int = 30  # SOFT's threshold and the perplexity
    n_prefix_members: int = 4  # trained on, never evaluated: CON-ReCaLL's member shots
    n_prefix_non_members: int = 4  # neither trained on nor evaluated: ReCaLL's non-member shots
    recall_shots: int = 1
    n_neighbours: int = 2
    neighbour_fraction: float = 0.1  # share of words each neighbour swaps
    max_words: int | None = 60
    epochs: int = 2
    full_learning_rate: float = 5e-5
    lora_learning_rate: float = 1e-3
    lora_rank: int = 16
    batch_size: int = 8
    max_length: int = 256
    seed: int = 0
    n_bootstrap: int = 1000
    # The first token of every text (privft.scoring.start_token_rule): the rule docs/results/paper.md was measured
    # with (<|im_start|> for SmolLM2), so the documented tables reproduce; "auto" for a new study.
    start_token: str = field(default="bos-else-eos", metadata={SAVED_BEFORE: "bos-else-eos"})

    def __post_init__(self) -> None:
        analogues = domain_analogues()
        for domain in self.domains:
            if domain not in analogues:
                raise ValueError(f"Unknown paper dataset {domain!r}; choose from {', '.join(analogues)}.")
            if analogues[domain].corpus is None:
                raise ValueError(f"No offline corpus stands in for {domain} ({analogues[domain].why}; candidate: "
                                 f"{analogues[domain].candidate}); drop it from the domains.")
        if not 1 <= self.recall_shots <= min(self.n_prefix_members, self.n_prefix_non_members):
            raise ValueError(f"recall_shots={self.recall_shots} must be between 1 and the prefix pools' size "
                             f"({self.n_prefix_members} members, {self.n_prefix_non_members} non-members).")


SCALES: dict[str, PaperScale] = {
    "quick": PaperScale(),
    # The paper's protocol (1,000 vs 1,000, 3 epochs, 7 ReCaLL shots, 25 neighbours) on a GPU. ArXiv's
    # analogue (python-docs, 651 paragraphs) is too small for it; the split refuses it with the counts.
    "paper": PaperScale(domains=("Wiki", "GitHub"), n_members=1000, n_non_members=1000, n_validation=100,
                        n_prefix_members=16, n_prefix_non_members=16, recall_shots=7, n_neighbours=25,
                        max_words=None, epochs=3, full_learning_rate=2e-5, batch_size=8, max_length=512),
}


@dataclass
class Cell:
    """One finished (domain, method) cell: its audit, timings and adaptive-attack metrics."""

    domain: str
    method: str
    report: dict[str, Any]
    train_seconds: float | None = None
    adaptive: dict[str, Any] = field(default_factory=dict)
    privacy: dict[str, Any] | None = None  # DP-LoRA's guarantee (ε spent, δ, σ, steps) for the DP cells
    recipe: dict[str, Any] | None = None  # what its numbers depend on (`cell_recipe`); None in cells saved before


@dataclass
class DomainData:
    """One domain's training split, evaluation split and attack context."""

    train: MembershipSplit
    evaluation: MembershipSplit
    context: AuditContext


def domain_data(scale: PaperScale, domain: str, paraphraser: NeighbourParaphraser) -> DomainData:
    """Draw the split once (seeded) and carve the prefix pools off it; neighbours are cached by content."""
    corpus = domain_analogues()[domain].corpus
    train = load_split(DataSettings(
        corpus=corpus, max_words=scale.max_words, seed=scale.seed, n_validation=scale.n_validation,
        n_members=scale.n_members + scale.n_prefix_members,
        n_non_members=scale.n_non_members + scale.n_prefix_non_members))
    members, prefix_members = train.members[:scale.n_members], train.members[scale.n_members:]
    non_members, prefix_non_members = train.non_members[:scale.n_non_members], train.non_members[scale.n_non_members:]
    evaluation = MembershipSplit.from_texts(members, non_members, train.validation, seed=scale.seed,
                                            source=train.source)
    texts, _ = evaluation.labels_and_texts()
    neighbours = generate_neighbours(texts, paraphraser, scale.n_neighbours,
                                     cache=ParaphraseCache.default(), seed=scale.seed)
    context = AuditContext(tuple(prefix_non_members[:scale.recall_shots]), tuple(prefix_members[:scale.recall_shots]),
                           neighbours)
    return DomainData(train, evaluation, context)


def run_config(scale: PaperScale, domain: str, method: str, out: Path) -> RunConfig:
    """The training run of one trained cell: full FT, LoRA, full FT with SOFT (paper rule), or DP-LoRA."""
    uses_lora = method == "lora" or method in DP_METHODS
    lora = LoraSettings(rank=scale.lora_rank, alpha=2 * scale.lora_rank) if uses_lora else None
    training = FinetuneSettings(
        epochs=scale.epochs, batch_size=scale.batch_size, max_length=scale.max_length, seed=scale.seed,
        learning_rate=scale.lora_learning_rate if lora else scale.full_learning_rate, lora=lora,
        output_dir=str(out / "training"))
    soft = (SoftSettings(rule="paper", paraphraser_options={"fraction": SOFT_FRACTION}, mode="prefix+rewrite")
            if method == "soft"
            else SoftSettings())
    # A fixed DP seed keeps the table reproducible; a real release would leave it None (secret OS entropy).
    dp = DPSettings(target_epsilon=DP_METHODS[method], seed=scale.seed) if method in DP_METHODS else DPSettings()
    # privft's own end-of-training audit stays light; it fills the statistics cache the paper audit reads.
    light_audit = replace(audit_config(scale), attacks=("loss",), n_bootstrap=100)
    return RunConfig(model=scale.model, start_token=scale.start_token, training=training, soft=soft, dp=dp,
                     audit=light_audit,
                     data=DataSettings(corpus=domain_analogues()[domain].corpus, max_words=scale.max_words))


def audit_config(scale: PaperScale) -> AuditConfig:
    """The audit of every cell: the paper's attacks, statistics cached per (text, model), 1,024-token windows."""
    return AuditConfig(attacks=PAPER_ATTACKS, n_bootstrap=scale.n_bootstrap, seed=scale.seed,
                       cache_dir=str(cache_dir() / "paper-stats"))


class _PaperAudit(TrainerCallback):
    """At the end of training: time the training, then run the paper's audit (and the adaptive attackers)."""

    def __init__(self, auditor: Auditor) -> None:
        self.auditor = auditor
        self.started = self.trained = 0.0
        self.cell: Cell | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the training clock."""
        self.started = time.perf_counter()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Stop the clock at each epoch's end, so the last one excludes the final audits."""
        self.trained = time.perf_counter() - self.started

    def on_train_end(self, args: Any, state: Any, control: Any, model: PreTrainedModel | None = None,
                     **kwargs: Any) -> None:
        """Audit the trained model."""
        self.cell = self.auditor.audit(model, self.trained)


@dataclass
class Auditor:
    """Audits one domain's models against the pretrained reference."""

    scale: PaperScale
    domain: str
    method: str
    data: DomainData
    reference: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    paraphraser: NeighbourParaphraser

    def audit(self, model: PreTrainedModel, train_seconds: float | None) -> Cell:
        """The paper's audit of `model`, plus the adaptive attackers for the trained models."""
        config = audit_config(self.scale)
        report = run_audit(model, self.tokenizer, self.data.evaluation, reference=self.reference, config=config,
                           model_name=f"{self.scale.model} {self.method}", context=self.data.context)
        adaptive = {} if self.method == "pretrained" else self._adaptive(model, report, config)
        return Cell(self.domain, self.method, report.to_dict(), train_seconds, adaptive)

    def _adaptive(self, model: PreTrainedModel, report: AuditReport, config: AuditConfig) -> dict[str, Any]:
        attacker = replace_fraction(self.paraphraser, ATTACKER_FRACTION)
        texts, labels = self.data.evaluation.labels_and_texts()
        scores = adaptive_scores(model, self.reference, self.tokenizer, texts, attacker,
                                 prefix_keep_ratio=SoftSettings().prefix_keep_ratio,
                                 cache=StatsCache(config.cache_dir), batch_size=config.batch_size,
                                 paraphrase_cache=ParaphraseCache.default())
        return {name: evaluate_attack(labels, values, max_fprs=config.max_fprs, n_bootstrap=config.n_bootstrap,
                                      seed=config.seed).to_dict() for name, values in scores.items()}


def replace_fraction(paraphraser: NeighbourParaphraser, fraction: float) -> NeighbourParaphraser:
    """The same neighbour paraphraser (model, tokenizer, top-k) with another swap fraction."""
    return NeighbourParaphraser(paraphraser.model, paraphraser.tokenizer, fraction=fraction, top_k=paraphraser.top_k)


def cell_path(out: Path, domain: str, method: str) -> Path:
    """Where a cell's result lives."""
    return out / domain / method / "cell.json"


def load_cell(path: Path) -> Cell:
    """A finished cell from disk."""
    return Cell(**json.loads(path.read_text(encoding="utf-8")))


def cell_recipe(scale: PaperScale) -> dict[str, Any]:
    """What a cell's numbers depend on: the scale's settings (bar which other domains run) and the swap fractions."""
    settings = {name: value for name, value in asdict(scale).items() if name != "domains"}
    return {"scale": settings, "soft_fraction": SOFT_FRACTION, "attacker_fraction": ATTACKER_FRACTION}


def check_recipe(cell: Cell, scale: PaperScale, path: Path) -> None:
    """Refuse to reuse a finished cell measured with other settings, naming them; cells saved before recipes pass."""
    if cell.recipe is None:
        logger.warning("%s was saved before cells recorded their settings; it is reused unchecked.", path)
        return
    recipe = dict(cell.recipe)
    saved = from_dict(PaperScale, {**recipe.pop("scale"), "domains": list(scale.domains)}, where=str(path), saved=True)
    differ = [f"scale.{f.name}" for f in fields(PaperScale) if getattr(saved, f.name) != getattr(scale, f.name)]
    differ += [key for key, value in cell_recipe(scale).items() if key != "scale" and recipe.get(key) != value]
    if differ:
        raise ValueError(f"{path} was measured with other settings ({', '.join(differ)}); pass another --out, or "
                         "delete that cell's folder to re-run it.")


def run_cells(scale: PaperScale, out: Path, methods: tuple[str, ...] = METHODS) -> list[Cell]:
    """Every (domain, method) cell, computing only those without a cell.json under `out` (finished ones must match)."""
    cells = []
    with start_token_rule(scale.start_token):  # the neighbours, the pretrained audit and the adaptive attackers too
        finished = [cell_path(out, d, m) for d in scale.domains for m in methods if cell_path(out, d, m).exists()]
        for path in finished:  # every mismatch is refused before anything runs
            check_recipe(load_cell(path), scale, path)
        for domain in scale.domains:
            todo = [m for m in methods if not cell_path(out, domain, m).exists()]
            if todo:
                reference, tokenizer = load_model(scale.model, device="cuda" if torch.cuda.is_available() else None)
                paraphraser = NeighbourParaphraser(reference, tokenizer, fraction=scale.neighbour_fraction)
                data = domain_data(scale, domain, paraphraser)
            for method in methods:
                path = cell_path(out, domain, method)
                if method in todo:
                    auditor = Auditor(scale, domain, method, data, reference, tokenizer, paraphraser)
                    cell = replace(_run_cell(auditor, path.parent), recipe=cell_recipe(scale))
                    atomic_write_text(path, json.dumps(asdict(cell), allow_nan=True))
                cells.append(load_cell(path))
    return cells


def _run_cell(auditor: Auditor, out: Path) -> Cell:
    """Audit the pretrained model, or train the method's model and audit it at the end of training."""
    if auditor.method == "pretrained":
        return auditor.audit(auditor.reference, None)
    callback = _PaperAudit(auditor)
    config = run_config(auditor.scale, auditor.domain, auditor.method, out)
    result = run_training(config, split=auditor.data.train, extra_callbacks=[callback])
    if callback.cell is None:
        raise RuntimeError(f"{auditor.domain}/{auditor.method}: training ended without the final audit.")
    return replace(callback.cell, privacy=result.privacy)
