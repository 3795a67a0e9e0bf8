"""`privft reproduce <table> --scale quick|paper`: run the cells a table needs and print it beside the paper's."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

from privft.io import atomic_write_bytes, atomic_write_text
from privft.paper.plots import mean_auc_png
from privft.paper.published import load_published
from privft.paper.reproduce import METHODS, SCALES, run_cells
from privft.paper.tables import (
    adaptive_markdown,
    dp_published_markdown,
    perplexity_markdown,
    table1_markdown,
    tpr_markdown,
)

TABLES = {"table1": table1_markdown, "tpr": tpr_markdown, "perplexity": perplexity_markdown,
          "adaptive": adaptive_markdown}  # and "dp", which needs privft.dp
TABLE_METHODS = {"adaptive": ("full_ft", "soft")}


def reproduce(table: str, scale_name: str, out: str | Path, domains: tuple[str, ...] | None = None) -> str:
    """Compute (or reuse) the table's cells under `out`/<scale>, write <table>.md (table1: also a PNG), return it."""
    if table not in (*TABLES, "dp"):
        raise ValueError(f"Unknown table {table!r}; choose one of {', '.join(TABLES)}, dp.")
    if scale_name not in SCALES:
        raise ValueError(f"Unknown scale {scale_name!r}; choose one of {', '.join(SCALES)}.")
    published = load_published()
    if table == "dp" and importlib.util.find_spec("privft.dp") is None:
        raise ImportError("privft reproduce dp needs privft's DP-LoRA (privft.dp), which this installation lacks; "
                          "the published Table 5 cells are in experiments/paper/published.yaml:\n\n"
                          + dp_published_markdown(published))
    if table == "dp":
        raise NotImplementedError("privft.dp is installed but not yet wired into privft reproduce dp.")
    scale = SCALES[scale_name] if domains is None else replace(SCALES[scale_name], domains=domains)
    directory = Path(out) / scale_name
    cells = run_cells(scale, directory, TABLE_METHODS.get(table, METHODS))
    text = (f"## SOFT {table}: measured ({scale.model}, scale {scale_name}) vs published\n\n"
            f"{TABLES[table](cells, published)}")
    atomic_write_text(directory / f"{table}.md", text)
    if table == "table1":
        atomic_write_bytes(directory / "table1.png", mean_auc_png(cells, published))
    return text
