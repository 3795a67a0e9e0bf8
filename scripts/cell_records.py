"""Keep a comparison's finished cells across machines: `archive` copies each cell's records into a tracked folder,
`restore` copies them back, so a fresh checkout's `privft compare` skips the cells that already finished.

    python scripts/cell_records.py archive runs/conversations/cells experiments/records/conversations
    python scripts/cell_records.py restore runs/conversations/cells experiments/records/conversations

Records are the cell's small files (its row, report, split, training record, prompt-side report, ...): JSON,
Markdown, YAML and PNG files outside model weights and checkpoints. Weights stay behind, so a restored cell
can be tabled but not audited again; run any audit that needs the model (a prompt side) before archiving.
Of a tuned cell still running, each finished learning rate's folder (`tune/lr-*/` with its tune.json) is kept:
a fresh checkout skips those runs and trains the chosen one again to its epoch (`privft.tune`).
A file already at the destination is left as it is (restore never overwrites a newer run's record).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
from pathlib import Path

RECORD_SUFFIXES = {".json", ".md", ".yaml", ".png"}
HEAVY_FOLDERS = ("model", "checkpoint-", "epoch-", "runs")  # weights, trainer checkpoints, per-epoch adapters, logs


def record_files(cell: Path) -> list[Path]:
    """The cell's record files, relative to the cell folder, skipping weights and checkpoints."""
    return sorted(path.relative_to(cell) for path in cell.rglob("*")
                  if path.is_file() and path.suffix in RECORD_SUFFIXES
                  and not any(part.startswith(HEAVY_FOLDERS) for part in path.relative_to(cell).parts[:-1]))


def finished_records(cell: Path) -> list[Path]:
    """A finished cell's records, or those of a tuned cell's finished learning rates (none if neither)."""
    if (cell / "cell.json").is_file():
        return record_files(cell)
    done = [run.relative_to(cell) for run in cell.glob("tune/lr-*") if (run / "tune.json").is_file()]
    return [relative for relative in record_files(cell) if any(folder in relative.parents for folder in done)]


def copy_cells(source: Path, destination: Path, *, finished_only: bool) -> list[Path]:
    """Copy every cell's records from `source` to `destination` (only what has finished when `finished_only`)."""
    copied = []
    for cell in sorted(p for p in source.glob("*") if p.is_dir()):
        for relative in finished_records(cell) if finished_only else record_files(cell):
            target = destination / cell.name / relative
            # restoring, a record already in the run folder stays as it is; archiving, only a changed one is copied
            if target.exists() and (not finished_only or filecmp.cmp(target, cell / relative, shallow=False)):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(cell / relative, target)
            copied.append(target)
    return copied


def main() -> None:
    """Archive or restore a comparison's cell records."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["archive", "restore"])
    parser.add_argument("cells", type=Path, help="the comparison's cells folder, e.g. runs/conversations/cells")
    parser.add_argument("records", type=Path, help="the tracked records folder, e.g. experiments/records/NAME")
    args = parser.parse_args()
    if args.action == "archive":
        copied = copy_cells(args.cells, args.records, finished_only=True)
    else:
        copied = copy_cells(args.records, args.cells, finished_only=False) if args.records.is_dir() else []
    into = args.records if args.action == "archive" else args.cells
    print(f"{args.action}: {len(copied)} file(s) copied into {into}")


if __name__ == "__main__":
    main()
