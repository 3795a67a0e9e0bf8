"""Utility measured apart from the audit: the split's test side, and task accuracy on held-out tickets."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from privft.audit import AuditConfig
from privft.config import ConfigError, from_dict, load_yaml, save_yaml, to_dict
from privft.data import DataError, MembershipSplit
from privft.data.split import record_identity
from privft.data.tickets_chat import ALL_FIXES, generate_chat_tickets, record_fix
from privft.metrics import accuracy_with_ci, wilson_interval
from privft.pipeline import DataSettings, RunConfig
from privft.task_accuracy import TaskSettings, fixes_given, held_out_tickets, task_accuracy_score

FIXED_TEXTS = [f"Ticket {i}: the {w} stopped working after {i % 7} days, please help." for i, w in
               enumerate(["hub", "cam", "plug", "bulb", "sensor", "doorbell"] * 5)]
# sha256 of the manifest this split saved before the test side existed (privft at 81fe0b4)
MANIFEST_BEFORE_TEST_SIDE = "4588153032cdcdedcbe1951df73a6542baae10833984dc66a7875053651e6a78"


def _fixed_split(**sizes: int) -> MembershipSplit:
    return MembershipSplit.random(FIXED_TEXTS, n_members=10, n_non_members=8, n_validation=4, seed=7, source="fixed",
                                  **sizes)


@pytest.fixture(scope="module")
def tickets():
    return generate_chat_tickets(seed=0, size=60)


# --- the test side ----------------------------------------------------------------------------------------------

def test_no_test_side_saves_the_split_byte_for_byte_as_before(tmp_path):
    split = _fixed_split()
    assert split.test == [] and "test" not in split.counts()
    saved = split.save(tmp_path / "split.json").read_bytes()
    assert hashlib.sha256(saved).hexdigest() == MANIFEST_BEFORE_TEST_SIDE
    assert MembershipSplit.load(tmp_path / "split.json").test == []  # a manifest without one has none


def test_the_test_side_is_disjoint_saved_with_hashes_and_leaves_the_other_sides_as_drawn(tmp_path):
    without, split = _fixed_split(), _fixed_split(n_test=5)
    assert len(split.test) == 5 and split.counts()["test"] == 5
    for side in ("members", "non_members", "validation"):
        assert getattr(split, side) == getattr(without, side)
        assert not {record_identity(t) for t in split.test} & {record_identity(t) for t in getattr(split, side)}
    texts, _ = split.labels_and_texts()
    assert not set(split.test) & set(texts)  # the audit's attacks never read it either
    path = split.save(tmp_path / "split.json")
    manifest = json.loads(path.read_text())
    assert [entry["id"] for entry in manifest["test"]] == [f"test-{i:05d}" for i in range(5)]
    assert MembershipSplit.load(path).test == split.test
    manifest["test"][0]["text"] += " edited"
    path.write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="test-00000 does not match its sha256"):
        MembershipSplit.load(path)
    with pytest.raises(DataError, match="asked for 10 members .* 9 test = 31"):
        _fixed_split(n_test=9)


def test_a_test_text_repeated_on_another_side_is_refused():
    with pytest.raises(DataError, match="on more than one side"):
        MembershipSplit.from_texts(FIXED_TEXTS[:4], FIXED_TEXTS[4:8], test=FIXED_TEXTS[7:9])


def test_configs_saved_before_the_utility_settings_read_as_today():
    saved = to_dict(RunConfig())
    del saved["data"]["n_test"], saved["audit"]["task"]
    assert from_dict(RunConfig, saved, saved=True) == RunConfig()  # finished compare cells still load


# --- task accuracy ------------------------------------------------------------------------------------------------

def test_record_fix_reads_each_tickets_ground_truth_back_in_either_format(tickets):
    for fmt in ("messages", "prompt_completion"):
        assert all(record_fix(t.record(fmt, system="Be brief.")) == t.fix for t in tickets)
    with pytest.raises(DataError, match="states 0 canonical fixes"):
        record_fix({"prompt": "Hi", "completion": "Hello there."})


def test_task_accuracy_scores_right_wrong_and_double_fixes_with_a_wilson_interval(tickets):
    ticket = next(t for t in tickets if t.product is not None)
    wrong = next(fix for fix in ALL_FIXES if fix != ticket.fix)
    replies = [ticket.reply] * 8 + [ticket.reply.replace(ticket.fix.text, wrong.text),  # the wrong fix
                                    f"{ticket.reply} {wrong.text}"]  # two fixes are not the fix
    assert fixes_given(replies, [ticket.fix] * 10).tolist() == [True] * 8 + [False, False]
    result = task_accuracy_score(replies, [ticket.fix] * 10)
    assert (result.n_correct, result.n_total, result.accuracy) == (8, 10, 0.8)
    assert (result.ci_low, result.ci_high) == pytest.approx((0.4902, 0.9433), abs=1e-4)  # Wilson 1927, z = 1.96
    assert result.format() == "0.800 [0.49, 0.94] (8/10)"
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4) and wilson_interval(5, 5)[1] == 1.0
    with pytest.raises(ValueError, match="one ground-truth fix per reply"):
        task_accuracy_score(replies, [ticket.fix])
    with pytest.raises(ValueError, match="at least one example"):
        accuracy_with_ci(np.array([], dtype=bool))


def test_task_accuracy_reads_the_test_side_else_validation(tickets):
    records = [t.record() for t in tickets]
    split = MembershipSplit.from_records(records[:4], records[4:8], records[8:10], records[10:13])
    assert held_out_tickets(split) == ("test", records[10:13])
    assert held_out_tickets(split, max_texts=2) == ("test", records[10:12])  # the first max_texts, in order
    assert held_out_tickets(MembershipSplit.from_records(records[:4], records[4:8], records[8:10])) == \
        ("validation", records[8:10])
    with pytest.raises(ValueError, match="set data.n_test"):
        held_out_tickets(MembershipSplit.from_records(records[:4], records[4:8]))


def test_task_settings_round_trip_through_yaml_and_refuse_what_measures_nothing(tmp_path):
    config = RunConfig(data=DataSettings(n_test=40), audit=AuditConfig(task=TaskSettings(max_new_tokens=64,
                                                                                         max_texts=20)))
    assert load_yaml(RunConfig, save_yaml(config, tmp_path / "run.yaml")) == config
    (tmp_path / "on.yaml").write_text("data: {n_test: 10}\naudit: {task: {}}\n")
    assert load_yaml(RunConfig, tmp_path / "on.yaml").audit.task == TaskSettings()
    (tmp_path / "bad.yaml").write_text("audit: {task: {max_new_tokens: 0}}\n")
    with pytest.raises(ConfigError, match="max_new_tokens=0 must be at least 1"):
        load_yaml(RunConfig, tmp_path / "bad.yaml")
    with pytest.raises(ValueError, match="set data.n_test"):
        RunConfig(data=DataSettings(n_validation=0), audit=AuditConfig(task=TaskSettings()))
