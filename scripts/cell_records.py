"""Keep a comparison's finished cells across machines: `archive` copies each cell's records into a tracked folder,
`restore` copies them back, so a fresh checkout's `privft compare` skips the cells that already finished.

    python scripts/cell_records.py archive runs/conversations/cells experiments/records/conversations
    python scripts/cell_records.py restore runs/conversations/cells experiments/records/conversations

Records are the cell's small files (its row, report, split, training record, prompt-side report, ...): JSON,
Markdown, YAML and PNG files outside model weights and checkpoints. Weights stay behind, so a restored cell
can be tabled but not audited again; run any audit that needs the model (a prompt side) before archiving.
A file already at the destination is left as it is (restore never overwrites a newer run's record).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

RECORD_SUFFIXES = {".json", ".md", ".yaml", ".png"}
HEAVY_FOLDERS = ("model", "checkpoint-", "epoch-", "runs")  # weights, trainer checkpoints, per-epoch adapters, logs


def record_files(cell: Path) -> list[Path]:
    """The cell's record files, relative to the cell folder, skipping weights and checkpoints."""
    return sorted(path.relative_to(cell) for path in cell.rglob("*")
                  if path.is_file() and path.suffix in RECORD_SUFFIXES
                  and not any(part.startswith(HEAVY_FOLDERS) for part in path.relative_to(cell).parts[:-1]))


def copy_cells(source: Path, destination: Path, *, finished_only: bool) -> list[Path]:
    """Copy every cell's records from `source` to `destination` (cells with a cell.json when `finished_only`)."""
    copied = []
    for cell in sorted(p for p in source.glob("*") if p.is_dir()):
        if finished_only and not (cell / "cell.json").is_file():
            continue
        for relative in record_files(cell):
            target = destination / cell.name / relative
            if target.exists() and target.read_bytes() == (cell / relative).read_bytes():
                continue
            if target.exists() and not finished_only:
                continue  # restoring: a record already in the run folder stays as it is
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
    print(f"{args.action}: {len(copied)} file(s) copied into {args.records if args.action == 'archive' else args.cells}")


if __name__ == "__main__":
    main()
