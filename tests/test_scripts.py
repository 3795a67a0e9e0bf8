"""The scripts that print documented tables run on the files privft writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).parent.parent / "scripts"


def _run_with_selections(folder: Path, loss_source: str, selected: list[list[int]]) -> Path:
    folder.mkdir()
    records = [{"epoch": epoch, "loss_source": loss_source, "n_total": 6, "selected": picked}
               for epoch, picked in enumerate(selected, start=1)]
    (folder / "soft_selections.json").write_text(json.dumps(records))
    return folder


def test_selection_overlap_prints_the_jaccard_of_each_selection(tmp_path):
    eval_run = _run_with_selections(tmp_path / "eval", "eval", [[0, 1, 2, 3], [0, 1, 2, 3, 4]])
    training_run = _run_with_selections(tmp_path / "training", "training", [[2, 3, 4], [0, 1, 2, 3, 4]])
    run = subprocess.run([sys.executable, str(SCRIPTS / "selection_overlap.py"), str(eval_run), str(training_run)],
                         capture_output=True, text=True, check=True)
    rows = run.stdout.strip().splitlines()
    assert rows[2] == "| 1 | 4/6 | 3/6 | 2 | 0.40 |" and rows[3] == "| 2 | 5/6 | 5/6 | 5 | 1.00 |"
    missing = subprocess.run([sys.executable, str(SCRIPTS / "selection_overlap.py"), str(tmp_path), str(eval_run)],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "soft_selections.json does not exist" in missing.stderr


def test_update_study_doc_replaces_only_the_text_between_its_markers(tmp_path):
    comparison = tmp_path / "comparison"
    comparison.mkdir()
    (comparison / "compare.md").write_text("| new | table |\n")
    (comparison / "compare.png").write_bytes(b"png")
    (comparison / "compare.json").write_text("{}")
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n<!-- compare.md begins -->\n| old |\n<!-- compare.md ends -->\n\nReading.\n")
    subprocess.run([sys.executable, str(SCRIPTS / "update_study_doc.py"), str(comparison), str(page)], check=True)
    assert page.read_text() == ("# Page\n\n<!-- compare.md begins -->\n| new | table |\n<!-- compare.md ends -->\n\n"
                                "Reading.\n")
    assert (tmp_path / "page.png").read_bytes() == b"png" and (tmp_path / "page.json").read_text() == "{}"
    assert not (tmp_path / "page-rank.png").exists()
    (comparison / "compare-rank.png").write_bytes(b"rank")  # a grid with two LoRA ranks has its rank curve too
    subprocess.run([sys.executable, str(SCRIPTS / "update_study_doc.py"), str(comparison), str(page)], check=True)
    assert (tmp_path / "page-rank.png").read_bytes() == b"rank"
    page.write_text("no markers\n")
    run = subprocess.run([sys.executable, str(SCRIPTS / "update_study_doc.py"), str(comparison), str(page)],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "needs one" in run.stderr


def test_soft_defaults_ranks_the_cells_that_fine_tuned_by_auc_drop_per_perplexity_point(tmp_path):
    def row(name: str, family: str, auc: float, caught: int, perplexity: float) -> dict:
        tpr = [{"max_fpr": 0.01, "true_positives": caught + 10, "n_members": 50},
               {"max_fpr": 0.001, "true_positives": caught, "n_members": 50}]
        return {"name": name, "family": family, "strongest": {"auc": auc, "tpr": tpr}, "perplexity": perplexity}

    rows = [row("pretrained", "pretrained", 0.5, 0, 20.0), row("LoRA r=16", "lora", 1.0, 40, 10.0),
            row("weak", "soft", 0.98, 38, 10.5), row("strong", "soft", 0.8, 10, 12.0),
            row("salad", "soft", 0.5, 0, 30.0)]
    path = tmp_path / "compare.json"
    path.write_text(json.dumps({"pretrained_perplexity": 20.0, "rows": rows}))
    run = subprocess.run([sys.executable, str(SCRIPTS / "soft_defaults.py"), str(path)],
                         capture_output=True, text=True, check=True)
    lines = run.stdout.strip().splitlines()
    assert lines[0].startswith("| configuration | AUC drop | TPR@0.1 % drop (of 50) |")
    assert lines[2] == "| strong | 1.000 → 0.800: 0.200 | 40 → 10: 30 | 10.00 → 12.00: 2.00 | 0.100 | 15 |"
    assert lines[3] == "| weak | 1.000 → 0.980: 0.020 | 40 → 38: 2 | 10.00 → 10.50: 0.50 | 0.040 | 4 |"
    assert lines[-1] == "Not fine-tuned (validation perplexity at or above the pretrained model's 20.00): salad."


def test_paired_perplexity_divides_each_cell_by_the_baseline_over_the_same_texts(tmp_path):
    def cell(name: str, nll: list[float] | None) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        record = {"value": 0.0, "nll_sums": nll, "token_counts": [10, 10, 10] if nll else None}
        (folder / "report.json").write_text(json.dumps({"perplexity": record}))
        return folder

    base, same, worse = cell("base", [20.0, 25.0, 30.0]), cell("same", [20.0, 25.0, 30.0]), cell("worse", [21, 26, 31])
    run = subprocess.run([sys.executable, str(SCRIPTS / "paired_perplexity.py"), str(base), str(same), str(worse)],
                         capture_output=True, text=True, check=True)
    rows = run.stdout.strip().splitlines()
    assert rows[2].startswith("| same | 0.00 | 1.000 [1.000, 1.000] |")
    assert rows[3] == "| worse | 0.00 | 1.105 [1.105, 1.105] ✱ |"  # exp(3 / 30): one nat more on every text
    old = cell("old", None)
    refused = subprocess.run([sys.executable, str(SCRIPTS / "paired_perplexity.py"), str(base), str(old)],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "add_perplexity_losses.py" in refused.stderr


def _audit_report(folder: Path, aucs: dict[str, float], true_positives: int, scores: dict | None = None) -> None:
    """A report.json with what prompt_side_table reads: the split's counts, each attack's AUC and TPR entries,
    and with `scores` the per-text scores (50 members, then 200 non-members)."""
    folder.mkdir(parents=True)
    tpr = [{"max_fpr": 0.01, "tpr": true_positives / 50, "true_positives": true_positives, "n_members": 50},
           {"max_fpr": 0.001, "tpr": None, "true_positives": None, "n_members": 50}]
    metrics = {name: {"auc": {"auc": auc, "ci_low": auc - 0.05, "ci_high": auc + 0.05}, "tpr_at_fpr": tpr}
               for name, auc in aucs.items()}
    per_text = {"sha256": [str(i) for i in range(250)], "label": [1] * 50 + [0] * 200, "scores": scores}
    (folder / "report.json").write_text(json.dumps({"split": {"n_members": 50, "n_non_members": 200},
                                                    "blind_baseline": metrics.pop("blind"), "attacks": metrics,
                                                    **({"per_text": per_text} if scores else {})}))


def test_prompt_side_table_puts_each_cells_two_sides_together_and_names_the_pending(tmp_path):
    chance = {"loss": [0.0] * 250, "min_k": [0.0] * 250}  # every text tied: AUC 0.5
    apart = {"loss": [1.0] * 50 + [0.0] * 200, "min_k": [0.0] * 250}  # members above every non-member: AUC 1
    _audit_report(tmp_path / "pretrained", {"blind": 0.51, "loss": 0.5, "min_k": 0.5}, 1, chance)
    _audit_report(tmp_path / "pretrained" / "prompt-side", {"blind": 0.51, "loss": 0.5, "min_k": 0.5}, 1, chance)
    _audit_report(tmp_path / "lora", {"blind": 0.51, "loss": 1.0, "min_k": 0.8}, 20, apart)
    _audit_report(tmp_path / "lora" / "prompt-side", {"blind": 0.51, "loss": 0.55, "min_k": 0.6}, 2, chance)
    _audit_report(tmp_path / "dp", {"blind": 0.51, "loss": 0.52}, 1)
    run = subprocess.run([sys.executable, str(SCRIPTS / "prompt_side_table.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True)
    rows = run.stdout.splitlines()
    assert rows[0].startswith("50 members vs 200 non-members")
    assert rows[4] == ("| lora | completion | loss 1.000 [0.95, 1.05] | 0.400 (20/50) | not estimable | "
                       "+0.500 [+0.500, +0.500] ✱ | 0.510 |")
    assert rows[5] == ("| lora | prompt | min_k 0.600 [0.55, 0.65] | 0.040 (2/50) | not estimable | "
                       "+0.000 [+0.000, +0.000] | 0.510 |")
    assert rows[6].startswith("| pretrained | completion |") and rows[6].endswith("| — | 0.510 |")
    assert rows[-1] == "Pending (a side not audited yet): dp."


def test_epsilon_audit_cells_sets_each_bound_beside_the_accountant_and_names_the_skipped(tmp_path):
    import numpy as np

    from privft.callbacks.one_run import one_run_entry

    included = np.arange(200) % 2 == 0
    separated = included * 10.0 + np.random.default_rng(0).normal(size=200)
    entries = {name: one_run_entry(separated, included, guarantee, copies=1, score="loss")
               for name, guarantee in (("dp", (8.0, 1e-5)), ("lora", None))}
    for name, entry in entries.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps({
            "epsilon_audit": entry, "gradient_epsilon_audit": entry if name == "dp" else None}))
        (tmp_path / name / "cell.json").write_text("{}")
    (tmp_path / "pretrained").mkdir()
    (tmp_path / "pretrained" / "report.json").write_text("{")  # mid-save: no cell.json yet, so it is not read
    run = subprocess.run([sys.executable, str(SCRIPTS / "epsilon_audit_cells.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True)
    rows = run.stdout.splitlines()
    dp, lora = rows[2].split(" | "), rows[3].split(" | ")
    assert dp[0] == "| dp" and dp[1] == "8 (δ 1e-05)" and dp[2] == "200 (100 inserted)"
    assert dp[3] == f"{entries['dp']['epsilon_lower_bound']:.2f} (200/200; ceiling {entries['dp']['ceiling']:.2f})"
    assert dp[5] == dp[3]  # the white-box columns read gradient_epsilon_audit the same way
    assert lora[1] == "∞ (no DP)" and lora[5] == "–"
    assert rows[-1] == "No one-run audit (not finished, or no one-run canaries): pretrained."


def test_score_spread_gives_each_sides_mean_and_spread_and_the_members_shift(tmp_path):
    scores = {"loss": [-1.0, -3.0] + [-2.0, -4.0] * 2, "ref_ratio": [0.5] * 6}  # 2 members, then 4 non-members
    (tmp_path / "report.json").write_text(json.dumps({"per_text": {
        "sha256": [str(i) for i in range(6)], "label": [1, 1, 0, 0, 0, 0], "scores": scores}}))
    run = subprocess.run([sys.executable, str(SCRIPTS / "score_spread.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True)
    rows = run.stdout.strip().splitlines()
    assert rows[0] == "2 members vs 4 non-members."
    assert rows[4] == "| loss | -2.000 (1.000) | -3.000 (1.000) | +1.000 |"
    assert rows[5] == "| ref_ratio | 0.500 (0.000) | 0.500 (0.000) | +0.000 |"


def test_cell_records_keep_a_finished_cells_records_without_weights_and_restore_them(tmp_path):
    cells, records, fresh = tmp_path / "cells", tmp_path / "records", tmp_path / "fresh"
    files = {"done/cell.json": "{}", "done/report.json": '{"auc": 0.6}', "done/prompt-side/report.json": "{}",
             "done/model/adapter_config.json": "{}", "done/checkpoint-25/trainer_state.json": "{}",
             "done/tune/lr-0.001/checkpoint-65/trainer_state.json": "{}", "running/report.json": "{}",
             "tuning/tune/lr-0.001/tune.json": "{}", "tuning/tune/lr-0.001/manifest.json": "{}",
             "tuning/tune/lr-0.001/checkpoint-65/trainer_state.json": "{}", "tuning/tune/lr-0.003/manifest.json": "{}"}
    for name, text in files.items():
        (cells / name).parent.mkdir(parents=True, exist_ok=True)
        (cells / name).write_text(text)

    def run(action: str, source: Path) -> None:
        subprocess.run([sys.executable, str(SCRIPTS / "cell_records.py"), action, str(source), str(records)],
                       capture_output=True, text=True, check=True)

    run("archive", cells)
    kept = sorted(str(p.relative_to(records)) for p in records.rglob("*") if p.is_file())
    assert kept == ["done/cell.json", "done/prompt-side/report.json", "done/report.json",  # a finished cell,
                    "tuning/tune/lr-0.001/manifest.json", "tuning/tune/lr-0.001/tune.json"]  # a tuned one's done rate
    (fresh / "done").mkdir(parents=True)
    (fresh / "done" / "report.json").write_text('{"auc": 0.7}')  # a newer run's record is never overwritten
    run("restore", fresh)
    assert (fresh / "done" / "cell.json").read_text() == "{}"
    assert (fresh / "done" / "report.json").read_text() == '{"auc": 0.7}'
    (cells / "done" / "report.json").write_text('{"auc": 0.65}')  # archiving again brings the record up to date
    run("archive", cells)
    assert (records / "done" / "report.json").read_text() == '{"auc": 0.65}'


def test_keep_files_commits_a_plain_folder_and_restore_files_brings_it_back(tmp_path):
    """experiments/cell-records.sh's helpers, as run-frontier.sh carries the LLM paraphraser's cache in git."""
    script = f"""set -euo pipefail
