"""`privft reproduce <table> --scale quick|paper` (or `--from-compare CONFIG`): a table's cells beside the paper's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from privft.compare import CompareConfig
from privft.config import load_yaml
from privft.io import atomic_write_bytes, atomic_write_text
from privft.paper.from_compare import compare_cells
from privft.paper.plots import mean_auc_png
from privft.paper.published import load_published
from privft.paper.reproduce import METHODS, SCALES, run_cells
from privft.paper.tables import (
    adaptive_markdown,
    dp_markdown,
    perplexity_markdown,
    table1_markdown,
    tpr_markdown,
)

TABLES = {"table1": table1_markdown, "tpr": tpr_markdown, "perplexity": perplexity_markdown,
          "adaptive": adaptive_markdown, "dp": dp_markdown}
TABLE_METHODS = {"adaptive": ("full_ft", "soft"), "dp": ("pretrained", "dp_eps_0.01", "dp_eps_100", "soft")}


def reproduce(table: str, scale_name: str, out: str | Path, domains: tuple[str, ...] | None = None) -> str:
    """Compute (or reuse) the table's cells under `out`/<scale>, write <table>.md (table1: also a PNG), return it."""
    if table not in TABLES:
        raise ValueError(f"Unknown table {table!r}; choose one of {', '.join(TABLES)}.")
    if scale_name not in SCALES:
        raise ValueError(f"Unknown scale {scale_name!r}; choose one of {', '.join(SCALES)}.")
    published = load_published()
    scale = SCALES[scale_name] if domains is None else replace(SCALES[scale_name], domains=domains)
    directory = Path(out) / scale_name
    cells = run_cells(scale, directory, TABLE_METHODS.get(table, METHODS))
    text = (f"## SOFT {table}: measured ({scale.model}, scale {scale_name}) vs published\n\n"
            f"{TABLES[table](cells, published)}")
    atomic_write_text(directory / f"{table}.md", text)
    if table == "table1":
        atomic_write_bytes(directory / "table1.png", mean_auc_png(cells, published))
    return text


def reproduce_from_compare(table: str, config_path: str | Path, *, finished_only: bool = False) -> str:
    """Table 1's layout filled from the cells of the comparison `config_path` (run or reused), beside the paper's.

    `finished_only` runs no cell: the table holds the finished ones and names the pending ones.
    """
    if table != "table1":
        raise ValueError(f"--from-compare fills table1 only (a comparison's audit has no context attacks for {table});"
                         f" run `privft reproduce {table} --scale quick` instead.")
    config = load_yaml(CompareConfig, config_path)
    cells, pending = compare_cells(config, finished_only=finished_only)
    text = (f"## SOFT table1: measured ({config.run.model}, the split of {config_path}) vs published\n\n"
            f"{table1_markdown(cells, load_published())}")
    if pending:
        text += f"\nPending cells (not yet run; rerun without --finished-only to run them): {', '.join(pending)}.\n"
    directory = Path(config.output_dir)
    atomic_write_text(directory / "table1.md", text)
    atomic_write_bytes(directory / "table1.png", mean_auc_png(cells, load_published()))
    return text
