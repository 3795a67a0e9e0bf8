"""Time a finished tuned cell's run at one learning rate again on this machine's CPU, into a CPU reference file.

    .venv/bin/python scripts/cpu_reference.py experiments/frontier-seed1.yaml "LoRA r=16, tuned" 0.001 \\
        experiments/records/cpu-reference.json

The cell's own run at that rate (its tune.json, on whichever CPU trained it) and this machine's run of the same
seeded workload (into runs/cpu-reference/<cell>/<cpu>/; none where the file holds this CPU already) go into the
reference file, which a comparison's `cpu_reference` reads to convert a row's CPU seconds to its baseline's CPU
(privft.cpu_reference). The runs' validation losses are recorded side by side: equal ones show the same computation
ran.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from privft.clock import CPU_NOT_RECORDED, cpu_model
from privft.compare import CompareConfig, cell_conditions, grid_cells, slug
from privft.config import load_yaml
from privft.cpu_reference import CpuReference
from privft.tune import FINISHED, rate_config, rate_folder, tuning_run

RUNS = Path("runs/cpu-reference")


def reference_run(record: dict[str, Any], path: Path) -> dict[str, Any]:
    """A tuning record as one run of the reference: its CPU, seconds, and each epoch's validation loss and wall
    seconds (records from before they were kept have None)."""
    return {"cpu": record.get("cpu", CPU_NOT_RECORDED), "train_cpu_seconds": record["train_cpu_seconds"],
            "train_seconds": record["train_seconds"], "record": str(path), "resumed_from": record["resumed_from"],
            "validation_losses": [epoch["validation_loss"] for epoch in record["epochs"]],
            "validation_seconds": [epoch.get("validation_seconds") for epoch in record["epochs"]]}


def measure(config_path: Path, cell_name: str, rate: float, reference_path: Path) -> CpuReference:
    """Add the cell's recorded run at `rate` to the reference file and, unless it holds one on this CPU already, this
    CPU's run of the same workload; return the reference."""
    config = load_yaml(CompareConfig, config_path)
    cells = {cell.name: cell for cell in grid_cells(config)}
    if cell_name not in cells or cells[cell_name].tune is None:
        raise SystemExit(f"{config_path} has no tuned cell {cell_name!r}; its tuned cells: "
                         f"{sorted(name for name, cell in cells.items() if cell.tune)}.")
    cell = cells[cell_name]
    recorded = rate_folder(cell.config.training.output_dir, rate) / FINISHED
    if not recorded.exists():
        raise SystemExit(f"{recorded} does not exist: the cell has not finished its run at learning rate {rate:g}; "
                         f"run `privft compare {config_path} --cell {cell_name!r}` first.")
    workload = f"{config_path}'s {cell_name!r} at learning rate {rate:g} ({cell.config.training.epochs} epochs)"
    command = f"scripts/cpu_reference.py {config_path} {cell_name!r} {rate:g} {reference_path}"
    reference = CpuReference.load(reference_path) if reference_path.exists() else CpuReference(workload, command)
    if reference.workload != workload:
        raise SystemExit(f"{reference_path} times another workload ({reference.workload}); give another file.")
    reference = reference.with_run(reference_run(json.loads(recorded.read_text(encoding="utf-8")), recorded))
    if reference.seconds(cpu_model()) is not None:
        print(f"{reference_path} already holds the workload's CPU seconds on {cpu_model()}: nothing to train.")
    else:
        folder = RUNS / cell.slug / slug(cpu_model())
        with cell_conditions(cell):
            here = tuning_run(rate_config(replace(cell.config, training=replace(cell.config.training,
                                                                               output_dir=str(folder))), rate))
        reference = reference.with_run(reference_run(here, rate_folder(folder, rate) / FINISHED))
    reference.save(reference_path)
    return reference


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path, help="the comparison's YAML, e.g. experiments/frontier-seed1.yaml")
    parser.add_argument("cell", help="a tuned cell's name, e.g. 'LoRA r=16, tuned'")
    parser.add_argument("rate", type=float, help="one of its learning rates, e.g. 0.001")
    parser.add_argument("reference", type=Path, help="the reference file to add to, e.g. "
                                                     "experiments/records/cpu-reference.json")
    args = parser.parse_args()
    print(measure(args.config, args.cell, args.rate, args.reference).describe())
