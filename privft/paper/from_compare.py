"""The paper's Table 1 layout filled from a comparison's cells (`privft reproduce table1 --from-compare CONFIG`)."""

from __future__ import annotations

import json

from privft.compare import PRETRAINED, CompareConfig, grid_cells, run_compare, slug
from privft.compare import Cell as GridCell
from privft.paper.published import domain_analogues
from privft.paper.reproduce import Cell


def release_faithful(cell: GridCell) -> bool:
    """Whether the cell is SOFT as the released code ran it: release rule, an LLM rewrite, trained on it alone."""
    soft = cell.config.soft
    return cell.family == "soft" and (soft.rule, soft.paraphraser, soft.mode) == ("release", "llm", "rewrite-only")


def paper_methods(config: CompareConfig) -> dict[str, str]:
    """Paper method → the comparison's cell standing for it: pretrained, FT, LoRA, SOFT (release rule; paper rule).

    SOFT is the release-faithful cell where the grid has one, else the release rule's cell at the grid's settings.
    """
    rank = config.run.training.lora.rank if config.run.training.lora else None
    cells = grid_cells(config)
    soft = next((cell.name for cell in cells if release_faithful(cell)), f"SOFT release (r={rank})")
    wanted = {"pretrained": PRETRAINED, "full_ft": "full fine-tuning", "lora": f"LoRA r={rank}",
              "soft": soft, "soft_paper": f"SOFT paper (r={rank})"}
    names = {cell.name for cell in cells}
    missing = [name for method, name in wanted.items() if name not in names and method != "soft_paper"]
    if missing:
        raise ValueError(f"The comparison has no cell {', '.join(map(repr, missing))}, which Table 1 needs: set "
                         "grid.full_finetune: true and put release in grid.soft_rules.")
    return {method: name for method, name in wanted.items() if name in names}


def paper_domain(config: CompareConfig) -> str:
    """The paper's dataset whose local analogue is the comparison's corpus (else its name; "local data" for a file)."""
    corpus = config.run.data.corpus
    if corpus is None:
        return "local data"
    return next((paper for paper, analogue in domain_analogues().items() if analogue.corpus == corpus), corpus)


def compare_cells(config: CompareConfig, *, finished_only: bool = False) -> tuple[list[Cell], list[str]]:
    """The comparison's cells that Table 1 needs, as the reproduction's cells, run (or reused), and those pending.

    `finished_only` runs none: the table holds the finished cells and names the pending ones.
    """
    methods = paper_methods(config)
    comparison = run_compare(config, only=list(methods.values()), finished_only=finished_only)
    rows = {row["name"]: row for row in comparison.rows}
    domain = paper_domain(config)
    cells = []
    for method, name in methods.items():
        row = rows.get(name)
        if row is None:
            continue
        report = json.loads((config.cells_path / slug(name) / "report.json").read_text(encoding="utf-8"))
        cells.append(Cell(domain, method, report, row["train_seconds"], row["adaptive"] or {}, row["privacy"]))
    return cells, [name for name in methods.values() if name not in rows]
