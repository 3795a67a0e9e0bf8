"""The Markdown page of the support-ticket walk-through: both audits, LiRA's findings, the gate verdicts, the card."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import yaml

from privft.callbacks.audit import model_card_section
from privft.config import to_dict
from privft.data.dedup import DEDUP_NGRAM_WORDS, DEDUP_THRESHOLD
from privft.data.tickets import LICENCE
from privft.gate import Verdict
from privft.metrics import AttackMetrics
from privft.report import AuditReport, tpr_cell

if TYPE_CHECKING:
    from privft.examples.support_tickets import AttackFinding, BlindCheck, TicketWalkthrough

PAGE = "support-tickets.md"
SIGNIFICANCE = 0.05


def render(walk: TicketWalkthrough) -> str:
    """The whole page, steps in order, every number with its counts."""
    return "\n".join([*_header(walk), *_split(walk), *_blind(walk), *_scores(walk), *_lira(walk),
                      *_decision(walk), *_card(walk)]) + "\n"


def _header(walk: TicketWalkthrough) -> list[str]:
    steps = ", ".join(f"{name} {_duration(seconds)}" for name, seconds in walk.seconds.items())
    return [f"# Releasing a support-ticket fine-tune: seed 000's walk-through ({walk.scale_name} scale)", "",
            "```bash", f"privft example support-tickets --scale {walk.scale_name} --model {walk.model} "
            f"--seed {walk.seed} --out {walk.output_dir}", "```", "",
            f"Model {walk.model} with LoRA (r {walk.before.report.training.lora_rank}); corpus `tickets` "
            f"(licence: {LICENCE}), seed {walk.seed}. Every number below was measured by this run: "
            f"{_duration(sum(walk.seconds.values()))} in all ({steps}). Run folders: `before/`, `after/` (a "
            "`privft train` run each: report, model, model card, gate.json), `shadows/` (the farm), "
            "`lira-target.json`.", ""]


def _split(walk: TicketWalkthrough) -> list[str]:
    month = walk.month
    groups = {t.duplicate_group for t in month if t.duplicate_group is not None}
    counts, c = walk.split.counts(), walk.canaries
    flagged = walk.dedup.split_flagged
    return ["## 1. Split first", "",
            f"One month of {len(month):,} tickets: {len(groups)} groups of near-duplicates (a long ticket sent "
            f"again with small edits; {sum(t.duplicate_group is not None for t in month)} tickets) and "
            f"{sum(t.unusual_name for t in month)} tickets from customers with unusual names, both recorded by the "
            f"generator. A random split drawn before training: **{counts['members']} members, "
            f"{counts['non_members']} non-members, {counts['validation']} validation tickets**. The split's own "
            f"check flags {flagged} held-out ticket{'s' if flagged != 1 else ''} sharing ≥ 80 % of their 13-word "
            "n-grams with a member: near-duplicates reach across the split, as they do in real ticket data.", "",
            f"Canaries: {c.n_canaries} email addresses, {c.copies} copies each, in \"you can reach the customer "
            f"at …\" (privft.data.pii), each ranked among {c.n_alternatives} addresses of the same format.", ""]


def _blind(walk: TicketWalkthrough) -> list[str]:
    rows = [_blind_row(check) for check in walk.blind]
    random_split, next_month = walk.blind
    return ["## 2. Blind baseline (no model)", "",
            "TF-IDF + logistic regression, out of fold: if it tells members from non-members, the split leaks.", "",
            "| Split | Members | Non-members | AUC [95 % CI] | Verdict |", "|---|---|---|---|---|", *rows, "",
            f"The random split is {_shift_words(random_split.shift)}. With next month's tickets as non-members the "
            f"baseline {'fires' if next_month.shift else 'does not fire'}: the Nimbra Aura launch changed what "
            "customers write about, so every attack on that split would measure the launch, not memorisation. "
            "**That split stops here**; the rest uses the random split.", ""]


def _blind_row(check: BlindCheck) -> str:
    auc = check.metrics.auc
    return (f"| {check.name} | {auc.n_members} | {auc.n_non_members} | {auc.auc:.3f} [{auc.ci_low:.3f}, "
            f"{auc.ci_high:.3f}] | {_shift_words(check.shift)} |")


def _shift_words(shift: bool | None) -> str:
    return {None: "too small for a verdict", True: "**distribution shift**", False: "near chance"}[shift]


def _scores(walk: TicketWalkthrough) -> list[str]:
    return [f"## 3. Scores: LoRA, {walk.scale.epochs_before} epochs, base model as reference", "",
            *_demoted(walk.before.report.to_markdown()), ""]


def _lira(walk: TicketWalkthrough) -> list[str]:
    lira, scale = walk.lira, walk.scale
    auc = lira.metrics.auc
    rows = [f"| {e.rank} | {e.score:.2f} | {'' if e.ticket.duplicate_group is None else e.ticket.duplicate_group} "
            f"| {'yes' if e.ticket.unusual_name else ''} | {_subject(e.ticket.text)} — {e.ticket.customer} |"
            for e in lira.exposed]
    checks = [row for finding in (lira, walk.strongest) for row in _check_rows(finding)]
    return [f"## 4. LiRA with {scale.n_shadows} LoRA shadows", "",
            f"The pool: the {auc.n_members} members and {auc.n_non_members} of the non-members. Each of the "
            f"{scale.n_shadows} shadows fine-tunes the base model on a random half of it (every ticket IN for "
            f"{scale.n_shadows // 2}), with the target's recipe ({scale.epochs_before} epochs, no canaries); LiRA "
            f"(univariate, one variance for all tickets, online) fitted on their per-token losses of the first "
            f"{scale.window} tokens then attacks the {scale.epochs_before}-epoch model itself: "
            f"{_metrics_line(lira.metrics)}.", "",
            f"The {len(lira.exposed)} most exposed members (highest LiRA score):", "",
            "| Rank | LiRA score | Near-duplicate group | Unusual name | Ticket — customer |", "|---|---|---|---|---|",
            *rows, "",
            "Are they the near-duplicates and the unusual names? Counts among the most exposed members against "
            "all members, the chance of at least that many in a random draw (hypergeometric), and a rank test "
            "over all members (one-sided Mann–Whitney), for LiRA and for the audit's strongest attack:", "",
            "| Attack | Kind | Among the most exposed | Among all members | P(≥ by chance) | Rank test p |",
            "|---|---|---|---|---|---|", *checks, "", _answer(lira), ""]


def _check_rows(finding: AttackFinding) -> list[str]:
    return [f"| {finding.attack} | {c.kind} | {c.in_top}/{c.n_top} | {c.in_members}/{c.n_members} | {c.p_top:.3g} "
            f"| {'—' if math.isnan(c.p_rank) else f'{c.p_rank:.3g}'} |" for c in finding.checks]


def _answer(finding: AttackFinding) -> str:
    """The check in words, at the 5 % level, with what a null result does and does not say."""
    parts = []
    for c in finding.checks:
        significant = c.p_top < SIGNIFICANCE or c.p_rank < SIGNIFICANCE
        parts.append(f"{c.kind}s {'are' if significant else 'are not shown to be'} over-represented "
                     f"({c.in_top} of the top {c.n_top} against {c.in_members} of {c.n_members} members)")
    return (f"Measured answer ({finding.attack}, 5 % level): " + "; ".join(parts) + ". With this few members a "
            "test that finds nothing rules little out.")


def _decision(walk: TicketWalkthrough) -> list[str]:
    d, scale = walk.dedup, walk.scale
    removed = ", ".join(f"{side.replace('_', '-')} {n}" for side, n in d.removed.items())
    before, after = walk.before, walk.after
    policy = yaml.safe_dump(to_dict(scale.policy), sort_keys=False, allow_unicode=True).strip()
    return ["## 5. The decision: de-duplicate, 2 epochs, audit again, gate", "",
            f"De-duplication (word {DEDUP_NGRAM_WORDS}-gram Jaccard ≥ {DEDUP_THRESHOLD}, linked copies form one "
            f"cluster, the first copy kept with members first): {d.n_clusters} clusters; removed: {removed}. Of the "
            f"{d.recorded_groups} recorded near-duplicate groups with two or more copies in the split, "
            f"{d.recovered_groups} were found exactly. Then {scale.epochs_after} epochs instead of "
            f"{scale.epochs_before}, the same canaries, the same audit.", "",
            *_demoted(after.report.to_markdown()), "",
            "### Before and after", "",
            "| | Before | After |", "|---|---|---|",
            *_comparison_rows(before.report, after.report, before.verdict, after.verdict, walk.default_verdicts), "",
            "### The release gate", "",
            "The policy, fixed before either model was trained (counts lowered to this scale's size; the default "
            "policy's rows above show that 1,000 members and non-members are what a release needs):", "",
            "```yaml", policy, "```", "",
            "Before:", "", *_demoted(before.verdict.to_markdown()), "", "After:", "",
            *_demoted(after.verdict.to_markdown()), ""]


def _comparison_rows(before: AuditReport, after: AuditReport, gate_before: Verdict, gate_after: Verdict,
                     default: dict[str, Verdict]) -> list[str]:
    def strongest(report: AuditReport) -> str:
        name = max(report.attacks, key=lambda a: report.attacks[a].auc.auc)
        return f"{name}: {_metrics_line(report.attacks[name])}"

    def exposure(report: AuditReport) -> str:
        c = report.canary_exposure
        return f"max {c['max_exposure']:.2f}, mean {c['mean_exposure']:.2f} bits (at most {c['max_measurable']:.2f})"

    def training(report: AuditReport) -> str:
        t = report.training
        return f"{t.method} r {t.lora_rank}, {t.epochs:g} epochs on {t.n_training_texts} texts ({t.canaries})"

    rows = [("Training", training(before), training(after)),
            ("Members / non-members", f"{before.split['n_members']} / {before.split['n_non_members']}",
             f"{after.split['n_members']} / {after.split['n_non_members']}"),
            ("Strongest attack (AUC)", strongest(before), strongest(after)),
            ("Canary exposure", exposure(before), exposure(after)),
            (f"Perplexity ({before.perplexity.on})", f"{before.perplexity.value:.2f}", f"{after.perplexity.value:.2f}"),
            ("Gate, this policy", gate_before.headline(), gate_after.headline()),
            ("Gate, default policy", default["before"].headline(), default["after"].headline())]
    return [f"| {name} | {a} | {b} |" for name, a, b in rows]


def _card(walk: TicketWalkthrough) -> list[str]:
    section = model_card_section(walk.after.report, walk.after.verdict)
    return ["## The model card", "",
            f"The privacy section `privft train` wrote to `after/model/README.md` (the page is `{PAGE}`):", "",
            "<details><summary>Model-card section of the de-duplicated, 2-epoch model</summary>", "",
            *_demoted(section), "", "</details>"]


def _metrics_line(metrics: AttackMetrics) -> str:
    auc = metrics.auc
    tprs = ", ".join(f"TPR @ FPR ≤ {t.max_fpr * 100:g} % {tpr_cell(t)}" for t in metrics.tpr_at_fpr)
    return (f"AUC {auc.auc:.3f} [{auc.ci_low:.3f}, {auc.ci_high:.3f}] on {auc.n_members} members vs "
            f"{auc.n_non_members} non-members; {tprs}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _subject(text: str) -> str:
    return next((line.removeprefix("Subject: ") for line in text.splitlines() if line.startswith("Subject: ")), "")


def _demoted(markdown: str) -> list[str]:
    """The lines of an embedded Markdown block with each heading one level lower, under this page's sections."""
    return [f"#{line}" if line.startswith("#") else line for line in markdown.strip().splitlines()]
