"""`privft example support-tickets`: seed 000's release decision on a support-ticket fine-tune, run end to end.

The five steps of the worked example, on the built-in synthetic corpus (`load_corpus("tickets")`):

1. Split first: a random split of one month of tickets, with PII canaries (email addresses) planted
   several times each.
2. Blind baseline on that split (it should sit near 0.5), and on a split whose non-members are the
   next month's tickets (a product launch shifts their vocabulary: it fires, and that split goes no further).
3. Fine-tune with LoRA for 4 epochs and audit with the base model as reference.
4. LiRA with 8 LoRA shadows trained on random halves of the audited pool, fitted to attack the fine-tune
   itself: which tickets are most exposed, and are they the near-duplicates and the unusual names?
5. The decision: remove near-identical tickets, train 2 epochs instead of 4, audit again, and gate both
   models on the same policy.

Everything lands in one folder: the two `privft train` runs (`before/`, `after/`), the shadow farm
(`shadows/`), the target's LiRA scores, and the page `support-tickets.md` (`privft.examples.ticket_page`).
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from scipy.stats import hypergeom, mannwhitneyu

from privft.attacks import blind_baseline_scores, distribution_shift
from privft.audit import AuditConfig
from privft.data import MembershipSplit, NearDuplicateWarning
from privft.data.dedup import deduplicated_split
from privft.data.split import text_sha256
from privft.data.tickets import Ticket, generate_tickets
from privft.examples.ticket_page import PAGE, render
from privft.gate import GatePolicy, Verdict, check
from privft.io import atomic_write_text
from privft.lira import LiRA
from privft.metrics import AttackMetrics, evaluate_attack
from privft.models import DEFAULT_MODEL, load_model
from privft.pipeline import CanarySettings, DataSettings, RunConfig, RunResult, load_split, run_training
from privft.scoring import score_texts
from privft.shadows import PoolSettings, ShadowPlan, ShadowSettings, load_losses, loss_windows, train_missing
from privft.training import FinetuneSettings, LoraSettings

CANARY_KIND = "email"  # "you can reach the customer at …": the personal data support tickets carry
T = TypeVar("T")


@dataclass(frozen=True)
class TicketScale:
    """The sizes of one walk-through, and the release policy both models are gated on (fixed before any run)."""

    n_members: int
    n_non_members: int
    n_shadow_non_members: int  # non-members in the shadows' pool beside every member (balanced halves)
    n_validation: int
    n_canaries: int
    canary_copies: int
    n_alternatives: int  # canary exposure is measurable up to log2(n_alternatives + 1) bits
    max_fprs: tuple[float, ...]
    policy: GatePolicy
    epochs_before: int = 4
    epochs_after: int = 2
    n_shadows: int = 8
    window: int = 96  # LiRA's per-token losses: the first `window` tokens of each ticket
    max_length: int = 256
    batch_size: int = 8
    n_exposed: int = 10  # most exposed tickets named
    n_bootstrap: int = 1000


SCALES: dict[str, TicketScale] = {
    # About 50 minutes with SmolLM2-135M on 2 CPU cores, 38 of them the 8 shadows. At this size FPR 1 % rests
    # on one false positive and 0.1 % is not estimable, so the policy checks 1 % with lowered minimum counts and
    # the blind baseline at the report's own shift line (0.6: its noise on ~100 texts a side reaches 0.55); the
    # page also shows that the default policy (1,000 a side) refuses to judge an audit this small.
    "default": TicketScale(
        n_members=80, n_non_members=130, n_shadow_non_members=80, n_validation=16, n_canaries=4, canary_copies=4,
        n_alternatives=200, max_fprs=(0.01, 0.001),
        policy=GatePolicy(min_members=40, min_non_members=100, max_blind_baseline_auc=0.6, max_tpr_at_fpr={0.01: 0.10},
                          max_canary_exposure=6.0)),
    # The whole walk-through on a tiny model in seconds: the test scale. Its numbers mean nothing.
    "tiny": TicketScale(
        n_members=24, n_non_members=24, n_shadow_non_members=24, n_validation=8, n_canaries=2, canary_copies=2,
        n_alternatives=20, max_fprs=(0.05,), window=32, n_exposed=5, n_bootstrap=50,
        policy=GatePolicy(min_members=12, min_non_members=12, max_blind_baseline_auc=0.75, max_tpr_at_fpr={0.05: 0.5},
                          max_canary_exposure=3.0)),
}


@dataclass(frozen=True)
class BlindCheck:
    """The blind baseline (no model) on one split: its metrics and whether it shows a distribution shift."""

    name: str
    metrics: AttackMetrics
    shift: bool | None  # None: too few texts for a verdict


@dataclass(frozen=True)
class ExposureCheck:
    """Are tickets of one kind over-represented among the most exposed members? Counts and two tests."""

    kind: str  # "near-duplicate" or "unusual name"
    in_top: int
    n_top: int
    in_members: int
    n_members: int
    p_top: float  # hypergeometric: P(at least `in_top` of the top `n_top` by chance)
    p_rank: float  # one-sided Mann–Whitney: these members score higher than the other members


@dataclass(frozen=True)
class ExposedTicket:
    """One of the most exposed members: its rank, score and what the corpus records about it."""

    rank: int
    score: float
    ticket: Ticket


@dataclass(frozen=True)
class AttackFinding:
    """An attack on the 4-epoch model: its metrics, its most exposed members and the checks on them."""

    attack: str
    metrics: AttackMetrics
    exposed: list[ExposedTicket]
    checks: list[ExposureCheck]


@dataclass(frozen=True)
class DedupSummary:
    """What de-duplication removed, and how the detected clusters compare with the corpus's recorded groups."""

    n_clusters: int
    removed: dict[str, int]  # per side
    recorded_groups: int  # recorded near-duplicate groups with at least two copies in the split
    recovered_groups: int  # of those, found exactly as one cluster
    split_flagged: int  # non-member/validation texts the split's own 13-gram check flagged


