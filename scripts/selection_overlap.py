"""Print how far two SOFT runs' selections overlap, selection by selection (Jaccard of the selected training indices).

    .venv/bin/python scripts/selection_overlap.py runs/scale/cells/soft-paper-r-16 \
        runs/scale/cells/soft-paper-training-pass-losses

Each run folder holds `soft_selections.json` (written by `privft train`); the runs must share a split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def jaccard(a: set[int], b: set[int]) -> float:
    """|a ∩ b| / |a ∪ b|, and 1.0 for two empty sets."""
    return len(a & b) / len(a | b) if a | b else 1.0


def selections(run: Path) -> list[dict]:
    """The run's selection records, one per selection epoch."""
    path = run / "soft_selections.json"
    if not path.exists():
        raise SystemExit(f"{path} does not exist: give the folder of a finished `privft train` run with SOFT.")
    return json.loads(path.read_text(encoding="utf-8"))


def main() -> None:
    """Print one Markdown row per selection epoch the two runs share."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args()
    first, second = selections(args.first), selections(args.second)
    print(f"| epoch | {args.first.name}: selected ({first[0]['loss_source']} losses) | "
          f"{args.second.name}: selected ({second[0]['loss_source']} losses) | both | Jaccard |")
    print("|---|---|---|---|---|")
    for a, b in zip(first, second):
        if a["n_total"] != b["n_total"]:
            raise SystemExit(f"The runs select among {a['n_total']} and {b['n_total']} samples: not the same split.")
        picked_a, picked_b = set(a["selected"]), set(b["selected"])
        print(f"| {a['epoch']} | {len(picked_a)}/{a['n_total']} | {len(picked_b)}/{b['n_total']} | "
              f"{len(picked_a & picked_b)} | {jaccard(picked_a, picked_b):.2f} |")


if __name__ == "__main__":
    main()
