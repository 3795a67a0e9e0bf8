"""Print each attack's score among members and among non-members (mean and standard deviation) from a report.

    .venv/bin/python scripts/score_spread.py runs/conversations/cells/lora-r-16 [ATTACK ...]

Reads `<run>/report.json`'s per-text scores (higher = more member-like). It says how far the members' scores
shift and how widely each side's spread, which an AUC alone hides: a reference attack subtracts the base
model's score, and fails where that score spreads far wider than the members' shift.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from privft.report import read_report


def spread_table(report: dict, attacks: list[str]) -> str:
    """A Markdown table: per attack, members' and non-members' mean (sd) and the shift between the means."""
    per_text = report["per_text"]
    members = np.array(per_text["label"]) == 1
    lines = [f"{members.sum()} members vs {(~members).sum()} non-members.", "",
             "| Attack | Members: mean (sd) | Non-members: mean (sd) | Members − non-members |", "|---|---|---|---|"]
    for attack in attacks or [name for name in per_text["scores"] if name != "blind_baseline"]:
        scores = np.array(per_text["scores"][attack], dtype=float)
        inside, outside = scores[members & np.isfinite(scores)], scores[~members & np.isfinite(scores)]
        lines.append(f"| {attack} | {inside.mean():.3f} ({inside.std():.3f}) | {outside.mean():.3f} "
                     f"({outside.std():.3f}) | {inside.mean() - outside.mean():+.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a folder holding report.json, e.g. runs/conversations/cells/lora-r-16")
    parser.add_argument("attacks", nargs="*", help="the attacks to show (default: every one the report scored)")
    args = parser.parse_args()
    print(spread_table(read_report(args.run), args.attacks))