@dataclass
class TicketWalkthrough:
    """Every result of the walk-through, in the order of its steps; `privft.examples.ticket_page` renders it."""

    model: str
    scale_name: str
    scale: TicketScale
    seed: int
    output_dir: Path
    month: list[Ticket]  # the current month, as the generator recorded it
    split: MembershipSplit
    canaries: CanarySettings
    blind: list[BlindCheck]
    before: RunResult
    lira: AttackFinding
    strongest: AttackFinding  # the audit's strongest cheap attack, for comparison with LiRA
    dedup: DedupSummary
    after: RunResult
    default_verdicts: dict[str, Verdict]  # "before"/"after" under GatePolicy()
    seconds: dict[str, float] = field(default_factory=dict)


def run_support_tickets(*, model: str = DEFAULT_MODEL, scale: str = "default", seed: int = 0,
                        output_dir: str | Path = "runs/support-tickets") -> TicketWalkthrough:
    """Run the five steps and write `output_dir`/support-tickets.md; returns every result."""
    if scale not in SCALES:
        raise ValueError(f"Unknown scale {scale!r}; choose one of {', '.join(SCALES)}.")
    sizes, out, seconds = SCALES[scale], Path(output_dir), {}
    timed = _timer(seconds)

    # 1. Split first, with canaries (planted by `privft train` from these settings).
    data = DataSettings(corpus="tickets", corpus_options={"seed": seed, "size": _month_size(sizes)}, max_words=None,
                        n_members=sizes.n_members, n_non_members=sizes.n_non_members,
                        n_validation=sizes.n_validation, seed=seed)
    with warnings.catch_warnings():  # counted on the page instead: near-duplicates are this corpus's point
        warnings.simplefilter("ignore", NearDuplicateWarning)
        split = load_split(data)
    canaries = CanarySettings(n_canaries=sizes.n_canaries, copies=sizes.canary_copies,
                              n_alternatives=sizes.n_alternatives, kind=CANARY_KIND)
    month = generate_tickets(seed=seed, size=_month_size(sizes))
    records = {t.text: t for t in month}

    # 2. Blind baselines: the random split, and members against next month's tickets.
    next_month = [t.text for t in generate_tickets(seed=seed, month="next", size=sizes.n_non_members)]
    blind = timed("blind baselines", lambda: [
        _blind("random split (current month)", split.members, split.non_members, sizes, seed),
        _blind("members vs next month's tickets", split.members, next_month, sizes, seed)])

    # 3. Fine-tune 4 epochs and audit against the base model (adapters disabled), gated.
    config = RunConfig(
        model=model, data=data, canaries=canaries, gate=sizes.policy,
        training=FinetuneSettings(epochs=sizes.epochs_before, batch_size=sizes.batch_size,
                                  max_length=sizes.max_length, seed=seed, output_dir=str(out / "before"),
                                  lora=LoraSettings()),
        audit=AuditConfig(max_fprs=sizes.max_fprs, n_bootstrap=sizes.n_bootstrap, seed=seed,
                          cache_dir=str(out / "stats-cache")))
    before = timed("fine-tune 4 epochs + audit", lambda: run_training(config, split=split))

    # 4. LiRA: shadows on random halves of the pool, then the fine-tune itself as the target.
    pool = split.members + split.non_members[:sizes.n_shadow_non_members]
    lira = timed("8 shadows + LiRA", lambda: _lira(config, pool, set(split.members), records, sizes, out))
    strongest = _strongest(before, split, records, sizes)

    # 5. The decision: de-duplicate, 2 epochs, audit again; gate both.
    deduplicated, clusters = deduplicated_split(split)
    after_config = dataclasses.replace(config, training=dataclasses.replace(
        config.training, epochs=sizes.epochs_after, output_dir=str(out / "after")))
    after = timed("de-duplicated, 2 epochs + audit", lambda: run_training(after_config, split=deduplicated))
    walkthrough = TicketWalkthrough(
        model=model, scale_name=scale, scale=sizes, seed=seed, output_dir=out, month=month, split=split,
        canaries=canaries,
        blind=blind, before=before, lira=lira, strongest=strongest,
        dedup=_dedup_summary(split, deduplicated, clusters, records), after=after,
        default_verdicts={"before": check(before.report), "after": check(after.report)}, seconds=seconds)
    path = atomic_write_text(out / PAGE, render(walkthrough))
    print(f"Walk-through: {path}")
    return walkthrough


