"""`privft train`: the YAML config round-trips, and a run from it trains, audits and saves."""

from __future__ import annotations

import json

import pytest

from privft.config import ConfigError, load_yaml, save_yaml
from privft.pipeline import CanarySettings, DataSettings, RunConfig, SoftSettings, run_training
from privft.training import FinetuneSettings, LoraSettings


def test_default_config_round_trips_through_yaml(tmp_path):
    config = RunConfig(soft=SoftSettings(rule="release", select_ratio=0.3),
                       training=FinetuneSettings(lora=LoraSettings(rank=4, targets=("q_proj",))))
    path = save_yaml(config, tmp_path / "run.yaml")
    assert load_yaml(RunConfig, path) == config
    full = RunConfig(training=FinetuneSettings(lora=None))
    assert load_yaml(RunConfig, save_yaml(full, tmp_path / "full.yaml")) == full


def test_config_errors_name_the_key(tmp_path):
    (tmp_path / "bad.yaml").write_text("training:\n  epoch: 3\n")
    with pytest.raises(ConfigError, match=r"Unknown key\(s\) \['epoch'\].*epochs"):
        load_yaml(RunConfig, tmp_path / "bad.yaml")
    (tmp_path / "typed.yaml").write_text("training:\n  epochs: three\n")
    with pytest.raises(ConfigError, match="training.epochs must be int"):
        load_yaml(RunConfig, tmp_path / "typed.yaml")


@pytest.fixture()
def tiny_model_dir(tiny_model, tokenizer, tmp_path):
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    return str(tmp_path / "base")


def test_run_with_canaries_and_soft_trains_audits_and_saves(tiny_model_dir, local_texts, tmp_path):
    data_file = tmp_path / "texts.json"
    data_file.write_text(json.dumps([t[:250] for t in local_texts if len(t) >= 150][:120]))
    config = RunConfig(
        model=tiny_model_dir,
        data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=30, n_non_members=30,
                          n_validation=10),
        training=FinetuneSettings(epochs=2, batch_size=8, max_length=128, output_dir=str(tmp_path / "run"),
                                  lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
        canaries=CanarySettings(n_canaries=2, copies=3, n_alternatives=50),
        soft=SoftSettings(rule="paper", paraphraser="neighbour"),
    )
    result = run_training(config)
    run = tmp_path / "run"
    assert {"split.json", "manifest.json", "obfuscations.json", "report.json", "report.md", "roc.png"} <= {
        p.name for p in run.iterdir()}
    manifest = json.loads((run / "manifest.json").read_text())
    assert len(manifest["canaries"]["secrets"]) == 2 and manifest["config"]["soft"]["rule"] == "paper"
    assert result.report.canary_exposure["n_canaries"] == 2
    assert len(result.soft_history) == 1  # one warm-up epoch, then a selection before epoch 2
    assert "Privacy audit (privft)" in (run / "model" / "README.md").read_text()
