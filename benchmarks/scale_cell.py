"""What does one cell of the scale grid cost, against the bare work it contains?

One SmolLM2-135M LoRA r=16 cell of experiments/compare-scale.yaml, run as `privft compare` runs
it (`privft.pipeline.run_training`: 500 members + 4 canaries × 4 copies for 3 epochs, then the
full audit of 500 + 2,000 + 100 texts and canary exposure), with no statistics cache, against,
in the same run:
  (a) bare training: the same tokenized texts, epochs, batch and LoRA model in a plain Trainer
      with no privft callback;
  (b) bare forward passes (logits only, the audit's batch size) for every text pass the audit
      makes: target, reference (adapters off), lowercased copy, validation, canary alternatives.
It prints the cell's wall time and the overhead ratio cell / ((a) + (b)): what the audit's
statistics and privft's bookkeeping add. Targets: cell <= 20 min; ratio <= 1.15.

    python benchmarks/scale_cell.py --quick   # 50 members, 200 non-members, 20 validation, 1 epoch
    python benchmarks/scale_cell.py           # the cell itself (about 70 min with its baseline)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import tempfile
import time
from pathlib import Path

import torch
from scoring import _batches, bare_forward, batch_tokens  # benchmarks/scoring.py, beside this script

from privft.compare import CompareConfig, grid_cells
from privft.config import load_yaml
from privft.models import load_model
from privft.pipeline import canary_plan, load_split, run_training
from privft.training import build_trainer, tokenize_for_training

CONFIG = Path(__file__).resolve().parents[1] / "experiments" / "compare-scale.yaml"
TARGET_MINUTES, TARGET_RATIO = 20, 1.15


def main() -> None:
    """Time the cell and its bare work; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small split and one epoch (a few minutes)")
    args = parser.parse_args()
    (cell,) = [c for c in grid_cells(load_yaml(CompareConfig, CONFIG)) if c.name == "LoRA r=16"]
    config = cell.config
    if args.quick:
        config = dataclasses.replace(
            config, data=dataclasses.replace(config.data, n_members=50, n_non_members=200, n_validation=20),
            training=dataclasses.replace(config.training, epochs=1))
    out = Path(tempfile.mkdtemp(prefix="privft-scale-cell-"))
    config = dataclasses.replace(config, training=dataclasses.replace(config.training, output_dir=str(out / "cell")),
                                 audit=dataclasses.replace(config.audit, cache_dir=None))  # every pass really runs

    start = time.perf_counter()
    run_training(config)
    cell_seconds = time.perf_counter() - start

    split = load_split(config.data)
    plan = canary_plan(config.canaries, config.data.seed)
    model, tokenizer = load_model(config.model)
    train = tokenize_for_training(tokenizer, plan.insert(split.members), config.training.max_length)
    bare_config = dataclasses.replace(config.training, output_dir=str(out / "bare"))
    trainer = build_trainer(model, tokenizer, train, bare_config)
    start = time.perf_counter()
    trainer.train()
    train_seconds = time.perf_counter() - start

    model = trainer.model.eval()
    evaluated = [*split.members, *split.non_members]
    alternatives = plan.canary_texts() + [plan.text_for(secret) for secret in plan.reference_secrets()]
    batch = config.audit.batch_size
    target = _batches(tokenizer, evaluated, model.device, batch)
    passes = {"target": target, "reference": target,  # the reference pass runs with the adapters off
              "lowercase": _batches(tokenizer, [t.lower() for t in evaluated], model.device, batch),
              "perplexity": _batches(tokenizer, split.validation, model.device, batch),
              "canary exposure": _batches(tokenizer, alternatives, model.device, 32)}  # its batch size
    start = time.perf_counter()
    with torch.no_grad():
        for name, batches in passes.items():
            with model.disable_adapter() if name == "reference" else contextlib.nullcontext():
                bare_forward(model, batches)
    forward_seconds = time.perf_counter() - start

    bare = train_seconds + forward_seconds
    trained_tokens = sum(map(len, train["input_ids"])) * config.training.epochs
    scored_tokens = sum(map(batch_tokens, passes.values()))
    print(f"SmolLM2-135M LoRA r=16 cell: {len(train)} training sequences x {config.training.epochs} epoch(s), audit of "
          f"{len(split.members)} + {len(split.non_members)} + {len(split.validation)} texts and "
          f"{len(alternatives)} canary texts")
    print(f"bare throughput: training {trained_tokens / train_seconds:.0f} tokens/s ({trained_tokens} tokens), "
          f"forward {scored_tokens / forward_seconds:.0f} tokens/s ({scored_tokens} tokens)")
    print(f"cell {cell_seconds:.0f} s | (a) bare training {train_seconds:.0f} s | (b) bare forward passes "
          f"{forward_seconds:.0f} s | overhead {cell_seconds - bare:.0f} s")
    print(f"scale_cell_minutes {cell_seconds / 60:.1f} (target <= {TARGET_MINUTES}; read on the full cell only)")
    print(f"scale_cell_overhead_ratio {cell_seconds / bare:.3f} (target <= {TARGET_RATIO})")


if __name__ == "__main__":
    main()