def _month_size(sizes: TicketScale) -> int:
    """Ordinary tickets in the month: the split takes nearly all of them, so near-duplicate groups stay whole."""
    return sizes.n_members + sizes.n_non_members + sizes.n_validation


def _timer(seconds: dict[str, float]) -> Callable[[str, Callable[[], T]], T]:
    """A function that runs a step and records its wall time under its name."""
    def timed(name: str, step: Callable[[], T]) -> T:
        start = time.perf_counter()
        result = step()
        seconds[name] = time.perf_counter() - start
        return result
    return timed


def _blind(name: str, members: Sequence[str], non_members: Sequence[str], sizes: TicketScale, seed: int) -> BlindCheck:
    """The audit's blind baseline on members vs `non_members`, with its shift verdict."""
    texts, labels = [*members, *non_members], np.r_[np.ones(len(members), int), np.zeros(len(non_members), int)]
    metrics = evaluate_attack(labels, blind_baseline_scores(texts, labels, seed=seed), max_fprs=sizes.max_fprs,
                              n_bootstrap=sizes.n_bootstrap, seed=seed)
    return BlindCheck(name, metrics, distribution_shift(metrics.auc))


def _lira(config: RunConfig, pool: list[str], members: set[str], records: dict[str, Ticket], sizes: TicketScale,
          out: Path) -> AttackFinding:
    """Train the shadow farm on the pool and attack the 4-epoch model with LiRA fitted on it.

    Univariate LiRA with one variance for all tickets: with 4 IN and 4 OUT shadows per ticket a per-ticket
    variance is too noisy (the fixed variance was also the strongest on candidates in docs/results/lira.md).
    """
    farm = out / "shadows"
    pool_file = atomic_write_text(farm / "pool.json", json.dumps(pool, ensure_ascii=False))
    settings = ShadowSettings(
        model=config.model, n_shadows=sizes.n_shadows, window=sizes.window, seed=config.data.seed,
        score_batch_size=config.audit.batch_size,
        pool=PoolSettings(corpus=None, path=str(pool_file), max_words=None, n_candidates=len(pool), n_population=0),
        training=dataclasses.replace(config.training, output_dir=str(farm / "trainer")))
    ShadowPlan.build(settings).save(farm)
    train_missing(farm)
    plan, losses = load_losses(farm)
    target, tokenizer = load_model(str(Path(config.training.output_dir) / "model"))
    stats = score_texts(target, tokenizer, plan.texts, batch_size=settings.score_batch_size,
                        max_length=settings.training.max_length, desc="LiRA target", distribution=False)
    scores = LiRA(estimator="univariate", variance="global").fit(losses, plan.keep).score_samples(
        loss_windows(stats, settings.window))
    labels = np.array([text in members for text in plan.texts], int)
    atomic_write_text(out / "lira-target.json", json.dumps({
        "attack": "LiRA univariate, global variance, online", "n_shadows": sizes.n_shadows,
        "sha256": [text_sha256(t) for t in plan.texts], "label": labels.tolist(), "score": scores.tolist()}))
    return _finding(f"LiRA ({sizes.n_shadows} shadows)", plan.texts, labels, scores, records, sizes, config.audit.seed)


