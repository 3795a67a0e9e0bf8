"""`privft train`: the YAML config round-trips, and a run from it trains, audits and saves."""

from __future__ import annotations

import json
import re

import pytest

from privft.config import ConfigError, load_yaml, save_yaml, to_dict
from privft.pipeline import CanarySettings, DataSettings, RunConfig, SoftSettings, check_output_dir, run_training
from privft.training import FinetuneSettings, LoraSettings
from privft.training_record import SoftRecord


def test_default_config_round_trips_through_yaml(tmp_path):
    config = RunConfig(soft=SoftSettings(rule="release", select_ratio=0.3, failed_rewrites="skip"),
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
    (tmp_path / "boolean.yaml").write_text("training:\n  epochs: true\n")  # YAML's true is not an epoch count
    with pytest.raises(ConfigError, match="training.epochs must be int, got True"):
        load_yaml(RunConfig, tmp_path / "boolean.yaml")
    (tmp_path / "items.yaml").write_text("audit:\n  max_fprs: [0.01, 'often']\n")
    with pytest.raises(ConfigError, match=r"audit.max_fprs\[1\] must be float, got 'often'"):
        load_yaml(RunConfig, tmp_path / "items.yaml")
    (tmp_path / "exponent.yaml").write_text("training:\n  learning_rate: 5e-5\n")  # YAML 1.1: a string
    assert load_yaml(RunConfig, tmp_path / "exponent.yaml").training.learning_rate == 5e-5
    for settings, key in (("soft:\n  rule: papr\n", "soft.rule='papr'"),  # refused before any paraphrasing
                          ("soft:\n  failed_rewrites: drop\n", "soft.failed_rewrites='drop'"),
                          ("audit:\n  max_fprs: [0.01, 1.5]\n", "max_fprs"),  # before training, not after
                          (f"data:\n  n_non_members: 1\ntraining:\n  output_dir: {tmp_path / 'small'}\n", None)):
        (tmp_path / "early.yaml").write_text(settings)
        if key is None:  # the split is drawn at run start, before the model loads or any file is written
            with pytest.raises(ValueError, match="n_non_members=1 is too small"):
                run_training(load_yaml(RunConfig, tmp_path / "early.yaml"))
        else:
            with pytest.raises(ValueError, match=re.escape(key)):
                load_yaml(RunConfig, tmp_path / "early.yaml")


def test_an_output_dir_holding_another_run_is_refused_before_anything_is_written(tmp_path):
    first = RunConfig(training=FinetuneSettings(output_dir=str(tmp_path / "run")))
    (tmp_path / "run").mkdir()
    manifest = tmp_path / "run" / "manifest.json"
    manifest.write_text(json.dumps({"config": to_dict(first)}))
    check_output_dir(tmp_path / "run", first)  # the same run may re-run in place
    other = RunConfig(data=DataSettings(seed=5), training=first.training)
    with pytest.raises(ValueError, match="holds another run"):
        run_training(other)
    assert json.loads(manifest.read_text()) == {"config": to_dict(first)}
    assert not (tmp_path / "run" / "split.json").exists()


def test_run_with_canaries_and_soft_trains_audits_and_saves(tiny_model_dir, write_texts, tmp_path):
    data_file = write_texts(tmp_path, 120, min_chars=150, max_chars=250)
    config = RunConfig(
        model=tiny_model_dir,
        data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=30, n_non_members=30,
                          n_validation=10),
        training=FinetuneSettings(epochs=2, batch_size=8, max_length=128, output_dir=str(tmp_path / "run"),
                                  lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
        canaries=CanarySettings(n_canaries=2, copies=3, n_alternatives=50),
        soft=SoftSettings(rule="paper", paraphraser="neighbour", failed_rewrites="skip"),
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
    served = result.soft_history[0]["n_served_changed"]  # how it was defended, stated where users look
    markdown = (run / "report.md").read_text()
    assert (f"SOFT: paper rule; neighbour paraphraser ({tiny_model_dir}; fraction 1.0); rewrite-only, the first 50 % "
            f"kept verbatim; {served} of 36 training samples served obfuscated") in markdown
    obfuscations = json.loads((run / "obfuscations.json").read_text())
    assert all(o["text"] == o["original"] for o in obfuscations if o["fallback"])  # skipped: served as written
    assert result.soft_history[0]["n_served_failed_rewrites"] == 0
    assert markdown.startswith(f"## Membership-inference audit: {run / 'model'} (fine-tuned from {tiny_model_dir})")
    assert "The base model (adapters disabled) on the same texts: " in markdown


def test_the_training_record_states_the_failed_rewrites_served_or_skipped():
    settings = dict(rule="paper", paraphraser="neighbour", paraphraser_model=None, paraphraser_options={},
                    mode="rewrite-only", prefix_keep_ratio=0.5, n_samples=46, n_selected=30, n_served_obfuscated=28,
                    n_selections=2)
    served = SoftRecord(**settings, failed_rewrites="serve", n_served_failed=12, n_skipped_failed=0).markdown()
    assert served.endswith("28 of 46 training samples served obfuscated after the last of its 2 selections (30 "
                           "selected). Of those, 12 were rewrites the similarity filter rejected (served anyway: "
                           "failed_rewrites: serve).")
    skipped = SoftRecord(**settings, failed_rewrites="skip", n_served_failed=0, n_skipped_failed=2).markdown()
    assert skipped.endswith("(30 selected). 2 selected samples were served as written, every rewrite of theirs "
                            "rejected by the similarity filter (failed_rewrites: skip).")


def test_a_mapping_option_must_be_a_mapping_of_the_declared_types(tmp_path):
    (tmp_path / "list.yaml").write_text("soft:\n  paraphraser_options: [1]\n")
    with pytest.raises(ConfigError, match=r"soft.paraphraser_options must be a mapping.*got \[1\]"):
        load_yaml(RunConfig, tmp_path / "list.yaml")
    (tmp_path / "key.yaml").write_text("soft:\n  paraphraser_options: {1: 0.5}\n")
    with pytest.raises(ConfigError, match=r"soft.paraphraser_options key 1 must be str"):
        load_yaml(RunConfig, tmp_path / "key.yaml")
    (tmp_path / "ok.yaml").write_text("soft:\n  paraphraser_options: {fraction: 0.5}\n")
    assert load_yaml(RunConfig, tmp_path / "ok.yaml").soft.paraphraser_options == {"fraction": 0.5}


def test_write_default_refuses_an_existing_config(tmp_path, capsys):
    from privft.cli import main

    config = tmp_path / "run.yaml"
    config.write_text("model: my-edited-model\n")
    with pytest.raises(SystemExit, match=r"run.yaml already exists.*delete it first, or give another path"):
        main(["train", str(config), "--write-default"])
    assert config.read_text() == "model: my-edited-model\n"
    assert "Wrote" not in capsys.readouterr().out
