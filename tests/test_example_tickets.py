"""`privft example support-tickets` end to end at the tiny scale, on a tiny model instead of the embedded default."""

from __future__ import annotations

import json

import numpy as np
import pytest

from privft.cli import main
from privft.data import MembershipSplit, NearDuplicateWarning


def test_the_walk_through_runs_every_step_and_writes_one_page(tiny_model, tokenizer, tmp_path, one_thread, capsys):
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    out = tmp_path / "tickets"
    main(["example", "support-tickets", "--scale", "tiny", "--model", str(tmp_path / "base"), "--out", str(out)])
    assert f"Walk-through: {out / 'support-tickets.md'}" in capsys.readouterr().out
    page = (out / "support-tickets.md").read_text()
    steps = ["## 1. Split first", "## 2. Blind baseline", "## 3. Scores", "## 4. LiRA with 8 LoRA shadows",
             "## 5. The decision", "### Before and after", "### The release gate", "## The model card"]
    assert [page.index(step) for step in steps] == sorted(page.index(step) for step in steps)

    # 1-2: the next month's split is caught by the blind baseline, and goes no further.
    next_row = next(line for line in page.splitlines() if line.startswith("| members vs next month's tickets"))
    assert "**distribution shift**" in next_row and "**That split stops here**" in page
    # 3 and 5: two privft train runs, 4 then 2 epochs; the second on the de-duplicated split, gated.
    before, after = (json.loads((out / run / "report.json").read_text()) for run in ("before", "after"))
    assert (before["training"]["epochs"], after["training"]["epochs"]) == (4, 2)
    assert before["reference"] == after["reference"] == "base model (adapters disabled)"
    assert before["canary_exposure"]["n_canaries"] == 2 and before["canary_exposure"]["copies"] == 2
    with pytest.warns(NearDuplicateWarning):  # the random split has copies of members among its non-members
        split = MembershipSplit.load(out / "before" / "split.json")
    deduplicated = MembershipSplit.load(out / "after" / "split.json")
    assert json.loads((out / "before" / "manifest.json").read_text())["canaries"]["kind"] == "email"
    assert set(deduplicated.members) < set(split.members) and deduplicated.near_duplicates == []
    for run in ("before", "after"):
        outcome = json.loads((out / run / "gate.json").read_text())["outcome"]
        assert f"Release gate: {outcome.upper()}" in (out / run / "model" / "README.md").read_text()
    assert page.count("**Release gate:") >= 4  # both models, this scale's policy and the default one
    assert "| Gate, default policy | **Release gate: CANNOT JUDGE** — members audited: fail (24, limit ≥ 1,000)" in page
    # 4: eight shadows on random halves of the pool, then LiRA on the fine-tune itself.
    plan = json.loads((out / "shadows" / "plan.json").read_text())
    keep = np.array([[c == "1" for c in row] for row in plan["keep"]])
    assert keep.shape == (8, 48) and (keep.sum(axis=0) == 4).all()
    lira = json.loads((out / "lira-target.json").read_text())
    assert sum(lira["label"]) == 24 and len(lira["score"]) == 48 and np.isfinite(lira["score"]).all()
    assert "The 5 most exposed members" in page and "| near-duplicate |" in page and "| unusual name |" in page