source {SCRIPTS.parent / "experiments" / "cell-records.sh"}
git init -q && git commit -q --allow-empty -m start
mkdir -p cache/ab cache/cd && echo kept > cache/ab/key.json && echo kept > cache/cd/key.json
keep_files cache records/llm "rewrites, as they land"
keep_files cache records/llm "nothing new"
rm -r cache && mkdir -p cache/ab && echo "made here" > cache/ab/key.json
restore_files cache records/llm
git log --format=%s
"""
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@example.org", "PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    run = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=identity, capture_output=True, text=True, check=True)
    assert run.stdout.splitlines() == ["records: rewrites, as they land", "start"]  # an unchanged folder: no commit
    cache = {str(path.relative_to(tmp_path / "cache")): path.read_text()
             for path in (tmp_path / "cache").rglob("*.json")}
    assert cache == {"ab/key.json": "made here\n", "cd/key.json": "kept\n"}  # restored; what is here stays


def _compared_row(name: str, auc: float, caught: int | None = None, accuracy: float | None = None) -> dict:
    """A compare.json row as seed_orderings.py reads it: AUC ± 0.02, TPR at 1 % FPR of 50 members, task ± 0.05."""
    tpr = [{"max_fpr": 0.01, "tpr": None if caught is None else caught / 50, "true_positives": caught or 0,
            "n_members": 50}]
    row = {"name": name, "strongest": {"auc": auc, "auc_ci": [auc - 0.02, auc + 0.02], "tpr": tpr}}
    if accuracy is not None:
        row["task_accuracy"] = {"accuracy": accuracy, "ci_low": accuracy - 0.05, "ci_high": accuracy + 0.05}
    return row


def test_seed_orderings_names_the_orderings_that_hold_and_those_that_reverse(tmp_path):
    row = _compared_row
    seeds = [[row("LoRA", 0.70, 9, 0.9), row("DP", 0.50, 1, 0.2), row("SOFT", 0.60, 3, 0.8)],
             [row("LoRA", 0.72, 8, 0.9), row("DP", 0.51, 4, 0.3), row("SOFT", 0.52, 2, 0.85)]]
    paths = []
    for index, rows in enumerate(seeds):
        paths.append(tmp_path / f"seed{index}.json")
        paths[-1].write_text(json.dumps({"rows": rows}))
    run = subprocess.run([sys.executable, str(SCRIPTS / "seed_orderings.py"), *map(str, paths), "LoRA", "DP", "SOFT",
                          "Goldfish"], capture_output=True, text=True, check=True)
    out = run.stdout
    assert out.startswith("Not finished, left out: Goldfish (")
    assert "| strongest attack AUC (lower: more private) | DP ≻ SOFT ≻ LoRA | DP ⪰ SOFT ≻ LoRA |" in out
    assert "| task accuracy (higher: more useful) | LoRA ⪰ SOFT ≻ DP | LoRA ⪰ SOFT ≻ DP |" in out
    assert "- strongest attack AUC (lower: more private): DP better than LoRA ✱" in out
    assert ("- strongest attack AUC (lower: more private): DP better than SOFT (intervals disjoint at seed A only)"
            in out)  # overlapping at seed B
    assert ("- members caught at 1 % FPR (fewer: more private): DP better than SOFT at seed A, not at seed B "
            "(intervals overlap at both: within noise)") in out
    assert "- task accuracy (higher: more useful): LoRA better than SOFT\n" in out
    assert "| members caught at 1 % FPR (fewer: more private) | DP ⪰ SOFT ⪰ LoRA |" in out  # Wilson intervals overlap
    assert "test perplexity" not in out  # no comparison measured it


def test_seed_orderings_says_where_a_reversal_is_outside_the_noise(tmp_path):
    row = _compared_row
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, rows in zip(paths, ([row("X", 0.50), row("Y", 0.60)], [row("X", 0.56), row("Y", 0.55)])):
        path.write_text(json.dumps({"rows": rows}))
    run = subprocess.run([sys.executable, str(SCRIPTS / "seed_orderings.py"), *map(str, paths), "X", "Y"],
                         capture_output=True, text=True, check=True)
    assert ("- strongest attack AUC (lower: more private): X better than Y at seed A, not at seed B "
            "(intervals disjoint at seed A)") in run.stdout


def test_paused_runs_its_command_only_with_room_beside_the_paused_experiment(tmp_path):
    marker = tmp_path / "ran"
    command = ["bash", str(SCRIPTS / "paused.sh"), "touch", str(marker)]
    refused = subprocess.run(command, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin",
                                                                            "PAUSED_MIN_FREE_GIB": "1000000"})
    assert refused.returncode == 75 and "the OOM killer" in refused.stderr and not marker.exists()
    subprocess.run(command, check=True, env={"PATH": "/usr/bin:/bin", "PAUSED_MIN_FREE_GIB": "0"})
    assert marker.exists()


def test_goldfish_dropped_loss_groups_a_test_token_by_its_mask_and_whether_members_trained_after_its_context():
    import importlib.util

    from privft.defend.goldfish import GoldfishSettings, goldfish_mask

    spec = importlib.util.spec_from_file_location("goldfish_dropped_loss", SCRIPTS / "goldfish_dropped_loss.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    settings = GoldfishSettings(k=2, h=2)
    member = list(range(10, 40))
    seen = script.trained_contexts([member], [[False] * 5 + [True] * 25], settings.h)
    novel = list(range(100, 130))
    scored = list(range(5, 30))  # the member's trained positions
    for ids, dropped_group in ((member, 1), (novel, 2)):
        groups = script.token_groups(ids, scored, settings, seen)
        dropped = goldfish_mask(ids, settings)
        assert groups == [dropped_group if dropped[i] else 0 for i in scored] and dropped_group in groups
    # a dropped token whose context only the member's untrained prefix followed is in a new context
    assert goldfish_mask(member, settings)[3] and script.token_groups(member, [3], settings, seen) == [2]


def test_task_accuracy_by_epoch_names_each_missed_fix_with_its_member_count():
    import runpy
    from collections import Counter

    wrong_by_fix = runpy.run_path(str(SCRIPTS / "task_accuracy_by_epoch.py"))["wrong_by_fix"]
    assert wrong_by_fix(["a", "b", "b", "c"], [True, False, False, False], Counter({"b": 3, "a": 9})) == (
        "2/2 (3 members) b…; 1/1 (0 members) c…")
    assert wrong_by_fix(["a"], [True], Counter()) == "none"
