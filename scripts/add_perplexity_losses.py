"""Add the per-text held-out losses and the perplexity interval to finished cells whose reports predate them.

    .venv/bin/python scripts/add_perplexity_losses.py runs/scale/cells/*

Each cell folder holds `report.json`, `cell.json` (whose config rebuilds the split) and, for a
trained cell, its `model/` (the pretrained row scores the base model named in `cell.json`). The
validation texts are scored again with the audit's own settings and start token; the script
refuses a cell whose perplexity does not come out equal to the saved one (the saved model is then
not the audited one), and changes nothing else in the report. Rerun
`privft compare CONFIG --finished-only` afterwards to see the intervals.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from privft.audit import AuditConfig, held_out_perplexity
from privft.compare import finished_cell_config
from privft.config import from_dict
from privft.data.split import text_sha256
from privft.io import atomic_write_text
from privft.models import load_model
from privft.pipeline import load_split
from privft.scoring import score_texts, start_token_rule

TOLERANCE = 1e-5
"""Largest relative difference between the saved and the recomputed perplexity."""


def add_losses(cell: Path) -> str:
    """Score the cell's validation texts, check the perplexity, and write the losses into its report.json."""
    path = cell / "report.json"
    report = json.loads(path.read_text(encoding="utf-8"))
    saved = report["perplexity"]
    if saved.get("nll_sums"):
        return f"{cell.name}: already has per-text losses"
    run = finished_cell_config(cell)
    split = load_split(run.data)
    if [text_sha256(t) for t in split.labels_and_texts()[0]] != report["per_text"]["sha256"]:
        raise ValueError(f"{cell}: its config's split is not the one its report audited; nothing was written.")
    if saved["on"] != "validation" or len(split.validation) != saved["n_texts"]:
        raise ValueError(f"{cell}: its perplexity was measured on {saved['n_texts']} {saved['on']} texts, not on "
                         f"the split's {len(split.validation)} validation texts; this script adds validation losses "
                         "only.")
    config = from_dict(AuditConfig, report["config"], saved=True)
    source = cell / "model" if (cell / "model").is_dir() else run.model  # the pretrained row: the base model
    model, tokenizer = load_model(str(source))
    with start_token_rule(run.start_token):  # the token the cell's texts started from, as in its audit
        held_out = score_texts(model, tokenizer, split.validation, batch_size=config.batch_size,
                               max_length=config.max_length, stride=config.stride, desc=cell.name)
    measured = held_out_perplexity(held_out, "validation", config)
    if not math.isclose(measured.value, saved["value"], rel_tol=TOLERANCE):
        raise ValueError(f"{cell}: {source} scores perplexity {measured.value:.6f} on the validation texts, but the "
                         f"report saved {saved['value']:.6f}; that model is not the one audited, so nothing was "
                         "written. Re-run the cell instead.")
    report["perplexity"] = {**saved, "ci_low": measured.ci_low, "ci_high": measured.ci_high,
                            "nll_sums": measured.nll_sums, "token_counts": measured.token_counts}
    atomic_write_text(path, json.dumps(report, indent=1))
    return f"{cell.name}: perplexity {measured.value:.2f} [{measured.ci_low:.2f}, {measured.ci_high:.2f}]"


def main(argv: list[str] | None = None) -> None:
    """Add the losses to every finished cell folder given (report.json and cell.json); name each one refused."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="+", type=Path)
    refused = []
    for cell in parser.parse_args(argv).cells:
        if (cell / "report.json").exists() and (cell / "cell.json").exists():
            try:
                print(add_losses(cell), flush=True)
            except ValueError as error:
                refused.append(str(error))
    if refused:
        raise SystemExit("\n".join(refused))


if __name__ == "__main__":
    main()
