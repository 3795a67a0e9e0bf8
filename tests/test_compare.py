"""`privft compare`: a few steps per cell on the tiny model, every cell audited alike, and a rerun skips them all."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from privft.audit import AuditConfig
from privft.clock import cpu_model
from privft.compare import (
    NO_TRAINING,
    PRETRAINED,
    AdaptiveSettings,
    Cell,
    CellSpec,
    CompareConfig,
    Comparison,
    GridSettings,
    _finish_rows,
    _mean_summary,
    _progress,
    _rate,
    comparison_table,
    grid_cells,
    pick_table,
    run_compare,
    utility_axis,
)
from privft.config import load_yaml, save_yaml, to_dict
from privft.metrics import AccuracyResult, evaluate_attack
from privft.pipeline import CanarySettings, DataSettings, DPSettings, RunConfig, SoftSettings, check_canary_room
from privft.training import FinetuneSettings, LoraSettings
from privft.tune import TuneSettings


@pytest.fixture()
def config(tiny_model, tokenizer, write_texts, tmp_path) -> CompareConfig:
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    data_file = write_texts(tmp_path, 80, min_chars=120, max_chars=200)
    run = RunConfig(
        model=str(tmp_path / "base"),
        data=DataSettings(corpus=None, path=str(data_file), max_words=None, n_members=16, n_non_members=16,
                          n_validation=4),
        training=FinetuneSettings(epochs=1, batch_size=4, max_length=64, learning_rate=1e-2,
                                  lora=LoraSettings(rank=4, alpha=8, targets=("q_proj", "v_proj"))),
        soft=SoftSettings(paraphraser="neighbour"),
        dp=DPSettings(max_grad_norm=1.0, physical_batch_size=2),
        audit=AuditConfig(attacks=("loss", "ref_ratio"), n_bootstrap=20, max_fprs=(0.1, 0.01)),
    )
    grid = GridSettings(lora_ranks=(), soft_rules=("release",), dp_epsilons=(0.05, 8.0), full_learning_rate=1e-3)
    return CompareConfig(run=run, grid=grid, output_dir=str(tmp_path / "compare"))


def test_compare_config_round_trips_through_yaml(tmp_path):
    config = CompareConfig(grid=GridSettings(lora_ranks=(8,), dp_epsilons=(0.05, 3.0)))
    assert load_yaml(CompareConfig, save_yaml(config, tmp_path / "compare.yaml")) == config


def test_grid_runs_every_cell_audited_alike_and_resumes(config):
    comparison = run_compare(config)
    names = [row["name"] for row in comparison.rows]
    assert names == [c.name for c in grid_cells(config)] == [
        PRETRAINED, "LoRA r=4", "full fine-tuning", "SOFT release (r=4)", "DP-LoRA ε=8 (r=4)", "DP-LoRA ε=0.05 (r=4)"]
    assert comparison.ran == names
    assert {tuple(row["attacks"]) for row in comparison.rows} == {("loss", "ref_ratio")}  # full FT too
    dp_rows = [row for row in comparison.rows if row["family"] == "dp"]
    for row in dp_rows:
        assert row["epsilon"] <= row["privacy"]["target_epsilon"]
        assert row["privacy"]["noised_steps"] == row["privacy"]["steps"] == 4  # 16 members, batch 4, 1 epoch
    assert all(row["epsilon"] is None for row in comparison.rows if row["family"] != "dp")
    pretrained, lora = comparison.rows[:2]
    assert pretrained["train_seconds"] == 0 and pretrained["learned"] and lora["overhead_vs_lora"] == 1.0
    full = next(row for row in comparison.rows if row["name"] == "full fine-tuning")  # cost: CPU seconds' ratio
    assert full["overhead_measure"] == "cpu" and \
        full["overhead_vs_lora"] == pytest.approx(full["train_cpu_seconds"] / lora["train_cpu_seconds"])
    for row in comparison.rows:  # perplexity carries an interval over the validation texts, paired against LoRA
        assert row["perplexity_ci"][0] <= row["perplexity"] <= row["perplexity_ci"][1]
        if row is not lora:
            assert row["perplexity_vs_lora"]["ratio"] == pytest.approx(row["perplexity"] / lora["perplexity"])
    assert lora["perplexity_vs_lora"] is None
    out = comparison.output_dir
    table = (out / "compare.md").read_text()
    assert "DP-LoRA ε=0.05 (r=4) | 0.0" in table and "/16)" in table  # ε and counts beside the rates
    assert (NO_TRAINING in table) == any(not row["learned"] for row in comparison.rows)
    assert (out / "compare.png").read_bytes()[:4] == b"\x89PNG"
    pick = subprocess.run([sys.executable, str(Path(__file__).parent.parent / "scripts" / "what_to_pick.py"),
                           str(out / "compare.json"), "DP-LoRA ε=8 (r=4)", PRETRAINED],  # the README's decision rows
                          capture_output=True, text=True, check=True).stdout.splitlines()
    assert pick[0].startswith("| Configuration |") and "TPR @ 1 % FPR" in pick[0] and len(pick) == 6
    assert pick[2].startswith("| DP-LoRA ε=8 (r=4) (lr 0.01, 1 epoch) |") and pick[2].count(" | ") == 5
    assert pick[3].endswith("| none |")
    with pytest.raises(ValueError, match=r"\['LoRA r=5'\] are not among the finished cells"):
        pick_table(comparison.rows, ["LoRA r=5"])
    assert {tuple(row["cpus"]) for row in comparison.rows} == {(), (cpu_model(),)} and "‡" not in table
    elsewhere = [dict(row, cpus=["Other CPU"]) if row["name"] == "full fine-tuning" else row
                 for row in comparison.rows]  # a cell trained on another machine: its CPU seconds are not comparable
    marked = comparison_table(Comparison(elsewhere, [], out, []))
    assert "| full fine-tuning |" in marked and marked.count(" ‡ |") == 1
    assert f"trained on {cpu_model()}: LoRA r=4, SOFT release (r=4)," in marked
    assert "Other CPU: full fine-tuning." in marked
    assert "Other CPU: full fine-tuning." in pick_table(elsewhere, ["LoRA r=4", "full fine-tuning"])
    assert "CPU seconds compare" not in pick_table(elsewhere, ["LoRA r=4", PRETRAINED])
    older = [dict(row, train_cpu_seconds=None) if row["name"] == "full fine-tuning" else dict(row)
             for row in comparison.rows]  # a cell from before CPU seconds were recorded: its cost is wall time's
    _finish_rows(older, comparison.pretrained_perplexity, older[1])
    assert older[2]["overhead_measure"] == "wall" and older[2]["overhead_vs_lora"] == \
        pytest.approx(older[2]["train_seconds"] / lora["train_seconds"])
    assert comparison_table(Comparison(older, [], out, [])).count(" (wall) |") == 1
    assert json.loads((out / "compare.json").read_text())["rows"][4]["privacy"]["privacy_unit"] == \
        "one training sequence"

    again = run_compare(config)
    assert again.ran == []
    assert [row["train_seconds"] for row in again.rows] == [row["train_seconds"] for row in comparison.rows]

    # grid.baseline: every row measured against another cell (e.g. the tuned undefended model), from the same cells
    rebased = run_compare(replace(config, grid=replace(config.grid, baseline="full fine-tuning")), finished_only=True)
    rows = {row["name"]: row for row in rebased.rows}
    full = rows["full fine-tuning"]
    assert rebased.ran == [] and full["overhead_vs_lora"] == 1.0 and full["perplexity_vs_lora"] is None
    assert rows["LoRA r=4"]["perplexity_vs_lora"]["ratio"] == pytest.approx(lora["perplexity"] / full["perplexity"])
    assert rows["LoRA r=4"]["vs_lora"]["attack"] == full["strongest_attack"]
    table = (out / "compare.md").read_text()
    assert "ΔAUC vs full fine-tuning [paired 95 % CI]" in table and "| × full fine-tuning |" in table
    assert json.loads((out / "compare.json").read_text())["baseline"] == "full fine-tuning"
    unfinished = Comparison([row for row in rebased.rows if row is not full], [], out, [], "full fine-tuning")
    assert unfinished.baseline["name"] == "LoRA r=4" and "ΔAUC vs LoRA [" in comparison_table(unfinished)
    assert "The grid's baseline, full fine-tuning, has not finished" in comparison_table(unfinished)
    with pytest.raises(ValueError, match="grid.baseline names 'LoRA r=5', which is not a cell of this grid"):
        run_compare(replace(config, grid=replace(config.grid, baseline="LoRA r=5")), finished_only=True)


def test_a_report_without_per_text_losses_gets_no_perplexity_ratio():
    from privft.compare import _perplexity_vs

    measured = {"nll_sums": [30.0, 40.0], "token_counts": [10, 20]}
    assert _perplexity_vs({"value": 9.0}, measured) is None  # a report written before per-text losses were kept
    assert _perplexity_vs(measured, {**measured, "token_counts": [11, 20]}) is None  # tokenised differently
    assert _perplexity_vs(measured, measured)["ratio"] == 1.0


def test_write_default_writes_a_loadable_config(tmp_path, capsys):
    from privft.cli import main

    main(["compare", str(tmp_path / "compare.yaml"), "--write-default"])
    assert load_yaml(CompareConfig, tmp_path / "compare.yaml") == CompareConfig()
    assert "privft compare" in capsys.readouterr().out


def test_mean_tpr_gives_a_count_only_when_every_attack_scored_the_same_members():
    rng = np.random.default_rng(0)
    full = evaluate_attack(np.repeat([1, 0], 200), rng.random(400), n_bootstrap=10)
    part = evaluate_attack(np.repeat([1, 0], 140), rng.random(280), n_bootstrap=10)  # e.g. the Ensemble's share
    same = _mean_summary({"loss": full, "zlib": full})["tpr"][0]
    assert same["n_members"] == 200 and same["true_positives"] == full.tpr_at_fpr[0].true_positives
    mixed = _mean_summary({"loss": full, "ensemble": part})["tpr"][0]
    assert mixed["n_members"] is None and mixed["true_positives"] is None and mixed["tpr"] is not None
    assert _rate(mixed, mean=True).endswith("(attacks scored different members)")


def test_write_default_refuses_an_existing_config(tmp_path):
    from privft.cli import main

    config = tmp_path / "compare.yaml"
    config.write_text("grid:\n  lora_ranks: [4]\n")
    with pytest.raises(SystemExit, match=r"compare.yaml already exists.*delete it first, or give another path"):
        main(["compare", str(config), "--write-default"])
    assert config.read_text() == "grid:\n  lora_ranks: [4]\n"


def test_the_base_model_is_scored_once_per_grid(config, monkeypatch):
    """The pretrained row's full pass is cached; its own reference pass and every LoRA cell's (adapters off) read it."""
    import privft.scoring.forward as scoring

    passes: list[tuple[str, int]] = []
    real = scoring._score_sequences

    def recorded(model, sequences, **kwargs):
        passes.append((kwargs["desc"], len(sequences)))
        return real(model, sequences, **kwargs)

    monkeypatch.setattr(scoring, "_score_sequences", recorded)
    config.grid = GridSettings(full_finetune=False, lora_ranks=(2,), soft_rules=(), dp_epsilons=(),
                               adaptive=AdaptiveSettings(n_members=4, n_non_members=6))
    comparison = run_compare(config)
    assert [row["name"] for row in comparison.rows] == [PRETRAINED, "LoRA r=4", "LoRA r=2"]
    assert (comparison.output_dir / "compare-rank.png").read_bytes()[:4] == b"\x89PNG"  # two ranks: a curve
    reference_passes = [n for desc, n in passes if desc == "reference"]
    assert reference_passes == [0, 0, 0]  # the pretrained row's target pass (16 + 16 texts) serves every reference
    assert all(n > 0 for desc, n in passes if desc == "target")  # each trained model is scored afresh
    assert comparison.rows[0]["adaptive"] is None  # the pretrained model knows no defence to adapt to
    adaptive = comparison.rows[1]["adaptive"]
    assert set(adaptive) == {"non-adaptive (Ratio)", "knows the selection strategy", "knows paraphraser and selection"}
    assert all(m["tpr"][0]["n_members"] == 4 and m["tpr"][0]["n_non_members"] == 6 for m in adaptive.values())
    trained = comparison.rows[1]  # the attackers run inside the training clock, and are taken out of it
    assert 0 < trained["adaptive_seconds"] and trained["train_seconds"] + trained["adaptive_seconds"] < \
        trained["cell_seconds"]
    table = (comparison.output_dir / "compare.md").read_text()
    assert "Attackers who know the defence (4 members vs 6 non-members" in table and "Gain kept" in table
    config.grid.lora_ranks = (2, 8)
    calls = len(passes)
    partial = run_compare(config, finished_only=True)  # tabulates, runs nothing
    assert partial.pending == ["LoRA r=8"] and partial.ran == [] and len(passes) == calls
    assert "Pending cells (not yet run; rerun `privft compare` to resume): LoRA r=8." in \
        (partial.output_dir / "compare.md").read_text()
    config.grid.lora_ranks = (2, 8, 16)
    with pytest.raises(ValueError, match=r"No cell named 'LoRA r=9' in this grid; its cells are: .*'LoRA r=8'"):
        run_compare(config, only=["LoRA r=9"])
    chosen = run_compare(config, only=["LoRA r=8"])  # runs that cell alone; the finished ones are read
    assert chosen.ran == ["LoRA r=8"] and chosen.pending == ["LoRA r=16"]
    assert [n for desc, n in passes[calls:] if desc == "reference"] == [0]  # still the grid's one reference pass


def test_named_cells_change_dotted_settings_and_refuse_unknown_ones(config):
    config.grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=(), cells=(
        CellSpec("SOFT all, suffix only", set={"soft.rule": "all", "soft.mode": "rewrite-only"}),))
    cell = grid_cells(config)[-1]
    assert cell.family == "soft" and cell.config.soft.mode == "rewrite-only"
    assert cell.config.training.output_dir.endswith("soft-all-suffix-only")
    config.grid.cells = (CellSpec("typo", set={"soft.rulle": "paper"}),)
    with pytest.raises(ValueError, match=r"grid.cells 'typo': 'soft.rulle' is not a setting.*'rule'"):
        grid_cells(config)
    config.grid.cells = (CellSpec("bad rule", set={"soft.rule": "nope"}),)
    with pytest.raises(ValueError, match=r"grid.cells 'bad rule'.*soft.rule='nope'"):
        grid_cells(config)


def test_reproduce_table1_from_a_comparisons_cells(config, tmp_path, capsys):
    """The paper's layout is filled from the comparison's own cells, run (only those it needs) or reused."""
    from privft.cli import main

    config.grid = GridSettings(lora_ranks=(2,), soft_rules=("release",), dp_epsilons=(), full_learning_rate=1e-3)
    path = save_yaml(config, tmp_path / "compare.yaml")
    main(["reproduce", "table1", "--from-compare", str(path)])
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if line.startswith("| Attack |"))
    assert header == "| Attack | local data Pretrained | local data FT | local data LoRA | local data SOFT |"
    assert "| ReCaLL | — | — | — | — |" in printed  # a comparison's audit has no context attacks
    assert "**Mean** (the 3 paper rows measured)" in printed and "### Published (SOFT Table 1" in printed
    finished = json.loads((tmp_path / "compare" / "compare.json").read_text())
    assert [row["name"] for row in finished["rows"]] == [PRETRAINED, "LoRA r=4", "full fine-tuning",
                                                         "SOFT release (r=4)"]  # LoRA r=2 is not Table 1's
    assert (tmp_path / "compare" / "table1.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit, match="--from-compare fills table1 only"):
        main(["reproduce", "tpr", "--from-compare", str(path)])
    (tmp_path / "compare" / "cells" / "full-fine-tuning" / "cell.json").unlink()  # as if it had not run yet
    main(["reproduce", "table1", "--from-compare", str(path), "--finished-only"])
    printed = capsys.readouterr().out
    assert "| Attack | local data Pretrained | local data LoRA | local data SOFT |" in printed
    assert "Pending cells (not yet run; rerun without --finished-only to run them): full fine-tuning." in printed
    assert not (tmp_path / "compare" / "cells" / "full-fine-tuning" / "cell.json").exists()  # nothing ran
    with pytest.raises(SystemExit, match="--finished-only reads a comparison's cells"):
        main(["reproduce", "table1", "--finished-only"])


def test_table1s_soft_column_is_the_release_faithful_cell_where_the_grid_has_one(config):
    from privft.paper.from_compare import paper_methods

    config.grid = GridSettings(lora_ranks=(), soft_rules=("release",), dp_epsilons=())
    assert paper_methods(config)["soft"] == "SOFT release (r=4)"  # the release rule at the grid's paraphraser
    config.grid.cells = (CellSpec("SOFT release, LLM", set={"soft.rule": "release", "soft.paraphraser": "llm",
                                                             "soft.paraphraser_options": {}}),)
    assert paper_methods(config)["soft"] == "SOFT release, LLM"  # release rule, LLM rewrite, trained on it alone


def test_the_documented_grids_load_and_the_scale_grids_share_their_cells():
    """Every committed comparison builds its cells; the SOFT study and the scale grid share one split and run."""
    experiments = Path(__file__).parent.parent / "experiments"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the study selects configurations privft warns about, on purpose
        grids = {name: load_yaml(CompareConfig, experiments / f"{name}.yaml")
                 for name in ("compare-smollm2", "compare-scale", "soft-study", "conversations", "frontier",
                              "frontier-seed1", "epsilon-audit-pilot", "epsilon-audit")}
        cells = {name: {cell.name: cell for cell in grid_cells(config)} for name, config in grids.items()}
    study, scale = grids["soft-study"], grids["compare-scale"]
    assert study.run == scale.run and study.cells_dir == scale.cells_dir
    shared = set(cells["soft-study"]) & set(cells["compare-scale"])
    assert {"pretrained (not fine-tuned)", "LoRA r=16", "SOFT release (r=16)", "SOFT paper (r=16)",
            "SOFT release, suffix rewritten by the LLM"} <= shared
    assert all(cells["soft-study"][name].config == cells["compare-scale"][name].config for name in shared)
    assert scale.run.data.n_members == 500 and scale.run.data.n_non_members == 2000
    chats = grids["conversations"].run.data  # issue 29's measured cells: tickets-chat, completion-only
    assert (chats.corpus, chats.corpus_options["format"], chats.n_members, chats.n_non_members) == (
        "tickets-chat", "prompt_completion", 500, 2000)
    assert set(cells["conversations"]) == {"pretrained (not fine-tuned)", "LoRA r=16", "SOFT paper (r=16)",
                                           "DP-LoRA ε=8 (r=16)"}
    frontier, second = grids["frontier"], grids["frontier-seed1"]  # issue 31: tuned cells beside the untuned ones
    assert frontier.run == grids["conversations"].run and frontier.cells_dir == grids["conversations"].cells_dir
    assert all(cell.tune and len(cell.tune.learning_rates) == 3 for name, cell in cells["frontier"].items()
               if name.endswith(", tuned"))
    assert {cell.family for cell in cells["frontier"].values() if cell.tune} == {"lora", "full", "soft", "dp",
                                                                                "goldfish"}
    assert second.cells_dir != frontier.cells_dir and second.run.data.seed != frontier.run.data.seed
    assert second.run.training.seed != frontier.run.training.seed and second.run.dp.seed != frontier.run.dp.seed
    assert all(cells["frontier-seed1"][name].tune == cells["frontier"][name].tune for name in cells["frontier-seed1"])
    assert list(cells["frontier-seed1"])[:2] == ["pretrained (not fine-tuned)", "LoRA r=16, tuned"]  # no untuned LoRA
    assert cells["compare-scale"]["LoRA r=16, tuned"].tune.learning_rates == (0.0003, 0.001, 0.003)
    audited = grids["epsilon-audit"]  # issue 32: the scale split, the pilot's design, every cell within canary room
    assert audited.run.data == scale.run.data and audited.cells_dir != scale.cells_dir
    assert audited.run.canaries.design == "bigram" and audited.run.canaries.one_run
    for name in ("epsilon-audit", "epsilon-audit-pilot"):
        for cell in cells[name].values():
            check_canary_room(cell.config)
    assert all(cell.config.dp.gradient_canaries == 1000 for cell in cells["epsilon-audit"].values()
               if cell.family == "dp")


def test_add_perplexity_losses_restores_what_the_audit_measured_and_refuses_another_model(config):
    """scripts/add_perplexity_losses.py brings reports written before per-text losses to what an audit writes now."""
    import subprocess
    import sys

    config.grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=())
    config.run = replace(config.run, start_token="<pad>")  # a start token the script must take from the cell's config
    script = Path(__file__).parent.parent / "scripts" / "add_perplexity_losses.py"
    cells = [Path(row["report"]).parent for row in run_compare(config).rows]  # the pretrained row and LoRA r=4
    measured = {}
    for cell in cells:
        report = json.loads((cell / "report.json").read_text())
        measured[cell] = report["perplexity"]
        report["perplexity"] = {k: v for k, v in report["perplexity"].items()
                                if k not in ("ci_low", "ci_high", "nll_sums", "token_counts")}
        (cell / "report.json").write_text(json.dumps(report))
    subprocess.run([sys.executable, str(script), *map(str, cells)], check=True, capture_output=True)
    for cell in cells:
        restored = json.loads((cell / "report.json").read_text())["perplexity"]
        assert restored["nll_sums"] == pytest.approx(measured[cell]["nll_sums"], rel=1e-6)
        assert (restored["ci_low"], restored["ci_high"]) == pytest.approx(
            (measured[cell]["ci_low"], measured[cell]["ci_high"]), rel=1e-6)

    report = json.loads((cells[1] / "report.json").read_text())
    report["perplexity"] = {"value": report["perplexity"]["value"] * 1.01, "on": "validation", "n_texts": 4}
    (cells[1] / "report.json").write_text(json.dumps(report))
    refused = subprocess.run([sys.executable, str(script), str(cells[1])], capture_output=True, text=True)
    assert refused.returncode != 0 and "is not the one audited, so nothing was written" in refused.stderr
    assert json.loads((cells[1] / "report.json").read_text()) == report


@pytest.mark.parametrize("canaries", [CanarySettings(n_canaries=30, copies=4),
                                      CanarySettings(n_canaries=300, copies=1, one_run=True)],
                         ids=["copies", "one-run draw"])
def test_a_grid_cell_with_more_canary_texts_than_members_is_refused_before_any_cell_runs(canaries, tmp_path):
    grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=(), cells=(
        CellSpec("canaried", "lora", set={"canaries": to_dict(canaries)}),))
    config = CompareConfig(run=RunConfig(data=DataSettings(n_members=100)), grid=grid, output_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"grid cell 'canaried': canaries: \d+ canary texts \(.+ copies\) would "
                                         r"join 100 training texts, but canaries may be at most half.*data.n_members"):
        run_compare(config)
    assert not any(tmp_path.iterdir())  # refused before the pretrained row ran or compare.yaml was written


def test_a_prompt_side_of_plain_texts_is_refused_before_any_cell_runs(config):
    config.grid = GridSettings(full_finetune=False, lora_ranks=(), soft_rules=(), dp_epsilons=(), prompt_side=True)
    with pytest.raises(ValueError, match=r"grid.prompt_side .* plain texts, which have no prompt"):
        run_compare(config)
    assert not Path(config.output_dir).exists()  # refused before the pretrained row ran or compare.yaml was written


def test_the_privacy_utility_plot_reads_task_accuracy_where_every_row_measured_it():
    def row(perplexity: float, task: AccuracyResult | None) -> dict:
        return {"perplexity": perplexity, "perplexity_ci": [perplexity - 1, perplexity + 1],
                "task_accuracy": task.to_dict() if task else None}

    measured = [row(20.0, AccuracyResult(0.0, 0.0, 0.02, 0, 200)),
                row(1.1, AccuracyResult(0.975, 0.94, 0.99, 195, 200))]
    label, utility = utility_axis(measured)
    assert label.startswith("task accuracy on 200 held-out tickets") and utility(measured[1]) == (0.975, 0.94, 0.99)
    label, utility = utility_axis(measured + [row(5.0, None)])  # one row without it: perplexity for every row
    assert label.startswith("validation perplexity") and utility(measured[1]) == pytest.approx((1.1, 0.1, 2.1))


def test_the_eta_counts_a_tuned_cell_as_one_training_run_per_learning_rate():
    run = RunConfig()
    plain, tuned = Cell("LoRA r=16", "lora", run), Cell("SOFT, tuned", "soft", run, TuneSettings((3e-4, 1e-3, 3e-3)))
    cells = [plain, tuned, replace(tuned, name="Goldfish, tuned", family="goldfish")]
    line = _progress(2, cells, cells[2:], [(plain, 600.0), (tuned, 1800.0)])  # 2,400 s over 4 runs: 10 min a run
    assert line.endswith("cell 3/3: Goldfish, tuned; 1 cell(s) to run incl. this one, ETA 30 min "
                         "(mean 10.0 min per training run so far)")
    assert _progress(0, cells, cells, []) == "[privft compare] cell 1/3: LoRA r=16"
