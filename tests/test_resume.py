"""Issue 18 item 9: `privft train` with `training.save_steps` resumes a killed run from its last complete checkpoint.

A run is killed by an exception out of its training loop after a checkpoint; everything it held in
memory is dropped, and the rerun is a new `run_training` on the same config that starts from disk.
The resumed run must end where an uninterrupted one ends: SOFT's selections, canary exposure, ε.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME

from privft.audit import AuditConfig
from privft.callbacks.training_clock import CLOCK_FILE
from privft.dp.callback import STATE_FILE
from privft.pipeline import CanarySettings, DataSettings, DPSettings, RunConfig, SoftSettings, run_training
from privft.shadows import PoolSettings, ShadowPlan, ShadowSettings
from privft.training import FinetuneSettings, LoraSettings, last_complete_checkpoint


class Killed(Exception):
    """The process died."""


class KillAfterStep(TrainerCallback):
    """Dies once `step` optimizer steps are done, before the next one: nothing after the last save reaches disk."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        if state.global_step == self.step:
            raise Killed(f"killed after step {self.step}")


@pytest.fixture()
def base_config(tiny_model, tokenizer, write_texts, tmp_path, monkeypatch, one_thread):
    """A tiny-model run of 20 members with checkpoints every `save_steps`, caches kept inside the test's folder."""
    monkeypatch.setenv("PRIVFT_CACHE", str(tmp_path / "cache"))
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    data_file = write_texts(tmp_path, 80, min_chars=150, max_chars=200)

    def config(name: str, *, epochs: int, save_steps: int, **sections) -> RunConfig:
        return RunConfig(
            model=str(tmp_path / "base"),
            data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=20, n_non_members=20,
                              n_validation=5),
            training=FinetuneSettings(epochs=epochs, batch_size=8, max_length=128, output_dir=str(tmp_path / name),
                                      save_steps=save_steps,
                                      lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
            audit=AuditConfig(attacks=("loss",), n_bootstrap=20), **sections)

    return config


def _killed_then_resumed(config: RunConfig, kill_after: int):
    """Run `config` until it is killed after step `kill_after`, then rerun it in the same folder."""
    with pytest.raises(Killed):
        run_training(config, extra_callbacks=[KillAfterStep(kill_after)])
    out = Path(config.training.output_dir)
    assert not (out / "report.json").exists() and not (out / "model").exists()  # it died during training
    return out


@pytest.mark.parametrize("loss_source", ["eval", "training"])  # "training": the recorded losses are restored too
def test_a_killed_soft_run_resumes_with_its_mask_selections_and_canaries(base_config, loss_source):
    soft = dict(canaries=CanarySettings(n_canaries=2, copies=3, n_alternatives=50),
                soft=SoftSettings(rule="paper", paraphraser="neighbour", loss_source=loss_source))
    # 26 training sequences in batches of 8: 4 steps an epoch, 12 in all; SOFT selects before epochs 1 and 2.
    straight = run_training(base_config("straight", epochs=3, save_steps=6, **soft))
    assert [record["epoch"] for record in straight.soft_history] == [1, 2]

    config = base_config("killed", epochs=3, save_steps=6, **soft)
    out = _killed_then_resumed(config, kill_after=7)  # half-way through epoch 1, after its selection
    assert last_complete_checkpoint(out) == str(out / "checkpoint-6")
    with pytest.warns(UserWarning, match="Resuming the run .* from .*checkpoint-6"):
        resumed = run_training(config)

    assert (resumed.resumed_from, straight.resumed_from) == (str(out / "checkpoint-6"), None)
    carried = json.loads((out / "checkpoint-6" / CLOCK_FILE).read_text())  # the seconds spent up to checkpoint-6
    assert carried["seconds"] > 0 and carried["cpu_seconds"] > 0 and not resumed.times_partial
    assert resumed.train_seconds > carried["seconds"] and resumed.train_cpu_seconds > carried["cpu_seconds"]
    training = json.loads((out / "report.json").read_text())["training"]
    assert (training["resumed_from"], training["times_partial"]) == (resumed.resumed_from, False)
    assert resumed.soft_history == straight.soft_history  # the restored selection is kept, the next one agrees
    assert json.loads((out / "soft_selections.json").read_text()) == straight.soft_history
    assert resumed.report.canary_exposure == straight.report.canary_exposure
    assert resumed.report.training_steps == straight.report.training_steps == 12
    assert resumed.report.attacks["loss"].auc.auc == straight.report.attacks["loss"].auc.auc
    assert resumed.report.training.soft == straight.report.training.soft


