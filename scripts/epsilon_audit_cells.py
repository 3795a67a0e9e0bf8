"""Print each cell's empirical ε beside its accountant's ε, as docs/results/epsilon-audit.md's table.

    .venv/bin/python scripts/epsilon_audit_cells.py runs/epsilon-audit/cells

For every finished cell (its `cell.json`, which `privft compare` writes last) with a one-run canary audit:
the accountant's ε per training sequence (∞ without DP), the black-box bound of each analysis (Steinke et
al.'s (ε, δ); the f-DP one of Mahloujifar et al.) with its correct guesses and its ceiling, and, where
DP-LoRA planted gradient canaries, the white-box bounds the same way. Cells without a one-run audit are
listed as skipped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from cells_table import print_cells_table

from privft.report import read_report


def _bounds(entry: dict[str, Any] | None) -> list[str]:
    """Steinke's and the f-DP bound of one audit, each as 'ε_lb (correct/guesses; ceiling c)', or dashes."""
    if entry is None:
        return ["–", "–"]
    fdp = entry["fdp"]
    return [f"{entry['epsilon_lower_bound']:.2f} ({entry['n_correct']}/{entry['n_guesses']}; ceiling "
            f"{entry['ceiling']:.2f})",
            f"{fdp['epsilon_lower_bound']:.2f} ({fdp['n_correct']}/{fdp['n_guesses']}; ceiling {fdp['ceiling']:.2f})"]


def _accountant(entry: dict[str, Any]) -> str:
    """The accountant's per-sequence ε and δ, or ∞ for an undefended run."""
    epsilon = entry["accountant_epsilon_per_sequence"]
    if epsilon is None or not math.isfinite(epsilon):
        return "∞ (no DP)"
    return f"{epsilon:.3g} (δ {entry['delta']:.0e})"


def table(cells: list[Path]) -> str:
    """One Markdown row per audited cell, then the cells skipped."""
    rows, skipped = [], []
    for cell in cells:
        report = read_report(cell) if (cell / "cell.json").exists() else None  # compare writes cell.json last
        black = report and report.get("epsilon_audit")
        if not black:
            skipped.append(cell.name)
            continue
        white = report.get("gradient_epsilon_audit")
        rows.append("| " + " | ".join([cell.name, _accountant(black), f"{black['n_canaries']} ({black['n_included']} "
                                       f"inserted)", *_bounds(black), *_bounds(white)]) + " |")
    header = ["Cell", "accountant ε", "canaries", "black-box ε_lb, Steinke", "black-box ε_lb, f-DP",
              "white-box ε_lb, Steinke", "white-box ε_lb, f-DP"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *rows]
    if skipped:
        lines += ["", "No one-run audit (not finished, or no one-run canaries): " + ", ".join(skipped) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    print_cells_table(__doc__, table, "runs/epsilon-audit/cells")
