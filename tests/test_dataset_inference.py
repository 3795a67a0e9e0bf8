"""Dataset inference: power at per-text AUC ≈ 0.6, calibration on never-trained halves, and a real tiny-model audit."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from transformers import TrainerCallback

from privft.audit import AuditConfig
from privft.callbacks import PrivacyAuditCallback
from privft.cli import main
from privft.data import MembershipSplit
from privft.dataset_inference import dataset_inference, dataset_inference_from_scores
from privft.training import FinetuneSettings, finetune


def _scores(rng: np.random.Generator, n: int, shift: float) -> np.ndarray:
    """Four correlated weak attack scores per text: a shared latent trace plus independent noise."""
    return rng.normal(size=(n, 1)) + shift + rng.normal(size=(n, 4))


def test_a_weak_per_text_signal_is_detected_on_a_few_hundred_texts():
    labels = np.r_[np.ones(400), np.zeros(400)]
    for seed in range(10):  # power, not luck: every draw, not one
        rng = np.random.default_rng(seed)
        members, non_members = _scores(rng, 400, 0.5), _scores(rng, 400, 0.0)
        aucs = [roc_auc_score(labels, np.r_[members[:, i], non_members[:, i]]) for i in range(4)]
        assert 0.55 < max(aucs) < 0.65  # each attack alone is barely above chance
        result = dataset_inference(members, non_members, seed=seed)
        assert result.p_value < 0.01
    assert (result.test.n_suspect, result.test.n_held_out) == (400, 400)
    assert result.test.n_suspect_fit + result.test.n_suspect_test == 400
    assert result.control.n_suspect + result.control.n_held_out == 400  # the non-members, halved


def test_the_test_is_calibrated_on_two_random_halves_of_never_trained_texts():
    rejections, control_rejections = 0, 0
    for seed in range(40):
        rng = np.random.default_rng(1000 + seed)
        never_trained = _scores(rng, 400, 0.0)
        halves = np.array_split(rng.permutation(400), 2)
        result = dataset_inference(never_trained[halves[0]], never_trained[halves[1]], seed=seed)
        rejections += result.p_value < 0.05
        control_rejections += result.control.p_value < 0.05
    assert rejections <= 5 and control_rejections <= 5  # 6 or more has probability < 0.02 under calibration


def test_audit_scores_drop_model_free_and_partial_features_and_say_so():
    rng = np.random.default_rng(0)
    labels = np.r_[np.ones(40), np.zeros(40)]
    partial = rng.normal(size=80)
    partial[:5] = np.nan  # the Ensemble's fitting share
    scores = {"blind_baseline": rng.normal(size=80), "loss": rng.normal(size=80) + labels, "ensemble": partial}
    result = dataset_inference_from_scores(scores, labels)
    assert result.features == ("loss",) and result.excluded_features == ("blind_baseline", "ensemble")
    assert result.to_dict()["p_value"] == result.p_value


def test_a_rejecting_control_warns_that_the_p_value_is_not_evidence():
    rng = np.random.default_rng(0)
    result = dataset_inference(rng.normal(size=(40, 2)), rng.normal(size=(40, 2)))
    assert result.control.p_value >= 0.05 and result.warnings == []
    failed = dataclasses.replace(result, control=dataclasses.replace(result.control, p_value=0.001))
    assert len(failed.warnings) == 1 and "control rejected (p = 0.001 on two halves of 40" in failed.warnings[0]
    assert failed.to_dict()["warnings"] == failed.warnings


@pytest.mark.parametrize(("suspect", "held_out", "message"), [
    (np.zeros((10, 2)), np.zeros((40, 2)), "suspect .* has 10 texts"),
    (np.zeros((40, 2)), np.zeros((40, 3)), "same scores"),
    (np.full((40, 2), np.nan), np.zeros((40, 2)), "non-finite"),
])
def test_bad_input_is_refused_with_the_fix(suspect, held_out, message):
    with pytest.raises(ValueError, match=message):
        dataset_inference(suspect, held_out)


class _KeepLog(TrainerCallback):
    def on_train_end(self, args, state, control, **kwargs):
        self.last = dict(state.log_history[-1])


def test_a_fine_tuned_tiny_model_is_detected_in_the_callback_and_the_cli(tiny_model, tokenizer, local_texts, tmp_path,
                                                                           one_thread, capsys):
    texts = [t[:200] for t in local_texts if len(t) >= 150]
    split = MembershipSplit.random(texts, n_members=100, n_non_members=100, seed=3, source="pydoc")
    config = AuditConfig(attacks=("loss", "zlib", "min_k"), n_bootstrap=10, dataset_inference=True)
    audit, keep_log = PrivacyAuditCallback(split, tokenizer, config=config), _KeepLog()
    settings = FinetuneSettings(epochs=2, learning_rate=3e-3, batch_size=8, max_length=96, output_dir=str(tmp_path),
                                lora=None)
    model = finetune(tiny_model, tokenizer, split.members, settings, callbacks=[audit, keep_log])
    found = audit.report.dataset_inference
    assert found["p_value"] < 0.01 and tuple(found["features"]) == ("loss", "zlib", "min_k")
    assert keep_log.last["privacy/dataset_inference_p"] == found["p_value"]
    assert keep_log.last["privacy/dataset_inference/n_members"] == 100

    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    split.save(tmp_path / "split.json")
    main(["audit", "--model", str(tmp_path / "model"), "--split", str(tmp_path / "split.json"), "--attacks",
          "loss,zlib,min_k", "--bootstrap", "10", "--dataset-inference", "--out", str(tmp_path / "out")])
    assert "Dataset inference (Maini et al. 2024): p = " in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["dataset_inference"]["p_value"] == pytest.approx(found["p_value"], rel=1e-6)
    assert report["dataset_inference"]["test"]["n_suspect"] == report["dataset_inference"]["test"]["n_held_out"] == 100
