"""Tuning by the book: one run per learning rate, each epoch's checkpoint kept, the least validation loss audited.

A tuned run trains `training.epochs` once per learning rate (at most three), in `<output_dir>/tune/lr-<rate>/`;
the Trainer evaluates the split's validation texts after every epoch and keeps that epoch's checkpoint
(`privft.pipeline.train_epochs`), so one run serves epochs 1 to `training.epochs`. The (learning rate, epoch) of
least validation loss is then audited as any finished run is: `run_training` resumed from that checkpoint with
`training.epochs` set to the chosen epoch, so no step is left and its final audit, report and model card are the
run's. Neither the audit's members and non-members nor a test text is read to choose. A finished learning rate
(its `tune.json`) is skipped on a rerun; a killed one resumes from its last finished epoch. Where the chosen
checkpoint is gone but the records remain (run folders restored without weights on another machine,
`scripts/cell_records.py`), the chosen rate is trained again as its run was, stopped at the chosen epoch, and that
epoch's validation loss is recorded beside the one it was chosen by.

DP-LoRA's noise is calibrated to all of the run's epochs, and its accountant resumes only a run of the same
calibration, so a DP-LoRA run chooses its learning rate at its last epoch (the other epochs' losses are recorded).
Choosing on the private split's validation texts spends privacy that the run's ε does not count. A SOFT run
chooses among the epochs after its warm-up only: before its first selection it trained on the original texts
alone, and a checkpoint from then is plain fine-tuning stopped early, not SOFT.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import sort_checkpoints

from privft.clock import CPU_NOT_RECORDED, cpu_model
from privft.config import require
from privft.dp.callback import STATE_FILE as DP_STATE_FILE
from privft.io import atomic_write_text
from privft.pipeline import RunConfig, RunResult, check_output_dir, run_training, train_epochs
from privft.training import last_complete_checkpoint
from privft.training_record import times_partial

MAX_LEARNING_RATES = 3
FINISHED = "tune.json"  # a learning rate's record, written once its run has finished
UNCOUNTED_PRIVACY = ("tuned on the private split's validation texts, which spends privacy the ε shown does not "
                     "count")


@dataclass
class TuneSettings:
    """The learning rates a tuned run tries (at most three); its epoch is read from each run's per-epoch validation."""

    learning_rates: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        """Refuse an empty, over-long, repeated or non-positive grid before anything trains."""
        rates = list(self.learning_rates)
        require(0 < len(rates) <= MAX_LEARNING_RATES, "learning_rates", rates,
                f"must list one to {MAX_LEARNING_RATES} learning rates (a committed grid per method, e.g. "
                "[3e-4, 1e-3, 3e-3]); keep at most three.")
        require(all(math.isfinite(rate) and rate > 0 for rate in rates), "learning_rates", rates,
                "must hold positive numbers only: at 0 or below a run trains nothing (or ascends the loss).")
        require(len(set(rates)) == len(rates), "learning_rates", rates, "lists a rate twice; give each rate once.")


def check_tunable(config: RunConfig, where: str) -> None:
    """Refuse to tune a run whose split has no validation texts to choose by, or whose SOFT warm-up leaves no
    epoch to choose from (`where` names the run)."""
    if config.data.n_validation < 1:
        raise ValueError(f"{where}: tune chooses by validation loss, but data.n_validation is "
                         f"{config.data.n_validation}; set data.n_validation to at least 1 (e.g. 50), or drop tune.")
    warmup = first_candidate_epoch(config) - 1
    if warmup >= config.training.epochs:
        raise ValueError(f"{where}: SOFT's warm-up takes {warmup} epoch(s) of the run's "
                         f"{config.training.epochs}, so no epoch has trained on its paraphrases to choose from; raise "
                         "training.epochs above soft.warmup_epochs.")


def first_candidate_epoch(config: RunConfig) -> int:
    """The first epoch a tuned run may be stopped at: 1, or SOFT's first epoch on obfuscated samples."""
    return 1 if config.soft.rule is None else config.soft.schedule().epochs_before_selection + 1


def recorded_first_candidate(selection: dict[str, Any]) -> int:
    """A recorded selection's first candidate epoch (`first_candidate_epoch`); 1 for records made before it was kept."""
    return selection.get("from_epoch", 1)


