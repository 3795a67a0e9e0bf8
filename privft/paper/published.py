"""The SOFT paper's published numbers (experiments/paper/published.yaml) and the arithmetic behind its aggregates."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import yaml

PUBLISHED_FILE = Path(__file__).resolve().parents[2] / "experiments" / "paper" / "published.yaml"
DATASETS_FILE = PUBLISHED_FILE.with_name("datasets.yaml")
DEFAULT_TOLERANCE = 5e-4  # the paper prints three decimals


@dataclass(frozen=True)
class Aggregate:
    """One published number, where it was read, and (optionally) how it follows from published cells."""

    name: str
    value: float
    provenance: str
    recompute: str | None = None
    tolerance: float = DEFAULT_TOLERANCE


@dataclass(frozen=True)
class Published:
    """Table 1's per-cell AUCs, every aggregate, and the DP table's layout."""

    attacks: tuple[str, ...]
    datasets: tuple[str, ...]
    cells: dict[str, dict[str, tuple[float, ...]]]  # method -> dataset -> AUC per attack
    aggregates: dict[str, Aggregate]
    dp_rows: tuple[dict[str, str], ...]
    dp_columns: tuple[str, ...]

    def cell(self, method: str, dataset: str, attack: str) -> float | None:
        """A published Table 1 AUC, or None where the paper's cell is not in our sources."""
        values = self.cells.get(method, {}).get(dataset)
        return None if values is None else values[self.attacks.index(attack)]

    def value(self, name: str) -> float:
        """The published aggregate called `name`."""
        try:
            return self.aggregates[name].value
        except KeyError:
            raise ValueError(f"No published aggregate {name!r}; see {PUBLISHED_FILE}.") from None

    def recomputed(self, aggregate: Aggregate) -> float:
        """The aggregate's value computed from the published cells (see `recompute` in the YAML)."""
        if aggregate.recompute is None:
            raise ValueError(f"{aggregate.name} has no cells to recompute it from ({aggregate.provenance}).")
        operation, *arguments = aggregate.recompute.split(":")
        if operation == "mean":
            return float(np.mean([np.mean(v) for v in self.cells[arguments[0]].values()]))
        if operation == "column_mean":
            return float(np.mean(self.cells[arguments[0]][arguments[1]]))
        if operation in ("attack_min", "attack_max"):
            method, attack = arguments
            column = [v[self.attacks.index(attack)] for v in self.cells[method].values()]
            return float(min(column) if operation == "attack_min" else max(column))
        if operation == "ratio":
            return self.value(arguments[0]) / self.value(arguments[1])
        raise ValueError(f"{aggregate.name}: unknown recompute operation {operation!r} in {PUBLISHED_FILE}.")


@cache
def load_published(path: Path = PUBLISHED_FILE) -> Published:
    """Parse the published-numbers file."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    cells = {method: {d: tuple(v) for d, v in by_dataset.items()}
             for method, by_dataset in data["table1"]["cells"].items()}
    aggregates = {a["name"]: Aggregate(**a) for a in data["aggregates"]}
    return Published(tuple(data["attacks"]), tuple(data["datasets"]), cells, aggregates,
                     tuple(data["dp_table"]["rows"]), tuple(data["dp_table"]["columns"]))


@dataclass(frozen=True)
class DomainAnalogue:
    """A paper dataset and the offline corpus that stands in for it (None: no offline source)."""

    paper: str
    corpus: str | None
    why: str
    candidate: str | None = None


@cache
def domain_analogues(path: Path = DATASETS_FILE) -> dict[str, DomainAnalogue]:
    """Paper dataset name -> its local analogue."""
    return {d["paper"]: DomainAnalogue(**d) for d in yaml.safe_load(path.read_text(encoding="utf-8"))}
