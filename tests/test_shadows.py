"""Shadow farms: a balanced seeded plan, resumable per-shadow jobs through the CLI, then LiRA on the stored losses."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from transformers.trainer import TRAINER_STATE_NAME

from privft.callbacks.training_clock import CLOCK_FILE
from privft.cli import main
from privft.config import save_yaml
from privft.pipeline import CanarySettings
from privft.scoring import TokenStats
from privft.shadows import (
    PoolSettings,
    ShadowPlan,
    ShadowSettings,
    job,
    load_losses,
    loss_windows,
    train_shadow,
)
from privft.shadows.plan import plan_sha256
from privft.shadows.store import losses_path, missing_shadows
from privft.training import FinetuneSettings


@pytest.fixture()
def settings(local_texts, tiny_model, tokenizer, tmp_path) -> ShadowSettings:
    """A 6-shadow farm of full fine-tunes of the tiny Llama over 16 pydoc paragraphs, 2 canaries, 4 population texts."""
    texts = [t[:200] for t in local_texts if len(t) >= 120][:40]
    (tmp_path / "pool.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    return ShadowSettings(
        model=str(tmp_path / "base"), n_shadows=6, window=16, seed=3,
        pool=PoolSettings(corpus=None, path=str(tmp_path / "pool.jsonl"), max_words=None, n_candidates=16,
                          n_population=4),
        training=FinetuneSettings(epochs=1, learning_rate=1e-2, batch_size=8, max_length=64, lora=None),
        canaries=CanarySettings(n_canaries=2, copies=2, n_alternatives=10))


def test_plan_is_balanced_seeded_and_round_trips(settings, tmp_path):
    plan = ShadowPlan.build(settings)
    trained = plan.keep[:, plan.kinds.index("candidate"):plan.indices("population")[0]]
    assert (trained.sum(axis=0) == 3).all()  # every candidate and canary IN for exactly half of the 6 shadows
    assert not plan.keep[:, plan.indices("population")].any()
    canary = plan.texts[plan.indices("canary")[0]]
    inside = int(np.flatnonzero(plan.keep[:, plan.indices("canary")[0]])[0])
    assert plan.training_texts(inside).count(canary) == 2
    plan.save(tmp_path / "farm")
    loaded = ShadowPlan.load(tmp_path / "farm")
    assert loaded.texts == plan.texts and (loaded.keep == plan.keep).all() and loaded.settings == settings
    assert (ShadowPlan.build(settings).keep == plan.keep).all()


def test_loss_windows_keep_the_first_tokens_and_pad_short_texts_with_nan():
    stats = [TokenStats(-np.arange(1, 6, dtype=np.float32), np.zeros(5), np.zeros(5), 9),
             TokenStats(-np.ones(2, dtype=np.float32), np.zeros(2), np.zeros(2), 3)]
    windows = loss_windows(stats, 3)
    np.testing.assert_array_equal(windows, [[1, 2, 3], [1, 1, np.nan]])


def test_window_longer_than_training_and_too_few_shadows_are_refused():
    with pytest.raises(ValueError, match="'window' parameter of ShadowSettings"):
        ShadowSettings(window=256, training=FinetuneSettings(max_length=128))
    with pytest.raises(ValueError, match="'n_shadows' parameter of ShadowSettings must be at least 6"):
        ShadowSettings(n_shadows=5)


def test_shadow_jobs_resume_through_the_cli_and_feed_a_lira_audit(settings, tmp_path, capsys):
    farm, config = tmp_path / "farm", tmp_path / "shadows.yaml"
    save_yaml(settings, config)
    main(["shadows", "plan", str(config), "--out", str(farm)])
    main(["shadows", "train", str(farm), "--index", "2"])
    with pytest.raises(SystemExit, match=r"Shadows \[0, 1, 3, 4, 5\].*--missing"):
        main(["lira", str(farm)])
    done = losses_path(farm, 2).stat().st_mtime_ns
    main(["shadows", "train", str(farm), "--missing"])
    assert losses_path(farm, 2).stat().st_mtime_ns == done  # a finished job is not redone
    assert json.loads((losses_path(farm, 2).parent / "shadow.json").read_text())["plan_sha256"] == plan_sha256(farm)
    plan, losses = load_losses(farm)
    assert losses.shape == (6, 22, 16) and np.isnan(losses[:, plan.indices("canary")]).any()  # short: NaN-padded
    assert (np.isnan(losses) == np.isnan(losses[:1])).all()  # the same tokens are scored in every shadow
    main(["lira", str(farm), "--out", str(tmp_path / "lira"), "--bootstrap", "10",
          "--variants", "univariate shared,oas shared,oas offline,rmia offline"])
    report = json.loads((tmp_path / "lira" / "lira.json").read_text())
    assert set(report["metrics"]["candidate"]) == {"univariate shared", "oas shared", "oas offline", "rmia offline"}
    assert report["metrics"]["canary"]["oas shared"]["auc"]["n_members"] == 6  # 2 canaries × 3 targets holding each
    assert "privft shadows train" in capsys.readouterr().out


def test_a_farm_keeps_its_plan_the_same_plan_again_is_a_no_op_another_is_refused(settings, tmp_path, capsys):
    farm, config, other = tmp_path / "farm", tmp_path / "farm0.yaml", tmp_path / "farm1.yaml"
    save_yaml(settings, config)
    save_yaml(dataclasses.replace(settings, seed=4), other)
    main(["shadows", "plan", str(config), "--out", str(farm)])
    before = (farm / "plan.json").read_bytes()
    main(["shadows", "plan", str(config), "--out", str(farm)])
    assert "already holds this plan" in capsys.readouterr().out
    with pytest.raises(SystemExit, match=r"plan.json already holds a different shadow plan.*--out.*delete"):
        main(["shadows", "plan", str(other), "--out", str(farm)])
    assert (farm / "plan.json").read_bytes() == before


def _fake_losses(farm, plan: ShadowPlan, index: int, plan_sha: str | None) -> None:
    """Store losses of the right shape for shadow `index`, with `plan_sha` as its recorded plan (None: no record)."""
    path = losses_path(farm, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.zeros((len(plan.texts), plan.settings.window), np.float32))
    record = {"index": index} if plan_sha is None else {"index": index, "plan_sha256": plan_sha}
    (path.parent / "shadow.json").write_text(json.dumps(record))


def test_load_losses_refuses_shadows_trained_on_another_plan_by_index(settings, tmp_path):
    farm = tmp_path / "farm"
    plan = ShadowPlan.build(settings)
    plan.save(farm)
    for index in range(settings.n_shadows):
        _fake_losses(farm, plan, index, plan_sha256(farm))
    assert load_losses(farm)[1].shape == (6, 22, 16)
    _fake_losses(farm, plan, 4, "0" * 64)  # trained before the farm was re-planned by hand
    with pytest.raises(ValueError, match=r"Shadows \[4\] of .* another plan.*--index I --overwrite"):
        load_losses(farm)
    _fake_losses(farm, plan, 4, None)  # trained by a privft that did not record its plan
    with pytest.warns(UserWarning, match=r"Shadows \[4\] of .* record no plan_sha256"):
        load_losses(farm)


def test_write_default_refuses_an_existing_settings_file(tmp_path, capsys):
    config = tmp_path / "farm.yaml"
    main(["shadows", "plan", str(config), "--write-default"])
    assert "privft shadows plan" in capsys.readouterr().out
    config.write_text("n_shadows: 8\n")  # the user's edits
    with pytest.raises(SystemExit, match=r"farm.yaml already exists.*delete it first, or give another path"):
        main(["shadows", "plan", str(config), "--write-default"])
    assert config.read_text() == "n_shadows: 8\n"


def test_an_array_job_trains_the_shadow_its_scheduler_index_names(settings, tmp_path, monkeypatch):
    farm, config = tmp_path / "farm", tmp_path / "shadows.yaml"
    save_yaml(settings, config)
    main(["shadows", "plan", str(config), "--out", str(farm)])
    monkeypatch.delenv("SLURM_ARRAY_TASK_ID", raising=False)
    with pytest.raises(SystemExit, match="SLURM_ARRAY_TASK_ID: the variable is unset"):
        main(["shadows", "train", str(farm), "--index-from-env", "SLURM_ARRAY_TASK_ID"])
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    with pytest.raises(SystemExit, match="exactly one of --index I, --index-from-env VAR and --missing"):
        main(["shadows", "train", str(farm), "--index", "4", "--index-from-env", "SLURM_ARRAY_TASK_ID"])
    main(["shadows", "train", str(farm), "--index-from-env", "SLURM_ARRAY_TASK_ID"])
    assert [i for i in range(settings.n_shadows) if losses_path(farm, i).exists()] == [4]


def _farm_of_fakes(settings: ShadowSettings, farm) -> ShadowPlan:
    """A planned farm whose every shadow has stored whole (zero) losses on its plan."""
    plan = ShadowPlan.build(settings)
    plan.save(farm)
    for index in range(settings.n_shadows):
        _fake_losses(farm, plan, index, plan_sha256(farm))
    return plan


def test_missing_and_index_retrain_a_corrupt_shadow_and_name_it(settings, tmp_path, capsys, one_thread):
    farm = tmp_path / "farm"
    _farm_of_fakes(settings, farm)
    losses_path(farm, 2).write_bytes(b"")  # a write cut short
    with pytest.warns(UserWarning, match=r"Shadow 2 of .* is corrupt \(.*002/losses.npy is empty.*retraining it"):
        main(["shadows", "train", str(farm), "--missing"])
    assert "Trained shadows [2]." in capsys.readouterr().out
    losses_path(farm, 4).write_bytes(b"not a numpy file")
    with pytest.warns(UserWarning, match=r"Shadow 4 of .* is corrupt \(.*004/losses.npy is not a readable"):
        main(["shadows", "train", str(farm), "--index", "4"])
    assert np.nanmin(load_losses(farm)[1][[2, 4]]) > 0  # retrained: real losses where the fakes held zeros
    assert missing_shadows(farm) == []


def _pickled_objects(path) -> None:
    """A losses.npy that only loads by unpickling."""
    np.save(path, np.array([{"loss": 1.0}], dtype=object), allow_pickle=True)


@pytest.mark.parametrize(("corrupt", "damage"), [
    (lambda path: path.write_bytes(b""), r"is empty \(0 bytes\)"),
    (lambda path: path.write_bytes(b"\x00garbage" * 10), "is not a readable NumPy .npy array"),
    (_pickled_objects, "is not a readable NumPy .npy array"),
    (lambda path: np.save(path, np.zeros((22, 8), np.float32)),
     r"holds float32 values of shape \(22, 8\); expected float losses of shape \(22, 16\)"),
], ids=["empty", "garbage", "pickled", "wrong shape"])
def test_lira_names_a_corrupt_losses_file_and_how_to_retrain_it(settings, tmp_path, corrupt, damage):
    farm = tmp_path / "farm"
    _farm_of_fakes(settings, farm)
    corrupt(losses_path(farm, 3))
    with pytest.raises(SystemExit, match=rf"Shadow 3 of .* is corrupt: .*003/losses.npy {damage}\. Retrain it with "
                                         rf"`privft shadows train {farm} --index 3`") as refused:
        main(["lira", str(farm)])
    assert "allow_pickle" not in str(refused.value)
    assert missing_shadows(farm) == [3]


def test_a_corrupt_shadow_record_is_refused_by_name_not_read_as_an_older_privft(settings, tmp_path, recwarn):
    farm = tmp_path / "farm"
    _farm_of_fakes(settings, farm)
    (losses_path(farm, 1).parent / "shadow.json").write_text('{"index": 1, "plan_sha')  # a write cut short
    with pytest.raises(SystemExit, match=r"Shadow 1 of .* is corrupt: .*001/shadow.json is missing, unreadable or "
                                         r"not a JSON object\. Retrain it with .*--index 1"):
        main(["lira", str(farm)])
    assert not [w for w in recwarn if "older privft" in str(w.message)]
    assert missing_shadows(farm) == [1]


class Killed(Exception):
    """The process died."""


def test_a_killed_shadow_resumes_from_its_last_complete_checkpoint(settings, tmp_path, monkeypatch, one_thread):
    # Shadow 4 trains on 7 texts in batches of 4: 2 steps, a checkpoint after each.
    settings = dataclasses.replace(settings, training=dataclasses.replace(settings.training, batch_size=4,
                                                                          save_steps=1))
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    for farm in (straight, killed):
        ShadowPlan.build(settings).save(farm)
    train_shadow(straight, 4)

    def die(*args, **kwargs):
        raise Killed("killed while scoring")

    with monkeypatch.context() as patched:
        patched.setattr(job, "score_texts", die)
        with pytest.raises(Killed):
            train_shadow(killed, 4)
    trainer = losses_path(killed, 4).parent / "trainer"
    (trainer / "checkpoint-2" / TRAINER_STATE_NAME).unlink()  # as a kill during checkpoint-2's save leaves it
    with pytest.warns(UserWarning, match=r"Resuming shadow 4 of .* from .*checkpoint-1"):
        train_shadow(killed, 4)
    record = json.loads((losses_path(killed, 4).parent / "shadow.json").read_text())
    carried = json.loads((trainer / "checkpoint-1" / CLOCK_FILE).read_text())  # training time up to checkpoint-1
    assert record["resumed_from"] == "checkpoint-1" and not record["times_partial"]
    assert record["train_seconds"] > carried["seconds"] > 0
    np.testing.assert_array_equal(np.load(losses_path(killed, 4)), np.load(losses_path(straight, 4)))
    train_shadow(killed, 4, overwrite=True)  # from step 0, not from the finished run's last checkpoint
    assert json.loads((losses_path(killed, 4).parent / "shadow.json").read_text())["resumed_from"] is None
    np.testing.assert_array_equal(np.load(losses_path(killed, 4)), np.load(losses_path(straight, 4)))