def epochs_tuned(config: RunConfig) -> bool:
    """Whether the run chooses its epoch too: not under DP-LoRA, whose noise is calibrated to all its epochs."""
    return config.dp.target_epsilon is None


def rate_folder(output_dir: str | Path, rate: float) -> Path:
    """The folder of one learning rate's run in a tuned cell's `output_dir`: `<output_dir>/tune/lr-<rate>`."""
    return Path(output_dir) / "tune" / f"lr-{rate:g}"


def rate_config(config: RunConfig, rate: float) -> RunConfig:
    """The run of one learning rate: `config` at `rate`, in its own folder (`rate_folder`)."""
    folder = rate_folder(config.training.output_dir, rate)
    return replace(config, training=replace(config.training, learning_rate=rate, output_dir=str(folder)))


def epoch_losses(folder: Path) -> list[dict[str, Any]]:
    """Each epoch's validation loss and checkpoint (its folder's name), read from the checkpoints' Trainer states,
    with the evaluation's wall seconds: the same pass every epoch, so they show the machine's speed drifting."""
    epochs = []
    for checkpoint in sort_checkpoints(str(folder)):
        state = json.loads((Path(checkpoint) / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
        evaluation = next(entry for entry in reversed(state["log_history"]) if "eval_loss" in entry)
        epochs.append({"epoch": round(state["epoch"]), "validation_loss": evaluation["eval_loss"],
                       "checkpoint": Path(checkpoint).name, "validation_seconds": evaluation.get("eval_runtime")})
    return epochs


def tuning_run(config: RunConfig) -> dict[str, Any]:
    """One learning rate's run (`rate_config`), or its record if it finished: times and every epoch's loss."""
    out = Path(config.training.output_dir)
    check_output_dir(out, config)  # a finished run of other settings is refused, never read as this one's
    if (out / FINISHED).exists():
        return json.loads((out / FINISHED).read_text(encoding="utf-8"))
    private = config.dp.target_epsilon is not None
    print(f"[privft tune] learning rate {config.training.learning_rate:g} in {out}", flush=True)
    result = train_epochs(config, resume_from=last_complete_checkpoint(out, (DP_STATE_FILE,) if private else ()))
    record = {"learning_rate": config.training.learning_rate, "epochs": epoch_losses(out),
              "train_seconds": result.train_seconds, "train_cpu_seconds": result.train_cpu_seconds,
              "resumed_from": result.resumed_from, "times_partial": result.times_partial, "cpu": cpu_model()}
    atomic_write_text(out / FINISHED, json.dumps(record, indent=1))
    return record


class StopAfterEpoch(TrainerCallback):
    """Stop a run at the end of epoch `epoch`, its schedule (warm-up, decay) that of the whole run."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        """Ask the Trainer to stop once the epoch's checkpoint is saved."""
        if round(state.epoch) >= self.epoch:
            control.should_training_stop = True
        return control


def retrain_chosen(config: RunConfig, chosen: dict[str, Any]) -> float:
    """Train the chosen rate's run (`rate_config`) again up to the chosen epoch, whose checkpoint is gone; returns
    that epoch's validation loss now (the run is seeded: on the same kind of machine, the one it was chosen by)."""
    out = Path(config.training.output_dir)
    print(f"[privft tune] {out / chosen['checkpoint']} is gone (records restored without weights): training "
          f"learning rate {config.training.learning_rate:g} again to epoch {chosen['epoch']}", flush=True)
    train_epochs(config, extra_callbacks=[StopAfterEpoch(chosen["epoch"])])
    return next(epoch["validation_loss"] for epoch in epoch_losses(out) if epoch["epoch"] == chosen["epoch"])


def choose(runs: list[dict[str, Any]], last_epoch_only: bool, from_epoch: int = 1) -> dict[str, Any]:
    """The (learning rate, epoch) of least validation loss among the last epochs (`last_epoch_only`) or those from
    `from_epoch` on, earlier rates and epochs first on a tie; NaN never wins."""
    candidates = [dict(epoch, learning_rate=run["learning_rate"]) for run in runs
                  for epoch in (run["epochs"][-1:] if last_epoch_only else run["epochs"])
                  if math.isfinite(epoch["validation_loss"]) and epoch["epoch"] >= from_epoch]
    if not candidates:
        raise ValueError(f"Every tuning run's validation loss is NaN or infinite (learning rates "
                         f"{[run['learning_rate'] for run in runs]}): every rate diverged; try smaller ones.")
    return min(candidates, key=lambda candidate: candidate["validation_loss"])


def run_tuned(config: RunConfig, settings: TuneSettings, *, extra_callbacks: Sequence[TrainerCallback] = ()
              ) -> tuple[RunResult, dict[str, Any]]:
    """Train each learning rate (finished ones skipped), choose by validation loss and audit that checkpoint.

    Returns the audit's result (the run in `config.training.output_dir`, at the chosen rate and epoch) and the
    selection: the chosen rate and epoch, the grid of every rate × epoch validation loss, and the tuning's cost.
    """
    check_tunable(config, config.training.output_dir)
    runs = [tuning_run(rate_config(config, rate)) for rate in settings.learning_rates]
    per_epoch = epochs_tuned(config)
    from_epoch = first_candidate_epoch(config)
    chosen = choose(runs, last_epoch_only=not per_epoch, from_epoch=from_epoch)
    audited = replace(config, training=replace(config.training, learning_rate=chosen["learning_rate"],
                                               epochs=chosen["epoch"]))
    chosen_run = rate_config(config, chosen["learning_rate"])
    checkpoint = Path(chosen_run.training.output_dir) / chosen["checkpoint"]
    retrained = None if checkpoint.is_dir() else retrain_chosen(chosen_run, chosen)
    result = run_training(audited, resume_from=str(checkpoint), extra_callbacks=extra_callbacks)
    resumed = [run["resumed_from"] for run in runs if run["resumed_from"]]
    selection = {
        "learning_rates": list(settings.learning_rates), "learning_rate": chosen["learning_rate"],
        "epoch": chosen["epoch"], "of_epochs": config.training.epochs, "epochs_tuned": per_epoch,
        "from_epoch": from_epoch,
        "selected_by": f"least validation loss ({config.data.n_validation} validation texts)",
        "grid": [{"learning_rate": run["learning_rate"], "epoch": epoch["epoch"],
                  "validation_loss": epoch["validation_loss"]} for run in runs for epoch in run["epochs"]],
        "train_seconds": sum(run["train_seconds"] for run in runs),
        "train_cpu_seconds": sum(run["train_cpu_seconds"] for run in runs),
        "resumed_from": resumed[0] if resumed else None,
        "times_partial": any(times_partial(run) for run in runs),
        "cpus": sorted({run.get("cpu", CPU_NOT_RECORDED) for run in runs}),  # the CPUs its seconds were counted on
        # the chosen epoch's validation loss when its checkpoint had to be trained again (not counted in the times)
        "retrained_validation_loss": retrained, "chosen_validation_loss": chosen["validation_loss"],
        "uncounted_privacy": UNCOUNTED_PRIVACY if config.dp.target_epsilon is not None else None}
    return result, selection


def grid_table(name: str, selection: dict[str, Any]) -> str:
    """A tuned row's grid as Markdown: validation loss per learning rate (row) and epoch (column), the chosen bold."""
    epochs = sorted({entry["epoch"] for entry in selection["grid"]})
    losses = {(entry["learning_rate"], entry["epoch"]): entry["validation_loss"] for entry in selection["grid"]}
    chosen = (selection["learning_rate"], selection["epoch"])
    from_epoch = recorded_first_candidate(selection)
    if not selection["epochs_tuned"]:
        rule = " (the last epoch only: the noise is calibrated to all of them)"
    elif from_epoch > 1:
        rule = (f" (epochs {from_epoch} on only: before them SOFT had served no paraphrase, so a checkpoint there "
                "is plain fine-tuning)")
    else:
        rule = ""
    lines = [f"**{name}**: validation loss by learning rate and epoch, {selection['selected_by']}, chosen in "
             f"bold{rule}.", "", "| Learning rate | " + " | ".join(f"Epoch {epoch}" for epoch in epochs) + " |",
             "|---" * (len(epochs) + 1) + "|"]
    for rate in selection["learning_rates"]:
        cells = [f"{losses[rate, epoch]:.4f}" if (rate, epoch) in losses else "n/a" for epoch in epochs]
        cells = [f"**{cell}**" if (rate, epoch) == chosen else cell for cell, epoch in zip(cells, epochs)]
        lines.append(f"| {rate:g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
