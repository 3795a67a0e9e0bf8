"""Task accuracy of a tuned cell's kept epochs at its chosen learning rate: does validation loss stop where the task
peaks?

    .venv/bin/python scripts/task_accuracy_by_epoch.py runs/frontier-seed1/cells/lora-r-16-tuned --epochs 2 3

It reads the held-out tickets that the audit's task accuracy reads (the test side), so it checks the
selection rule and never chooses: the cell's row stays the epoch that validation loss chose. For each
epoch: its validation loss, its task accuracy with a Wilson interval and counts, and the fixes it got
wrong, each with how many members (trained tickets) carry that fix.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from privft.compare import finished_cell_config
from privft.data.tickets_chat import record_fix
from privft.models import load_model
from privft.pipeline import load_split
from privft.task_accuracy import held_out_tickets, measure_task_accuracy
from privft.tune import FINISHED, rate_folder


def wrong_by_fix(fixes: list[str], correct: list[bool], members: Counter[str]) -> str:
    """The fixes a model got wrong: "wrong/asked (members with it) fix", most missed first."""
    asked, missed = Counter(fixes), Counter(fix for fix, right in zip(fixes, correct) if not right)
    return "; ".join(f"{missed[fix]}/{asked[fix]} ({members[fix]} members) {fix[:40]}…"
                     for fix in sorted(missed, key=lambda fix: (-missed[fix], fix))) or "none"


def main(argv: list[str] | None = None) -> None:
    """Print each requested epoch's validation loss, task accuracy and missed fixes."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cell", type=Path, help="a finished tuned cell's folder (cell.json, tune/)")
    parser.add_argument("--epochs", type=int, nargs="+", help="the epochs to measure (default: every kept one)")
    args = parser.parse_args(argv)
    row = json.loads((args.cell / "cell.json").read_text(encoding="utf-8"))
    if not row.get("tune"):
        raise SystemExit(f"{args.cell}: not a tuned cell (its cell.json has no tune record); name a tuned cell.")
    run, rate = finished_cell_config(args.cell), row["tune"]["learning_rate"]
    if run.audit.task is None:
        raise SystemExit(f"{args.cell}: its audit measured no task accuracy (audit.task is null).")
    folder = rate_folder(args.cell, rate)
    kept = json.loads((folder / FINISHED).read_text(encoding="utf-8"))["epochs"]
    wanted = [entry for entry in kept if args.epochs is None or entry["epoch"] in args.epochs]
    split = load_split(run.data)
    on, records = held_out_tickets(split, run.audit.task.max_texts)  # the tickets measure_task_accuracy reads
    fixes = [record_fix(record).text for record in records]
    members = Counter(record_fix(record).text for record in split.members)
    print(f"{args.cell}: learning rate {rate:g}, chosen epoch {row['tune']['epoch']}; task accuracy on {len(fixes)} "
          f"{on} tickets")
    for entry in wanted:
        checkpoint = folder / entry["checkpoint"]
        if not checkpoint.is_dir():
            raise SystemExit(f"{checkpoint} is gone (records restored without weights); rerun the cell's tuning.")
        model, tokenizer = load_model(str(checkpoint))
        task = measure_task_accuracy(model, tokenizer, split, run.audit.task, batch_size=run.audit.batch_size)
        print(f"epoch {entry['epoch']}: validation loss {entry['validation_loss']:.4f}; task accuracy "
              f"{task.accuracy.format()}; wrong: {wrong_by_fix(fixes, task.correct, members)}", flush=True)


if __name__ == "__main__":
    main()