def test_a_killed_dp_lora_run_resumes_with_its_accountant_from_the_last_complete_checkpoint(base_config):
    private = dict(dp=DPSettings(target_epsilon=8.0))
    # 20 sequences, expected batch 8: 3 noised steps an epoch, 6 in all; checkpoints at steps 2, 4 and 6.
    straight = run_training(base_config("straight", epochs=2, save_steps=2, **private))
    config = base_config("killed", epochs=2, save_steps=2, **private)
    out = _killed_then_resumed(config, kill_after=5)
    assert all((out / f"checkpoint-{step}" / STATE_FILE).is_file() for step in (2, 4))  # part of each save
    (out / "checkpoint-4" / TRAINER_STATE_NAME).unlink()  # as a kill during checkpoint-4's save leaves it
    assert last_complete_checkpoint(out, required=(STATE_FILE,)) == str(out / "checkpoint-2")
    (out / "checkpoint-2" / CLOCK_FILE).unlink()  # as an older privft's checkpoint: no training time to carry
    with pytest.warns(UserWarning, match="Resuming the run .* from .*checkpoint-2; it kept no training clock"):
        resumed = run_training(config)
    assert resumed.times_partial and json.loads((out / "report.json").read_text())["training"]["times_partial"]

    assert resumed.privacy["noised_steps"] == straight.privacy["noised_steps"] == 6
    assert resumed.privacy["epsilon"] == straight.privacy["epsilon"] <= 8.0
    assert resumed.privacy["noise_multiplier"] == straight.privacy["noise_multiplier"]
    assert json.loads((out / "dp.json").read_text())["epsilon"] == straight.privacy["epsilon"]


def test_a_checkpoint_is_complete_once_the_trainer_state_is_written_whole(tmp_path):
    for step, state in ((1, "{}"), (2, "{}"), (3, '{"global_step": '), (4, None)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if state is not None:
            (folder / TRAINER_STATE_NAME).write_text(state)
    (tmp_path / "checkpoint-1" / STATE_FILE).write_text("{}")
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-2")  # 3 is truncated, 4 has no state
    assert last_complete_checkpoint(tmp_path, required=(STATE_FILE,)) == str(tmp_path / "checkpoint-1")
    shutil.rmtree(tmp_path / "checkpoint-1")
    assert last_complete_checkpoint(tmp_path, required=(STATE_FILE,)) is None
    assert last_complete_checkpoint(tmp_path / "missing") is None


def test_a_shadow_farm_planned_before_save_steps_existed_keeps_its_plan(local_texts, tmp_path):
    texts = [t[:200] for t in local_texts if len(t) >= 120][:20]
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    settings = ShadowSettings(model="base", n_shadows=6, window=16, seed=3,
                              pool=PoolSettings(corpus=None, path=str(tmp_path / "pool.jsonl"), max_words=None,
                                                n_candidates=12, n_population=4),
                              training=FinetuneSettings(max_length=64, lora=None))
    path = ShadowPlan.build(settings).save(tmp_path / "farm")
    record = json.loads(path.read_text())
    del record["settings"]["training"]["save_steps"]  # as privft wrote it before the setting existed
    path.write_text(json.dumps(record))
    before = path.read_bytes()
    ShadowPlan.build(settings).save(tmp_path / "farm")  # the same plan: kept, not refused as a different one
    assert path.read_bytes() == before
