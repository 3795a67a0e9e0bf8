"""Print the README's "What to pick" table from a comparison's compare.json: the named cells, at most eight.

    .venv/bin/python scripts/what_to_pick.py runs/frontier/compare.json "LoRA r=16, tuned" "SOFT paper (r=16), tuned"

For each cell, in the order given: its strongest attack's AUC with the 95 % interval, TPR at the lowest FPR ceiling
with its counts, task accuracy with its Wilson interval and counts, test perplexity with its interval, and the
training cost in CPU and wall hours (a tuned row's over every learning rate it tried). The full table stays in
docs/results/; the README keeps this decision.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privft.compare import pick_table

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("comparison", type=Path, help="a comparison's compare.json, e.g. runs/frontier/compare.json")
    parser.add_argument("cells", nargs="+", help="the cells' names, as in the grid, in the table's order")
    args = parser.parse_args()
    print(pick_table(json.loads(args.comparison.read_text(encoding="utf-8"))["rows"], args.cells), end="")
