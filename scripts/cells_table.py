"""The command line of the scripts that print one Markdown table over a comparison's cell folders."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def print_cells_table(doc: str, table: Callable[[list[Path]], str], example: str) -> None:
    """Parse `cells` (a comparison's cells_dir, e.g. `example`) and print `table` of its cell folders, sorted."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", type=Path, help=f"a comparison's cells_dir, e.g. {example}")
    args = parser.parse_args()
    print(table(sorted(path for path in args.cells.iterdir() if path.is_dir())))
