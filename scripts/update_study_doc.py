"""Refresh a results page's measured tables from a comparison's compare.md, between its two marker lines.

    .venv/bin/python scripts/update_study_doc.py runs/soft-study docs/results/soft-study.md

The page keeps `<!-- compare.md begins -->` and `<!-- compare.md ends -->` lines; everything between
them is replaced by the comparison's compare.md, and its rows and plots are copied beside the page
(compare.json as PAGE.json, compare.png as PAGE.png, and compare-rank.png, where the grid has two LoRA
ranks, as PAGE-rank.png).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

BEGIN, END = "<!-- compare.md begins -->", "<!-- compare.md ends -->"


def refreshed(page: str, table: str) -> str:
    """`page` with the text between its markers replaced by `table`."""
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise SystemExit(f"The page needs one {BEGIN!r} line followed by one {END!r} line.")
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table.strip()}\n{END}{tail}"


def main() -> None:
    """Replace the page's measured tables and copy its rows and plots."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("comparison", type=Path,
                        help="a privft compare output_dir (compare.md, compare.json, compare.png)")
    parser.add_argument("page", type=Path, help="the results page to refresh")
    args = parser.parse_args()
    page = args.page.read_text(encoding="utf-8")
    args.page.write_text(refreshed(page, (args.comparison / "compare.md").read_text(encoding="utf-8")),
                         encoding="utf-8")
    shutil.copyfile(args.comparison / "compare.json", args.page.with_suffix(".json"))
    shutil.copyfile(args.comparison / "compare.png", args.page.with_suffix(".png"))
    rank_curve = args.comparison / "compare-rank.png"
    if rank_curve.exists():
        shutil.copyfile(rank_curve, args.page.with_name(f"{args.page.stem}-rank.png"))


if __name__ == "__main__":
    main()
