"""Print the SOFT study's defaults table: each SOFT cell's protection per point of perplexity it costs.

    .venv/bin/python scripts/soft_defaults.py runs/soft-study/compare.json

Against plain LoRA at the base rank (the comparison's first LoRA row): the strongest attack's
AUC drop and its TPR at the lowest FPR ceiling (true positives of the members), each divided by
the validation perplexity the cell adds. Cells that did not fine-tune (perplexity not below the
pretrained model's) are listed apart: their protection is the model not learning.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def per_point(row: dict, lora: dict) -> dict:
    """The cell's AUC and TPR drops below plain LoRA, its perplexity cost, and each drop per point of that cost."""
    tpr, lora_tpr = row["strongest"]["tpr"][-1], lora["strongest"]["tpr"][-1]
    auc_drop = lora["strongest"]["auc"] - row["strongest"]["auc"]
    tpr_drop = lora_tpr["true_positives"] - tpr["true_positives"]
    cost = row["perplexity"] - lora["perplexity"]
    return {"auc_drop": auc_drop, "tpr_drop": tpr_drop, "cost": cost, "max_fpr": tpr["max_fpr"],
            "auc_per_point": auc_drop / cost if cost > 0 else float("inf"),
            "tpr_per_point": tpr_drop / cost if cost > 0 else float("inf")}


def main() -> None:
    """Print the Markdown table, the cells that fine-tuned first, by AUC drop per point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("comparison", type=Path, help="a privft compare output's compare.json")
    args = parser.parse_args()
    comparison = json.loads(args.comparison.read_text(encoding="utf-8"))
    rows = comparison["rows"]
    lora = next((row for row in rows if row["family"] == "lora"), None)
    if lora is None:
        raise SystemExit(f"{args.comparison} has no plain-LoRA row to measure the SOFT cells against.")
    soft = [(row, per_point(row, lora)) for row in rows if row["family"] == "soft"]
    learned = sorted((pair for pair in soft if pair[0]["perplexity"] < comparison["pretrained_perplexity"]),
                     key=lambda pair: -pair[1]["auc_per_point"])
    fpr = f"{soft[0][1]['max_fpr'] * 100:g} %" if soft else ""
    n = lora["strongest"]["tpr"][-1]["n_members"]
    print(f"| configuration | AUC drop | TPR@{fpr} drop (of {n}) | perplexity cost | AUC drop per point "
          "| TPR drop per point |")
    print("|---|---|---|---|---|---|")
    for row, m in learned:
        print(f"| {row['name']} | {lora['strongest']['auc']:.3f} → {row['strongest']['auc']:.3f}: {m['auc_drop']:.3f} "
              f"| {lora['strongest']['tpr'][-1]['true_positives']} → {row['strongest']['tpr'][-1]['true_positives']}: "
              f"{m['tpr_drop']} | {lora['perplexity']:.2f} → {row['perplexity']:.2f}: {m['cost']:.2f} "
              f"| {m['auc_per_point']:.3f} | {m['tpr_per_point']:.0f} |")
    unlearned = [row["name"] for row, _ in soft if row["perplexity"] >= comparison["pretrained_perplexity"]]
    if unlearned:
        print(f"\nNot fine-tuned (validation perplexity at or above the pretrained model's "
              f"{comparison['pretrained_perplexity']:.2f}): {', '.join(unlearned)}.")


if __name__ == "__main__":
    main()
