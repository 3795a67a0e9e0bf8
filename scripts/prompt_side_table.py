"""Print the prompt side's audit of each cell beside its completion side's, as one Markdown table.

    .venv/bin/python scripts/prompt_side_table.py runs/conversations/cells

A cell's completion side is its own report (`<cell>/report.json`, the tokens it trained on); its prompt side is
`<cell>/prompt-side/report.json`, the same split scored on the prompt tokens, which completion-only training never
put in the loss (experiments/run-conversations.sh writes it). For each side: the strongest attack by AUC, its AUC
with the 95 % interval, TPR at each FPR ceiling with its counts, and that attack's AUC minus the pretrained row's on
the same side and texts, with a paired bootstrap interval (✱: excludes 0; the pretrained row is the cell whose folder
starts with "pretrained"). The blind baseline's AUC guards the split. Cells whose prompt side has not been audited
yet are listed as pending.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from cells_table import print_cells_table

from privft.metrics import paired_auc_difference
from privft.report import read_report


def _tpr(entry: dict[str, Any]) -> str:
    """A TPR cell with its counts, or 'not estimable' where the FPR ceiling is below 1 / non-members."""
    if entry["tpr"] is None:
        return "not estimable"
    return f"{entry['tpr']:.3f} ({entry['true_positives']}/{entry['n_members']})"


def strongest(report: dict[str, Any]) -> str:
    """The report's attack of highest AUC."""
    return max(report["attacks"], key=lambda name: report["attacks"][name]["auc"]["auc"])


def side_cells(report: dict[str, Any]) -> list[str]:
    """Strongest attack, its AUC [CI] and TPR at each ceiling, for one report."""
    name = strongest(report)
    attack = report["attacks"][name]
    auc = attack["auc"]
    return [f"{name} {auc['auc']:.3f} [{auc['ci_low']:.2f}, {auc['ci_high']:.2f}]",
            *[_tpr(entry) for entry in attack["tpr_at_fpr"]]]


def versus(pretrained: dict[str, Any] | None, report: dict[str, Any]) -> str:
    """The report's strongest attack's AUC minus the pretrained report's, paired over the same texts."""
    if pretrained is None or pretrained is report:
        return "—"
    name, (before, after) = strongest(report), (pretrained.get("per_text"), report.get("per_text"))
    if not before or not after or before["sha256"] != after["sha256"] or name not in before["scores"]:
        return "n/a"
    a, b = (np.array(texts["scores"][name], dtype=float) for texts in (before, after))
    both = np.isfinite(a) & np.isfinite(b)
    difference = paired_auc_difference(np.array(after["label"])[both], a[both], b[both])
    return (f"{difference.difference:+.3f} [{difference.ci_low:+.3f}, {difference.ci_high:+.3f}]"
            + (" ✱" if difference.significant else ""))


def table(cells: list[Path]) -> str:
    """The Markdown table of every cell with both sides audited, then the pending cells."""
    done = [cell for cell in cells
            if (cell / "report.json").exists() and (cell / "prompt-side" / "report.json").exists()]
    if not done:
        raise SystemExit(f"No cell under {cells[0].parent if cells else 'the folder'} has both sides audited yet.")
    reports = {(cell, side): read_report(folder) for cell in done
               for side, folder in (("completion", cell), ("prompt", cell / "prompt-side"))}
    first = reports[done[0], "completion"]
    fprs = [f"{entry['max_fpr'] * 100:g} %" for entry in first["blind_baseline"]["tpr_at_fpr"]]
    header = ["Cell", "Side", "Strongest attack, AUC [95 % CI]", *[f"TPR @ FPR ≤ {fpr}" for fpr in fprs],
              "Its AUC − pretrained's [paired 95 % CI]", "Blind baseline AUC"]
    pretrained = next((cell for cell in done if cell.name.startswith("pretrained")), None)
    lines = [f"{first['split']['n_members']} members vs {first['split']['n_non_members']} non-members; the "
             "completion side scores the tokens trained on, the prompt side the tickets' own tokens.", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (cell, side), report in reports.items():
        blind = report["blind_baseline"]["auc"]["auc"]
        baseline = reports[pretrained, side] if pretrained else None
        lines.append("| " + " | ".join([cell.name, side, *side_cells(report), versus(baseline, report),
                                        f"{blind:.3f}"]) + " |")
    pending = sorted(set(cells) - set(done))
    if pending:
        lines += ["", "Pending (a side not audited yet): " + ", ".join(cell.name for cell in pending) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    print_cells_table(__doc__, table, "runs/conversations/cells")
