"""Which orderings of the named cells hold across two seeds: one comparison's compare.json per seed.

    .venv/bin/python scripts/seed_orderings.py docs/results/frontier.json docs/results/frontier-seed1.json \\
        "LoRA r=16, tuned" "SOFT paper (r=16), tuned" "DP-LoRA ε=8 (r=16), tuned" "Goldfish k=4 (r=16), tuned"

For each measure (the strongest attack's AUC, TPR at each FPR ceiling, task accuracy, test perplexity), each
seed's cells from best to worst, "≻" (better than) where the two neighbours' 95 % intervals are disjoint and "⪰"
where they overlap or carry none (a TPR count's is its Wilson interval over the members). Then every pair of cells
whose order is the same at both seeds ("holds"; ✱ where the intervals are disjoint at both, or the one seed where
they are) and every pair whose order reverses, saying whether its intervals are disjoint at either seed (a reversal
within overlapping intervals at both is noise, not a finding). A cell missing from either comparison is named and
left out.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privft.metrics import wilson_interval

Reading = tuple[float, float | None, float | None]  # value, interval low, interval high


@dataclass(frozen=True)
class Measure:
    """One column of the comparison: how to read a row, and whether more is better."""

    label: str
    read: Callable[[dict[str, Any]], Reading | None]
    higher_is_better: bool


def _auc(row: dict[str, Any]) -> Reading:
    return row["strongest"]["auc"], *row["strongest"]["auc_ci"]


def _tpr(index: int) -> Callable[[dict[str, Any]], Reading | None]:
    def read(row: dict[str, Any]) -> Reading | None:
        """The members caught, with the 95 % Wilson interval over the members, in counts."""
        entry = row["strongest"]["tpr"][index]
        if entry["tpr"] is None:
            return None
        caught, members = entry["true_positives"], entry["n_members"]
        low, high = wilson_interval(caught, members)
        return caught, low * members, high * members
    return read


def _task(row: dict[str, Any]) -> Reading | None:
    task = row.get("task_accuracy")
    return (task["accuracy"], task["ci_low"], task["ci_high"]) if task else None


def _test_perplexity(row: dict[str, Any]) -> Reading | None:
    if row.get("test_perplexity") is None:
        return None
    return row["test_perplexity"], *(row.get("test_perplexity_ci") or (None, None))


def measures(rows: list[dict[str, Any]]) -> list[Measure]:
    """The measures every comparison carries, TPR at each of its FPR ceilings."""
    ceilings = [entry["max_fpr"] for entry in rows[0]["strongest"]["tpr"]]
    return [Measure("strongest attack AUC (lower: more private)", _auc, False),
            *[Measure(f"members caught at {fpr * 100:g} % FPR (fewer: more private)", _tpr(i), False)
              for i, fpr in enumerate(ceilings)],
            Measure("task accuracy (higher: more useful)", _task, True),
            Measure("test perplexity (lower: more useful)", _test_perplexity, False)]


def _better(a: Reading, b: Reading, higher_is_better: bool) -> bool:
    """Whether `a` is strictly better than `b`."""
    return a[0] > b[0] if higher_is_better else a[0] < b[0]


def _disjoint(a: Reading, b: Reading) -> bool:
    """Whether the two readings' intervals are known and do not overlap."""
    if None in (a[1], a[2], b[1], b[2]):
        return False
    return a[2] < b[1] or b[2] < a[1]


def ranking(readings: dict[str, Reading], higher_is_better: bool) -> str:
    """The cells from best to worst, "≻" between neighbours with disjoint intervals, "⪰" otherwise."""
    ordered = sorted(readings, key=lambda name: readings[name][0], reverse=higher_is_better)
    text = ordered[0]
    for before, after in itertools.pairwise(ordered):
        text += f" {'≻' if _disjoint(readings[before], readings[after]) else '⪰'} {after}"
    return text


def orderings(seeds: list[dict[str, dict[str, Any]]], names: list[str]) -> str:
    """The Markdown reading: each measure's ranking per seed, then the pairs that hold and those that reverse."""
    lines = ["| Measure | Seed A: best first | Seed B: best first |", "|---|---|---|"]
    holds, reverses = [], []
    for measure in measures(list(seeds[0].values())):
        readings = [{name: reading for name in names if (reading := measure.read(rows[name])) is not None}
                    for rows in seeds]
        common = [name for name in names if all(name in each for each in readings)]
        if len(common) < 2:
            continue
        lines.append(f"| {measure.label} | " + " | ".join(
            ranking({name: each[name] for name in common}, measure.higher_is_better) for each in readings) + " |")
        for a, b in itertools.combinations(common, 2):
            order = [_better(each[a], each[b], measure.higher_is_better) for each in readings]
            ties = [each[a][0] == each[b][0] for each in readings]
            if any(ties):
                continue
            first, second = (a, b) if order[0] else (b, a)
            disjoint = [seed for seed, each in zip("AB", readings) if _disjoint(each[a], each[b])]
            if order[0] == order[1]:
                if len(disjoint) == 2:
                    mark = " ✱"
                elif disjoint:
                    mark = f" (intervals disjoint at seed {disjoint[0]} only)"
                else:
                    mark = ""
                holds.append(f"{measure.label}: {first} better than {second}{mark}")
            else:
                where = (f"intervals disjoint at seed {' and '.join(disjoint)}" if disjoint
                         else "intervals overlap at both: within noise")
                reverses.append(f"{measure.label}: {first} better than {second} at seed A, not at seed B ({where})")
    lines += ["", "Best first: \"≻\" (better than) between neighbours whose 95 % intervals are disjoint, \"⪰\" "
                  "where they overlap or carry none.", "",
              "Orderings that hold at both seeds (✱: intervals disjoint at both):", "",
              *[f"- {line}" for line in holds or ["none"]],
              "", "Orderings that reverse:", "", *[f"- {line}" for line in reverses or ["none"]]]
    return "\n".join(lines) + "\n"


def main() -> None:
    """Print the reading for the named cells of two comparisons."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seed_a", type=Path, help="the first seed's compare.json")
    parser.add_argument("seed_b", type=Path, help="the second seed's compare.json")
    parser.add_argument("cells", nargs="+", help="the cells' names, as in both grids")
    args = parser.parse_args()
    seeds = [{row["name"]: row for row in json.loads(path.read_text(encoding="utf-8"))["rows"]}
             for path in (args.seed_a, args.seed_b)]
    missing = [f"{name} ({path})" for name in args.cells for path, rows in zip((args.seed_a, args.seed_b), seeds)
               if name not in rows]
    names = [name for name in args.cells if all(name in rows for rows in seeds)]
    if missing:
        print(f"Not finished, left out: {'; '.join(missing)}.\n")
    print(orderings(seeds, names), end="")


if __name__ == "__main__":
    main()