def _strongest(run: RunResult, split: MembershipSplit, records: dict[str, Ticket], sizes: TicketScale) -> AttackFinding:
    """The audit's attack with the highest AUC, with the same exposure checks as LiRA's."""
    texts, labels = split.labels_and_texts()
    name = max(run.report.attacks, key=lambda a: run.report.attacks[a].auc.auc)
    return _finding(name, texts, labels, np.asarray(run.report.scores[name]), records, sizes,
                    run.report.config["seed"])


def _finding(attack: str, texts: Sequence[str], labels: np.ndarray, scores: np.ndarray,
             records: dict[str, Ticket], sizes: TicketScale, seed: int) -> AttackFinding:
    """Metrics, the `n_exposed` highest-scoring members, and whether near-duplicates and unusual names lead."""
    metrics = evaluate_attack(labels, scores, max_fprs=sizes.max_fprs, n_bootstrap=sizes.n_bootstrap, seed=seed)
    members = [i for i in np.argsort(-scores, kind="stable") if labels[i] == 1]
    top = members[:sizes.n_exposed]
    kinds: dict[str, Callable[[Ticket], bool]] = {
        "near-duplicate": lambda t: t.duplicate_group is not None, "unusual name": lambda t: t.unusual_name}
    checks = []
    for kind, has in kinds.items():
        flagged = np.array([has(records[texts[i]]) for i in members])
        ranked = scores[members]
        in_top = int(flagged[:len(top)].sum())
        p_rank = (mannwhitneyu(ranked[flagged], ranked[~flagged], alternative="greater").pvalue
                  if flagged.any() and (~flagged).any() else float("nan"))
        checks.append(ExposureCheck(kind, in_top, len(top), int(flagged.sum()), len(members),
                                    float(hypergeom.sf(in_top - 1, len(members), int(flagged.sum()), len(top))),
                                    float(p_rank)))
    exposed = [ExposedTicket(rank + 1, float(scores[i]), records[texts[i]]) for rank, i in enumerate(top)]
    return AttackFinding(attack, metrics, exposed, checks)


def _dedup_summary(split: MembershipSplit, deduplicated: MembershipSplit, clusters: list[list[str]],
                   records: dict[str, Ticket]) -> DedupSummary:
    """Counts of what de-duplication removed, checked against the near-duplicate groups the corpus recorded."""
    groups: dict[int, set[str]] = {}
    for side in ("members", "non_members", "validation"):
        for text in getattr(split, side):
            if records[text].duplicate_group is not None:
                groups.setdefault(records[text].duplicate_group, set()).add(text)
    recorded = [g for g in groups.values() if len(g) > 1]
    found = {frozenset(cluster) for cluster in clusters}
    removed = {side: len(getattr(split, side)) - len(getattr(deduplicated, side))
               for side in ("members", "non_members", "validation")}
    return DedupSummary(len(clusters), removed, len(recorded), sum(frozenset(g) in found for g in recorded),
                        len(split.near_duplicates))
