"""Issue 33 (items 2, 5, 6, 8, 10) and issue 31's cost: resumed, extended and compared runs keep their data,
their configs and their times honest, and a refusal names what changed without harming finished work."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from privft.audit import AuditConfig
from privft.compare import PRETRAINED, CellSpec, CompareConfig, GridSettings, grid_cells, run_compare
from privft.config import save_yaml, to_dict
from privft.data.split import text_sha256
from privft.pipeline import DataSettings, RunConfig, check_output_dir, load_split, run_training
from privft.run_folder import check_same_data
from privft.training import FinetuneSettings, LoraSettings


@pytest.fixture()
def texts_file(write_texts, tmp_path) -> Path:
    """A data file of 60 texts."""
    return write_texts(tmp_path, 60, min_chars=120, max_chars=200)


def _replace_texts(path: Path) -> None:
    """Change every text of a data file, as a user replacing its contents does."""
    path.write_text(json.dumps([f"{text} (edited)" for text in json.loads(path.read_text())]))


def _run_config(texts_file: Path, out: Path) -> RunConfig:
    return RunConfig(model=str(out.parent / "never-loaded"),
                     data=DataSettings(corpus=None, path=str(texts_file), max_words=None, n_members=16,
                                       n_non_members=16, n_validation=4),
                     training=FinetuneSettings(epochs=1, batch_size=4, max_length=64, output_dir=str(out),
                                               lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
                     audit=AuditConfig(attacks=("loss",), n_bootstrap=20))


@pytest.fixture()
def grid(texts_file, tmp_path) -> CompareConfig:
    """A two-cell grid (the pretrained model and plain LoRA) over `texts_file`."""
    run = _run_config(texts_file, tmp_path / "unused")
    return CompareConfig(run=run, grid=GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=()),
                         output_dir=str(tmp_path / "compare"))


def _fake_finished(config: CompareConfig) -> dict[str, Path]:
    """Finished cell folders as a run leaves them, without training: a trained cell with split.json and the
    pretrained cell as older privft left it (report.json's per-text hashes, no split.json)."""
    split = load_split(config.run.data)
    folders = {}
    for cell in grid_cells(config):
        folder = Path(cell.config.training.output_dir)
        folder.mkdir(parents=True)
        (folder / "cell.json").write_text(json.dumps({"name": cell.name, "config": to_dict(cell.config)}))
        if cell.name == PRETRAINED:
            texts, labels = split.labels_and_texts()
            (folder / "report.json").write_text(json.dumps(
                {"per_text": {"sha256": [text_sha256(t) for t in texts], "label": labels.tolist()}}))
        else:
            split.save(folder / "split.json")
        folders[cell.name] = folder
    return folders


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


# Item 2: changed data is detected by the split's hashes, on resume and in compare.
def test_a_resumed_run_refuses_a_changed_data_file_naming_it_and_the_changed_sides(texts_file, tmp_path):
    out = tmp_path / "run"
    config = _run_config(texts_file, out)
    out.mkdir()  # as a run killed after a checkpoint leaves it: its manifest and split
    (out / "manifest.json").write_text(json.dumps({"config": to_dict(config)}))
    load_split(config.data).save(out / "split.json")
    before = _snapshot(out)
    check_same_data(out, load_split(config.data))  # the same texts resume
    _replace_texts(texts_file)
    with pytest.raises(ValueError, match=r"texts\.json now gives other members \(16 of 16 texts changed\), "
                                         r"non-members \(16 of 16 texts changed\), validation \(4 of 4"):
        run_training(config)  # refused before the model (here a folder that does not exist) loads
    assert _snapshot(out) == before


def test_compare_refuses_a_grid_whose_data_changed_naming_the_file_sides_and_cells(grid, texts_file, monkeypatch):
    folders = _fake_finished(grid)
    before = {name: _snapshot(folder) for name, folder in folders.items()}
    _replace_texts(texts_file)
    extended = replace(grid, grid=replace(grid.grid, cells=(CellSpec("LoRA 2 epochs", family="lora",
                                                                     set={"training.epochs": 2}),)))
    monkeypatch.setattr("privft.compare.run_training", lambda *a, **k: pytest.fail("a cell trained"))
    with pytest.raises(ValueError, match=r"texts\.json now gives other members \(16 of 16 texts changed\), "
                                         r"non-members \(16 of 16 texts changed\) than cell\(s\) 'pretrained .*"
                                         r"other members .*validation \(4 of 4 texts changed\) than cell\(s\) "
                                         r"'LoRA r=4' ran on"):
        run_compare(extended)
    assert {name: _snapshot(folder) for name, folder in folders.items()} == before
    assert not (Path(grid.output_dir) / "compare.yaml").exists()


# Item 5: a refused config does not replace the finished grid's compare.yaml.
def test_a_refused_compare_config_leaves_the_grids_compare_yaml(grid):
    saved = save_yaml(grid, Path(grid.output_dir) / "compare.yaml").read_text()
    typo = replace(grid, grid=replace(grid.grid, cells=(CellSpec("r8", family="lora", set={"training.epoch": 2}),)))
    with pytest.raises(ValueError, match="'training.epoch' is not a setting"):
        run_compare(typo)
    assert (Path(grid.output_dir) / "compare.yaml").read_text() == saved


# Item 6: two cell names that map to one folder are refused up front (no advice to delete: see the next test).
def test_cells_sharing_a_folder_are_refused_up_front_naming_both(grid):
    twins = (CellSpec("lr high", family="lora", set={"training.learning_rate": 0.02}),
             CellSpec("LR-High", family="lora", set={"training.learning_rate": 0.05}))
    with pytest.raises(ValueError, match=r"Cells 'lr high' and 'LR-High' would share one folder, .*lr-high"):
        grid_cells(replace(grid, grid=replace(grid.grid, cells=twins)))


# Item 10: a config refused on resume names every changed key, old and new; no advice deletes finished work.
def test_a_config_refused_on_resume_names_each_changed_key_with_old_and_new_values(grid, texts_file, tmp_path):
    _fake_finished(grid)
    changed = replace(grid, run=replace(grid.run, training=replace(grid.run.training, learning_rate=0.02)))
    with pytest.raises(ValueError, match=re.escape(f"cell {PRETRAINED!r} (training.learning_rate: 0.001 → 0.02)")
                       ) as refused:
        run_compare(changed)
    assert "delete" not in str(refused.value)

    out = tmp_path / "run"
    config = _run_config(texts_file, out)
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"config": to_dict(config)}))
    more = replace(config, data=replace(config.data, n_validation=5),
                   training=replace(config.training, epochs=2))
    with pytest.raises(ValueError, match=r"data\.n_validation: 4 → 5; training\.epochs: 1 → 2") as refused:
        check_output_dir(out, more)
    assert "delete" not in str(refused.value)


