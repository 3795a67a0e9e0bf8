"""What privft's own measurements found for SOFT configurations, so a user is told where they add one.

Each finding cites a committed result (its page and the command that reproduces it) and the
records it was measured on: plain texts, or conversations trained on their completions. A
configuration measured as ineffective, or as costing more utility than fine-tuning gains, logs a
warning when a config selects it (`privft.pipeline.SoftSettings`, for texts) or when a run
obfuscates conversational records with it (`privft.pipeline`, for conversations).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """One measured SOFT configuration and, in one line with its counts, what it did."""

    rule: str
    mode: str
    paraphraser: str
    fraction: float  # the word-swap paraphraser's share of swapped words
    prefix_keep_ratio: float
    verdict: str
    source: str
    records: str = "text"  # what it was measured on: "text", or "conversations" (completion-only records)


FINDINGS = (
    Finding("paper", "prefix+rewrite", "neighbour", 0.5, 0.5,
            "barely protects: strongest-attack AUC 0.980 → 0.960 and TPR at FPR ≤ 1 % 10/48 → 9/48 against plain "
            "LoRA r=16 (48 members vs 100 non-members, overlapping intervals)",
            "docs/results/compare.md (privft compare experiments/compare-smollm2.yaml)"),
    Finding("release", "rewrite-only", "neighbour", 1.0, 0.5,
            "protects but costs more utility than fine-tuning gains: strongest-attack AUC 0.998 → 0.670 and TPR at "
            "FPR ≤ 0.1 % 435/500 → 3/500 against plain LoRA r=16, but validation perplexity 31.08 against 23.41 "
            "before fine-tuning and 15.96 for plain LoRA (500 members vs 2,000 non-members)",
            "docs/results/soft-study.md (privft compare experiments/soft-study.yaml)"),
    Finding("release", "prefix+rewrite", "neighbour", 1.0, 0.5,
            "leaks through its kept prefix: strongest-attack AUC 0.998 → 0.962 and TPR at FPR ≤ 1 % 475/500 → "
            "169/500 against plain LoRA r=16, and the attacker who scores only the kept first half reaches 0.967, as "
            "against plain LoRA (500 members vs 2,000 non-members; that attacker 300 vs 600); train on the rewritten "
            "part alone (mode: rewrite-only)",
            "docs/results/soft-study.md (privft compare experiments/soft-study.yaml)"),
    Finding("release", "rewrite-only", "neighbour", 1.0, 0.0,
            "protects no more than rewriting the second half alone and costs more utility than fine-tuning gains: "
            "strongest-attack AUC 0.998 → 0.724 and TPR at FPR ≤ 0.1 % 435/500 → 7/500 against plain LoRA r=16, "
            "but validation perplexity 42.07 against 23.41 before fine-tuning and 15.96 for plain LoRA (500 members "
            "vs 2,000 non-members)",
            "docs/results/soft-study.md (privft compare experiments/soft-study.yaml)"),
    Finding("all-after-warmup", "rewrite-only", "neighbour", 1.0, 0.5,
            "protects but costs more utility than fine-tuning gains: strongest-attack AUC 0.998 → 0.674 and TPR at "
            "FPR ≤ 0.1 % 435/500 → 0/500 against plain LoRA r=16, but validation perplexity 57.98 against 23.41 "
            "before fine-tuning and 15.96 for plain LoRA (500 members vs 2,000 non-members)",
            "docs/results/soft-study.md (privft compare experiments/soft-study.yaml)"),
    Finding("all", "rewrite-only", "neighbour", 1.0, 0.5,
            "protects only by not learning: strongest-attack AUC 0.527 and TPR at FPR ≤ 0.1 % 0/500, at validation "
            "perplexity 73.52 against 23.41 before fine-tuning (500 members vs 2,000 non-members)",
            "docs/results/soft-study.md (privft compare experiments/soft-study.yaml)"),
    Finding("paper", "rewrite-only", "neighbour", 1.0, 0.5,
            "protects, but the fine-tune no longer does its task: strongest-attack AUC 0.638 → 0.529 and TPR at "
            "FPR ≤ 0.1 % 3/500 → 0/500 against plain LoRA r=16 (completion tokens, 500 members vs 2,000 "
            "non-members); task accuracy on held-out tickets 0/200 against 195/200 for plain LoRA and 0/200 "
            "before fine-tuning, since replies are trained on their word-swapped second half alone; stopped by "
            "validation loss after its first epoch on paraphrases it keeps 65/200 (AUC 0.540, 1/500 at 0.1 % FPR) "
            "and leaves planted secrets ranked first or second (7.40 of 7.65 bits)",
            "docs/results/conversations.md (bash experiments/run-conversations.sh) and docs/results/frontier.md "
            "(bash experiments/run-frontier.sh)", records="conversations"),
)

NEIGHBOUR_DEFAULT_FRACTION = 0.15  # NeighbourParaphraser's own default


def finding_for(rule: str | None, mode: str, paraphraser: str, options: dict, prefix_keep_ratio: float,
                records: str = "text") -> Finding | None:
    """The measured finding for this SOFT configuration on these `records` ("text" or "conversations"), if any."""
    fraction = options.get("fraction", NEIGHBOUR_DEFAULT_FRACTION)
    for finding in FINDINGS:
        same_choices = (finding.rule, finding.mode, finding.paraphraser, finding.records) == (
            rule, mode, paraphraser, records)
        if same_choices and abs(finding.fraction - fraction) < 1e-9 and \
                abs(finding.prefix_keep_ratio - prefix_keep_ratio) < 1e-9:
            return finding
    return None
