"""Tuned compare cells: one run per learning rate, the epoch of least validation loss audited, reruns skip runs."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from safetensors.torch import load_file

import privft.tune
from privft.audit import AuditConfig
from privft.clock import cpu_model
from privft.compare import CellSpec, CompareConfig, GridSettings, _tuned, grid_cells, pick_table, run_compare
from privft.config import ConfigError, from_dict, load_yaml, save_yaml, to_dict
from privft.cpu_reference import CpuReference
from privft.pipeline import DataSettings, DPSettings, RunConfig, SoftSettings
from privft.training import FinetuneSettings, LoraSettings
from privft.tune import FINISHED, TuneSettings, choose, grid_table, rate_config, tuning_run

ROOT = Path(__file__).parent.parent


@pytest.fixture()
def config(tiny_model_dir, write_texts, tmp_path, one_thread) -> CompareConfig:
    """A grid of the pretrained and plain-LoRA rows only; tests add tuned cells (2 epochs of 4 steps each)."""
    data_file = write_texts(tmp_path, 80, min_chars=120, max_chars=200)
    run = RunConfig(
        model=tiny_model_dir,
        data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=16, n_non_members=16,
                          n_validation=4),
        training=FinetuneSettings(epochs=2, batch_size=4, max_length=64, learning_rate=1e-2,
                                  lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
        soft=SoftSettings(paraphraser="neighbour"),
        dp=DPSettings(max_grad_norm=1.0, physical_batch_size=2, seed=0),
        audit=AuditConfig(attacks=("loss", "ref_ratio"), n_bootstrap=20, max_fprs=(0.1,)),
    )
    grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=())
    return CompareConfig(run=run, grid=grid, output_dir=str(tmp_path / "compare"))


def with_cells(config: CompareConfig, *cells: CellSpec) -> CompareConfig:
    """`config` with `cells` as its grid.cells."""
    return replace(config, grid=replace(config.grid, cells=cells))


def test_tuned_lora_cell_audits_the_least_validation_loss_checkpoint_and_a_rerun_skips_its_runs(config, monkeypatch):
    config = with_cells(config, CellSpec("LoRA tuned", "lora", tune=TuneSettings(learning_rates=(1e-4, 3e-2))))
    row = run_compare(config).rows[-1]
    tune = row["tune"]
    assert [(g["learning_rate"], g["epoch"]) for g in tune["grid"]] == [(1e-4, 1), (1e-4, 2), (3e-2, 1), (3e-2, 2)]
    best = min(tune["grid"], key=lambda g: g["validation_loss"])
    assert (tune["learning_rate"], tune["epoch"]) == (best["learning_rate"], best["epoch"])
    cell = Path(config.cells_path) / "lora-tuned"
    chosen = cell / "tune" / f"lr-{best['learning_rate']:g}" / f"checkpoint-{4 * best['epoch']}"
    audited = json.loads((cell / "manifest.json").read_text())["config"]["training"]
    assert (audited["learning_rate"], audited["epochs"]) == (best["learning_rate"], best["epoch"])
    weights, saved = (load_file(folder / "adapter_model.safetensors") for folder in (chosen, cell / "model"))
    assert saved.keys() == weights.keys() and all((saved[k] == weights[k]).all() for k in saved)  # that checkpoint
    report = json.loads((cell / "report.json").read_text())
    assert report["training_steps"] == 4 * best["epoch"] and report["training"]["epochs"] == best["epoch"]
    assert row["train_seconds"] == pytest.approx(sum(json.loads((cell / "tune" / f"lr-{r:g}" / FINISHED).read_text())
                                                     ["train_seconds"] for r in (1e-4, 3e-2)))
    assert row["config"] == to_dict(grid_cells(config)[-1].config)  # the cell's own settings, which a rerun checks
    assert row["cpus"] == tune["cpus"] == [cpu_model()]  # the CPU its seconds were counted on
    epochs = json.loads((cell / "tune" / "lr-0.0001" / FINISHED).read_text())["epochs"]
    assert all(epoch["validation_seconds"] > 0 for epoch in epochs)  # each epoch's evaluation pass, timed
    table = (Path(config.output_dir) / "compare.md").read_text()
    assert f"tuned (early stopping: lr {best['learning_rate']:g}, epoch {best['epoch']}/2" in table
    assert "Tuned rows:" in table and tune["uncounted_privacy"] is None and "‡" not in table  # one CPU
    grid = table[table.index("**LoRA tuned**: validation loss by learning rate and epoch"):].splitlines()
    assert grid[2] == "| Learning rate | Epoch 1 | Epoch 2 |" and [line.split(" |")[0] for line in grid[4:6]] == \
        ["| 0.0001", "| 0.03"] and grid[5 if best["learning_rate"] == 3e-2 else 4].count("**") == 2

    assert run_compare(config).ran == []  # a finished cell is read, not rerun
    (cell / "cell.json").unlink()  # a cell killed after its runs: the rerun audits again and trains nothing
    monkeypatch.setattr(privft.tune, "train_epochs", lambda *a, **k: pytest.fail("a finished run was retrained"))
    rerun = run_compare(config)
    assert rerun.ran == ["LoRA tuned"] and rerun.rows[-1]["tune"]["grid"] == tune["grid"]
    assert rerun.rows[-1]["strongest"]["auc"] == pytest.approx(row["strongest"]["auc"])


def test_a_tuned_cell_restored_from_records_without_weights_trains_only_the_chosen_rate_again(config, tmp_path,
                                                                                              monkeypatch):
    config = with_cells(config, CellSpec("LoRA tuned", "lora", tune=TuneSettings(learning_rates=(1e-4, 3e-2))))
    row = run_compare(config).rows[-1]
    cells, records = Path(config.cells_path), tmp_path / "records"
    (cells / "lora-tuned" / "cell.json").unlink()  # as if the machine went before the audit: only the rates finished

    def cell_records(action: str) -> None:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "cell_records.py"), action, str(cells), str(records)],
                       check=True, capture_output=True)

    cell_records("archive")
    shutil.rmtree(cells / "lora-tuned")  # a fresh machine: the run folders are gone
    cell_records("restore")
    assert not list((cells / "lora-tuned").rglob("*.safetensors"))
    trained = []
    real_train_epochs = privft.tune.train_epochs

    def counted(cfg, **options):
        trained.append((cfg.training.learning_rate, [c.epoch for c in options.get("extra_callbacks", ())]))
        return real_train_epochs(cfg, **options)

    monkeypatch.setattr(privft.tune, "train_epochs", counted)
    again = run_compare(config)
    tune = again.rows[-1]["tune"]
    assert again.ran == ["LoRA tuned"] and trained == [(tune["learning_rate"], [tune["epoch"]])]  # only the chosen
    assert tune["grid"] == row["tune"]["grid"] and tune["train_seconds"] == row["tune"]["train_seconds"]
    assert tune["retrained_validation_loss"] == pytest.approx(tune["chosen_validation_loss"], rel=1e-5)  # seeded
    assert again.rows[-1]["strongest"]["auc"] == pytest.approx(row["strongest"]["auc"])
    assert "checkpoint retrained: val. loss" in (Path(config.output_dir) / "compare.md").read_text()
    slow = rate_config(grid_cells(config)[-1].config, 1e-4)  # an earlier epoch: the run stops there, on its schedule
    first = next(g for g in row["tune"]["grid"] if (g["learning_rate"], g["epoch"]) == (1e-4, 1))
    loss = privft.tune.retrain_chosen(slow, {"epoch": 1, "checkpoint": "checkpoint-4"})
    assert loss == pytest.approx(first["validation_loss"], rel=1e-5)
    assert sorted(p.name for p in Path(slow.training.output_dir).glob("checkpoint-*")) == ["checkpoint-4"]


def test_cpu_reference_times_a_finished_rate_again_here_and_converts_a_row_from_another_cpu(config, tmp_path):
    config = with_cells(config, CellSpec("LoRA tuned", "lora", tune=TuneSettings(learning_rates=(1e-4, 3e-2))))
    run_compare(config)
    yaml, reference = save_yaml(config, tmp_path / "grid.yaml"), tmp_path / "cpu-reference.json"

    def measure(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "scripts" / "cpu_reference.py"), str(yaml), *args],
                              capture_output=True, text=True, cwd=tmp_path)

    assert "has no tuned cell 'LoRA r=4'" in measure("LoRA r=4", "1e-4", str(reference)).stderr
    assert "has not finished its run at learning rate 0.001" in measure("LoRA tuned", "1e-3", str(reference)).stderr
    record = Path(config.cells_path) / "lora-tuned" / "tune" / "lr-0.0001" / FINISHED
    record.write_text(json.dumps(dict(json.loads(record.read_text()), cpu="Other CPU")))  # as if run on another
    done = measure("LoRA tuned", "1e-4", str(reference))
    assert done.returncode == 0, done.stderr
    saved = CpuReference.load(reference)
    recorded, here = saved.runs
    assert recorded["record"] == str(record) and here["record"].startswith("runs/cpu-reference/lora-tuned/")
    assert (recorded["cpu"], here["cpu"]) == ("Other CPU", cpu_model()) and here["train_cpu_seconds"] > 0
    assert here["validation_losses"] == pytest.approx(recorded["validation_losses"], rel=1e-5)  # the same computation
    assert saved.factor("Other CPU", cpu_model()) == here["train_cpu_seconds"] / recorded["train_cpu_seconds"]
    again = measure("LoRA tuned", "1e-4", str(reference))
    assert "nothing to train" in again.stdout and CpuReference.load(reference).runs == saved.runs
    with pytest.raises(FileNotFoundError, match="scripts/cpu_reference.py"):  # refused before any cell runs
        run_compare(replace(config, cpu_reference=str(tmp_path / "missing.json")))

    twice_as_fast = CpuReference("a workload", "a command", ({"cpu": cpu_model(), "train_cpu_seconds": 100.0,
                                                              "record": "here"},
                                                             {"cpu": "Other CPU", "train_cpu_seconds": 50.0,
                                                              "record": "there"}))
    assert twice_as_fast.factor("Other CPU", cpu_model()) == 2.0
    assert twice_as_fast.factor("Third CPU", cpu_model()) is None
    twice_as_fast.save(reference)
    cell = Path(config.cells_path) / "lora-tuned" / "cell.json"
    row = json.loads(cell.read_text())
    cell.write_text(json.dumps(dict(row, cpus=["Other CPU"])))  # as if the whole cell was trained on the other CPU
    comparison = run_compare(replace(config, cpu_reference=str(reference)), finished_only=True)
    converted, baseline = comparison.rows[-1], comparison.baseline
    assert converted["cost_on_baseline_cpu"]["cpu_seconds"] == pytest.approx(2 * row["train_cpu_seconds"])
    assert converted["overhead_measure"] == "converted cpu"  # × baseline compares the converted seconds
    assert converted["overhead_vs_lora"] == pytest.approx(2 * row["train_cpu_seconds"] / baseline["train_cpu_seconds"])
    table = (Path(config.output_dir) / "compare.md").read_text()
    assert (f"‡ (≈ {converted['cost_on_baseline_cpu']['cpu_seconds']:.0f}) | ≈ {converted['overhead_vs_lora']:.2f} |"
            in table)
    assert "≈: the row's CPU seconds converted to the baseline's CPU" in table and "CPU s on Other CPU" in table
    assert f"nor does its × {comparison.baseline_label} unless marked ≈ (converted, below)." in table
    assert "on the baseline's CPU" in pick_table(comparison.rows, ["LoRA tuned", baseline["name"]])


@pytest.mark.parametrize("method", ["lora", "soft", "full", "goldfish"])
def test_an_earlier_epoch_is_audited_as_a_finished_run_of_that_many_epochs(config, monkeypatch, method):
    training = replace(config.run.training, output_dir=str(Path(config.output_dir) / "cell"),
                       lora=None if method == "full" else config.run.training.lora)
    run = replace(config.run, soft=replace(config.run.soft, rule="release" if method == "soft" else None),
                  goldfish=replace(config.run.goldfish, k=4 if method == "goldfish" else None), training=training)
    monkeypatch.setattr(privft.tune, "choose", lambda runs, last_epoch_only, from_epoch: dict(
        runs[0]["epochs"][0], learning_rate=1e-2))  # epoch 1, even SOFT's warm-up: the audit path is what is tested
    result, selection = privft.tune.run_tuned(run, TuneSettings(learning_rates=(1e-2,)))
    assert (selection["learning_rate"], selection["epoch"], selection["of_epochs"]) == (1e-2, 1, 2)
    assert [g["epoch"] for g in selection["grid"]] == [1, 2] and selection["epochs_tuned"]
    folder = Path(run.training.output_dir)
    name = "model.safetensors" if method == "full" else "adapter_model.safetensors"
    weights, saved = (load_file(f / name) for f in (folder / "tune/lr-0.01/checkpoint-4", folder / "model"))
    assert saved.keys() == weights.keys() and all((saved[k] == weights[k]).all() for k in saved)  # that checkpoint
    assert result.report.training_steps == 4 and result.report.training.epochs == 1
    assert json.loads((folder / "report.json").read_text())["training_steps"] == 4
    assert (result.report.training.soft is not None) == (method == "soft")  # SOFT's state comes with the checkpoint


def test_a_killed_tuning_run_resumes_from_its_last_finished_epoch(config):
    run = rate_config(replace(config.run, training=replace(config.run.training, output_dir=str(
        Path(config.output_dir) / "cell"))), 1e-2)
    first = tuning_run(run)
    folder = Path(run.training.output_dir)
    assert [e["epoch"] for e in first["epochs"]] == [1, 2] and first["resumed_from"] is None
    (folder / FINISHED).unlink()  # killed while saving its last epoch: that checkpoint's state is cut short
    (folder / "checkpoint-8" / "trainer_state.json").write_text('{"epoch": 2')
    resumed = tuning_run(run)
    assert resumed["resumed_from"] == str(folder / "checkpoint-4")
    assert [e["epoch"] for e in resumed["epochs"]] == [1, 2]
    assert all(math.isfinite(e["validation_loss"]) for e in resumed["epochs"])
    assert resumed["epochs"][0] == first["epochs"][0]  # epoch 1 is read, not retrained
    other = replace(run, training=replace(run.training, batch_size=2))
    with pytest.raises(ValueError, match="holds another run"):  # a finished run of other settings is not reused
        tuning_run(other)


def test_a_tuned_dp_run_reads_its_last_epoch_and_its_row_says_what_its_epsilon_leaves_out(config):
    run = replace(config.run, dp=replace(config.run.dp, target_epsilon=8.0), training=replace(
        config.run.training, output_dir=str(Path(config.output_dir) / "cell")))
    result, selection = privft.tune.run_tuned(run, TuneSettings(learning_rates=(3e-2,)))
    assert [g["epoch"] for g in selection["grid"]] == [1, 2] and not selection["epochs_tuned"]
    assert selection["epoch"] == 2  # whatever epoch 1's loss: the noise is calibrated to both epochs
    assert result.privacy["noised_steps"] == result.privacy["steps"] and result.privacy["epsilon"] <= 8.0
    assert "ε shown does not count" in _tuned({"family": "dp", "tune": selection})


def test_choice_is_the_least_finite_loss_and_dp_reads_the_last_epoch():
    def run(rate, *losses):
        return {"learning_rate": rate, "epochs": [{"epoch": i + 1, "validation_loss": loss, "checkpoint": f"c{i}"}
                                                  for i, loss in enumerate(losses)]}
    runs = [run(1e-3, 3.0, 2.0, 2.5), run(3e-3, math.nan, math.nan, math.nan), run(1e-2, 2.0, 2.2, 2.4)]
    assert (choose(runs, False)["learning_rate"], choose(runs, False)["epoch"]) == (1e-3, 2)  # tie: the earlier rate
    assert (choose(runs, True)["learning_rate"], choose(runs, True)["epoch"]) == (1e-2, 3)
    assert (choose(runs, False, from_epoch=3)["learning_rate"], choose(runs, False, from_epoch=3)["epoch"]) == (
        1e-2, 3)  # SOFT after a 2-epoch warm-up: epochs 1 and 2 are plain fine-tuning, never chosen
    with pytest.raises(ValueError, match="diverged"):
        choose([runs[1]], False)


def test_a_tuned_soft_run_chooses_only_among_the_epochs_it_served_paraphrases_in(config):
    soft = replace(config.run.soft, rule="paper")  # warm-up: 1 epoch on the originals, then the paraphrases
    run = replace(config.run, soft=soft, training=replace(config.run.training,
                                                          output_dir=str(Path(config.output_dir) / "cell")))
    _, selection = privft.tune.run_tuned(run, TuneSettings(learning_rates=(1e-2,)))
    assert [g["epoch"] for g in selection["grid"]] == [1, 2] and selection["from_epoch"] == 2
    assert selection["epoch"] == 2  # whatever epoch 1's loss: it had trained on no paraphrase
    assert "least val. loss of 1 lr × epoch, epochs 2 on" in _tuned({"family": "soft", "tune": selection})
    assert "epochs 2 on only: before them SOFT had served no paraphrase" in grid_table("SOFT tuned", selection)
    too_short = replace(run, training=replace(run.training, epochs=1))
    with pytest.raises(ValueError, match=r"SOFT's warm-up takes 1 epoch\(s\) of the run's 1.*raise training\.epochs"):
        privft.tune.run_tuned(too_short, TuneSettings(learning_rates=(1e-2,)))


def test_tune_round_trips_through_yaml_and_refuses_bad_grids_by_key(config, tmp_path):
    tuned = with_cells(config, CellSpec("LoRA tuned", "lora", tune=TuneSettings(learning_rates=(3e-4, 1e-3, 3e-3))))
    assert load_yaml(CompareConfig, save_yaml(tuned, tmp_path / "c.yaml")) == tuned
    data = to_dict(tuned)
    for rates, message in [([1e-4, 3e-4, 1e-3, 3e-3], "keep at most three"), ([1e-3, 0.0], "positive numbers"),
                           ([1e-3, -1e-3], "positive numbers"), ([], "one to 3")]:
        data["grid"]["cells"][0]["tune"]["learning_rates"] = rates
        with pytest.raises(ConfigError, match=rf"grid\.cells\[0\]\.tune\.learning_rates=.*{message}"):
            from_dict(CompareConfig, data)
    no_validation = replace(tuned, run=replace(tuned.run, data=replace(tuned.run.data, n_validation=0)))
    with pytest.raises(ValueError, match=r"'LoRA tuned'.*data\.n_validation.*set data\.n_validation"):
        grid_cells(no_validation)


def test_a_finished_cell_tuned_over_other_rates_is_refused(config):
    run_compare(config)  # untuned grid: its rows carry no tune and load as finished under today's code
    retuned = with_cells(config, CellSpec("LoRA tuned", "lora", tune=TuneSettings(learning_rates=(1e-2,))))
    cell = Path(retuned.cells_path) / "lora-tuned"
    cell.mkdir(parents=True)
    row = json.loads((Path(config.cells_path) / "lora-r-4" / "cell.json").read_text())
    (cell / "cell.json").write_text(json.dumps({**row, "config": to_dict(grid_cells(retuned)[-1].config),
                                                "tune": {"learning_rates": [3e-3]}}))
    with pytest.raises(ValueError, match=r"tuned over learning rates \[0.003\].*now tuned over \[0.01\]"):
        run_compare(retuned, finished_only=True)


def test_a_grid_without_its_untuned_lora_cell_runs_its_tuned_baseline_second_and_measures_against_it(config):
    """A second seed's grid needs only the tuned baseline: no one-run plain-LoRA cell is trained or audited."""
    tuned = CellSpec("LoRA tuned", "lora", tune=TuneSettings(learning_rates=(1e-2,)))
    other = CellSpec("LoRA r=2", "lora", set={"training.lora.rank": 2, "training.lora.alpha": 4})
    lean = replace(config, grid=replace(config.grid, cells=(other, tuned), untuned_lora=False))
    with pytest.raises(ValueError, match=r"grid.untuned_lora is false.*name the cell.*in grid.baseline"):
        grid_cells(lean)
    lean = replace(lean, grid=replace(lean.grid, baseline="LoRA tuned"))
    assert [cell.name for cell in grid_cells(lean)] == ["pretrained (not fine-tuned)", "LoRA tuned", "LoRA r=2"]
    comparison = run_compare(lean, only=["LoRA tuned"])  # the first two cells are the reference every table needs
    assert comparison.ran == ["pretrained (not fine-tuned)", "LoRA tuned"] and comparison.pending == ["LoRA r=2"]
    assert comparison.measures_against_requested and not (Path(lean.cells_path) / "lora-r-4").exists()
    assert "ΔAUC vs LoRA tuned [paired 95 % CI]" in (Path(lean.output_dir) / "compare.md").read_text()