# Item 8: a cell with a split of its own is refused before any training, naming the cell and the key.
def test_a_cell_with_its_own_split_is_refused_up_front_naming_it_and_the_key(grid):
    own = (CellSpec("seed one", family="lora", set={"data.seed": 1}),)
    with pytest.raises(ValueError, match=r"grid\.cells 'seed one' sets data\.seed: 0 → 1, which draws another split"):
        grid_cells(replace(grid, grid=replace(grid.grid, cells=own)))
    masked = (CellSpec("assistant turns", family="lora", set={"data.assistant_only_loss": True}),)
    assert grid_cells(replace(grid, grid=replace(grid.grid, cells=masked)))[-1].name == "assistant turns"


# Issue 31 and item 10: CPU seconds beside wall time; times counting only a restart's part are marked; n/a if older.
def test_cpu_seconds_are_recorded_beside_wall_time_and_a_resumed_cell_is_marked(grid, tiny_model, tokenizer, tmp_path):
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    grid = replace(grid, run=replace(grid.run, model=str(tmp_path / "base")))
    pretrained, lora = run_compare(grid).rows
    assert pretrained["train_cpu_seconds"] == 0 and lora["train_cpu_seconds"] > 0 and lora["resumed_from"] is None
    training = json.loads(Path(lora["report"]).read_text())["training"]
    assert training["train_cpu_seconds"] == lora["train_cpu_seconds"] and training["resumed_from"] is None

    cells = Path(grid.output_dir) / "cells"
    old = json.loads((cells / "pretrained-not-fine-tuned" / "cell.json").read_text())
    del old["train_cpu_seconds"], old["resumed_from"]  # as older privft left it
    (cells / "pretrained-not-fine-tuned" / "cell.json").write_text(json.dumps(old))
    carried = {**json.loads((cells / "lora-r-4" / "cell.json").read_text()), "resumed_from": "checkpoint-2"}
    (cells / "lora-r-4" / "cell.json").write_text(json.dumps(carried))  # a resume that carried the earlier time
    table = (run_compare(grid, finished_only=True).output_dir / "compare.md").read_text()
    assert "| Train s | CPU s | × LoRA |" in table
    assert "| 0 | n/a | n/a |" in table  # the pretrained row: no training, CPU seconds not recorded
    assert f"| {lora['train_seconds']:.0f} | {lora['train_cpu_seconds']:.0f} | 1.00 |" in table and "†" not in table
    del carried["times_partial"]  # as a privft that did not carry times across a restart left it
    (cells / "lora-r-4" / "cell.json").write_text(json.dumps(carried))
    table = (run_compare(grid, finished_only=True).output_dir / "compare.md").read_text()
    assert f"| {lora['train_seconds']:.0f} † | {lora['train_cpu_seconds']:.0f} † | 1.00 |" in table
    assert "†: the cell resumed after a restart from a checkpoint that kept no training clock" in table
