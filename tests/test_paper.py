"""The SOFT paper reproduction: published numbers as data, the context attacks, and `privft reproduce`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from privft.attacks import AttackInputs, get_attack
from privft.audit import AuditConfig, ensemble_known_labels, run_audit
from privft.audit_context import AuditContext, generate_neighbours, join_prefix
from privft.cli import main
from privft.data import MembershipSplit
from privft.paper.published import domain_analogues, load_published
from privft.paper.reproduce import PaperScale
from privft.paraphrase import NeighbourParaphraser, ParaphraseCache
from privft.scoring import ScoringError, score_texts

# Every aggregate the issue lists, by its name in experiments/paper/published.yaml.
ISSUE_AGGREGATES = {
    "ft_mean_auc": 0.819, "lora_mean_auc": 0.641, "soft_mean_auc": 0.540, "ft_ratio_min": 0.943,
    "ft_ratio_max": 0.955, "tpr1_full_ft": 0.360, "tpr1_soft": 0.029, "tpr1_pretrained": 0.014,
    "ppl_full_ft": 9.78, "ppl_soft": 10.49, "ppl_pretrained": 12.26, "dp_ppl_eps_0_01": 13.21,
    "dp_ppl_pretrained": 13.19, "dp_ppl_eps_100": 11.66, "dp_ppl_soft": 11.58, "dp_ensemble_auc_eps_100": 0.735,
    "dp_ensemble_auc_soft": 0.573, "overhead_soft": 0.1573, "overhead_dp_lora": 0.6703,
    "adaptive_auc_baseline": 0.568, "adaptive_auc_full_knowledge": 0.595, "adaptive_tpr1_baseline": 0.033,
    "adaptive_tpr1_full_knowledge": 0.149, "adaptive_auc_selection_only": 0.651,
}


def test_every_published_aggregate_recomputes_from_its_cells():
    published = load_published()
    checked = [a for a in published.aggregates.values() if a.recompute]
    assert len(checked) >= 14
    for aggregate in checked:
        assert abs(published.recomputed(aggregate) - aggregate.value) <= aggregate.tolerance + 1e-12, aggregate.name


def test_the_issues_aggregates_and_table1_cells_are_recorded_with_provenance():
    published = load_published()
    for name, value in ISSUE_AGGREGATES.items():
        assert published.value(name) == value and "seed 003 line" in published.aggregates[name].provenance
    for method in ("full_ft", "soft"):
        assert set(published.cells[method]) == set(published.datasets)
        assert all(len(v) == len(published.attacks) == 10 for v in published.cells[method].values())
    assert published.cell("full_ft", "GitHub", "Ratio") == 0.955 and published.cell("lora", "Wiki", "Loss") is None


def test_every_paper_dataset_has_a_local_analogue_or_says_why_not():
    analogues = domain_analogues()
    assert set(analogues) == set(load_published().datasets)
    assert analogues["Wiki"].corpus == "wiki" and analogues["GitHub"].corpus == "python-code"
    assert all(a.corpus or a.candidate for a in analogues.values())
    with pytest.raises(ValueError, match="No offline corpus stands in for HNews"):
        PaperScale(domains=("HNews",))


def test_a_prefix_conditions_the_text_but_only_the_texts_tokens_are_scored(tiny_model, tokenizer, local_texts):
    text, prefix = local_texts[3][:200], join_prefix([local_texts[7][:150]])
    plain, = score_texts(tiny_model, tokenizer, [text])
    conditioned, = score_texts(tiny_model, tokenizer, [text], prefix=prefix)
    assert conditioned.n_tokens == plain.n_tokens and conditioned.n_bytes == plain.n_bytes
    assert not np.allclose(conditioned.token_logprobs, plain.token_logprobs)
    text_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = [tokenizer.bos_token_id or tokenizer.eos_token_id, *tokenizer(prefix, add_special_tokens=False)["input_ids"],
           *text_ids]
    with torch.no_grad():
        logp = torch.log_softmax(tiny_model(torch.tensor([ids])).logits[0, :-1].float(), dim=-1)
    expected = logp.gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)[-len(text_ids):]
    np.testing.assert_allclose(conditioned.token_logprobs, expected.numpy(), atol=1e-4)


def test_every_window_of_a_long_text_reads_the_prefix(tiny_model, tokenizer, local_texts):
    text, prefix = " ".join(local_texts[:6]), join_prefix([local_texts[7][:150]])
    conditioned, = score_texts(tiny_model, tokenizer, [text], prefix=prefix, max_length=64)
    head = [tokenizer.bos_token_id, *tokenizer(prefix, add_special_tokens=False)["input_ids"]]
    text_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(head) + len(text_ids) > 2 * 64 and conditioned.n_tokens == len(text_ids)
    # The last token is read after the prefix and the text tokens that fit beside it in the last window.
    width = 64 - len(head)
    step = min(32, width // 2)
    begin = (len(text_ids) - width + step - 1) // step * step
    ids = [*head, *text_ids[begin:]]
    with torch.no_grad():
        logp = torch.log_softmax(tiny_model(torch.tensor([ids])).logits[0, -2].float(), dim=-1)
    assert conditioned.token_logprobs[-1] == pytest.approx(float(logp[ids[-1]]), abs=1e-4)


def test_a_prefix_that_fills_the_window_is_refused(tiny_model, tokenizer, local_texts):
    with pytest.raises(ScoringError, match="shorter prefix"):
        score_texts(tiny_model, tokenizer, [local_texts[0]], prefix=" ".join(local_texts[:30]), max_length=64)


@pytest.fixture(scope="module")
def paper_split(local_texts) -> MembershipSplit:
    texts = [t[:200] for t in local_texts if len(t) >= 150]
    return MembershipSplit.random(texts, n_members=20, n_non_members=20, seed=1, source="pydoc")


def test_con_recall_prefixes_must_come_from_outside_the_evaluation_set(tiny_model, tokenizer, paper_split):
    leaked = AuditContext(non_member_prefix=(paper_split.non_members[0],), member_prefix=("an outside text",))
    with pytest.raises(ValueError, match="non_member_prefix holds 1 text"):
        run_audit(tiny_model, tokenizer, paper_split, context=leaked, config=AuditConfig(attacks=("recall",)))
    leaked = AuditContext(non_member_prefix=("an outside text",), member_prefix=(paper_split.members[0],))
    with pytest.raises(ValueError, match="member_prefix holds 1 text"):
        run_audit(tiny_model, tokenizer, paper_split, context=leaked, config=AuditConfig(attacks=("con_recall",)))


def test_context_attacks_need_their_statistics(tiny_model, tokenizer, paper_split):
    with pytest.raises(ValueError, match="'recall' cannot run: needs prefixed statistics.*--prefix-non-members"):
        run_audit(tiny_model, tokenizer, paper_split, config=AuditConfig(attacks=("recall",)))
    with pytest.raises(ValueError, match="'neighbourhood' cannot run.*--neighbours N"):
        run_audit(tiny_model, tokenizer, paper_split, config=AuditConfig(attacks=("neighbourhood",)))


def test_cli_audit_runs_the_context_attacks_it_is_given(tiny_model, tokenizer, paper_split, local_texts, tmp_path,
                                                        capsys):
    tiny_model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    paper_split.save(tmp_path / "split.json")
    texts = set(paper_split.labels_and_texts()[0])
    outside = [t[:120] for t in local_texts if t not in texts]
    for name, shot in (("non_members.jsonl", outside[0]), ("members.jsonl", outside[1])):
        (tmp_path / name).write_text(json.dumps({"text": shot}) + "\n")
    model = str(tmp_path / "model")
    main(["audit", "--model", model, "--split", str(tmp_path / "split.json"), "--bootstrap", "50",
          "--prefix-non-members", str(tmp_path / "non_members.jsonl"),
          "--prefix-members", str(tmp_path / "members.jsonl"),
          "--neighbours", "1", "--neighbour-model", model, "--out", str(tmp_path / "out")])
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {"loss", "recall", "con_recall", "neighbourhood"} <= set(report["attacks"])  # no --attacks: all it can
    (tmp_path / "leak.jsonl").write_text(json.dumps({"text": paper_split.members[0]}) + "\n")
    with pytest.raises(SystemExit, match="non_member_prefix holds 1 text"):
        main(["audit", "--model", model, "--split", str(tmp_path / "split.json"),
              "--prefix-non-members", str(tmp_path / "leak.jsonl")])


def test_the_ensemble_never_scores_the_part_it_was_fitted_on(tiny_model, tokenizer, paper_split):
    texts, labels = paper_split.labels_and_texts()
    stats = score_texts(tiny_model, tokenizer, texts)
    lower = score_texts(tiny_model, tokenizer, [t.lower() for t in texts])
    known = ensemble_known_labels(labels, 0.3, seed=0)
    assert (known[known >= 0] == labels[known >= 0]).all() and np.bincount(known[known >= 0]).tolist() == [6, 6]
    scores = get_attack("ensemble")(AttackInputs(texts, stats, lowercase=lower, known_labels=known))
    assert np.isnan(scores[known >= 0]).all() and np.isfinite(scores[known < 0]).all()
    with pytest.raises(ValueError, match="at least 2 known members"):
        get_attack("ensemble")(AttackInputs(texts, stats, lowercase=lower, known_labels=np.full(len(texts), -1)))


def test_neighbours_are_cached_word_swaps_and_feed_the_neighbourhood_attack(tiny_model, tokenizer, paper_split,
                                                                           tmp_path):
    class Counting(NeighbourParaphraser):
        calls = 0

        def rewrite(self, text: str, *, seed: int) -> str:
            Counting.calls += 1
            return super().rewrite(text, seed=seed)

    texts, _ = paper_split.labels_and_texts()
    paraphraser, cache = Counting(tiny_model, tokenizer, fraction=0.2), ParaphraseCache(tmp_path)
    first = generate_neighbours(texts[:4], paraphraser, 2, cache=cache)
    calls = Counting.calls
    assert generate_neighbours(texts[:4], paraphraser, 2, cache=cache) == first and Counting.calls == calls
    assert all(len(hood) == 2 and text not in hood and hood[0] != hood[1] for text, hood in first.items())
    stats = score_texts(tiny_model, tokenizer, texts[:4])
    hoods = [score_texts(tiny_model, tokenizer, first[t]) for t in texts[:4]]
    scores = get_attack("neighbourhood")(AttackInputs(texts[:4], stats, neighbours=hoods))
    expected = [np.mean([n.mean_nll for n in hood]) - s.mean_nll for s, hood in zip(stats, hoods)]
    np.testing.assert_allclose(scores, expected)


def test_a_text_without_usable_neighbours_is_left_out_of_the_neighbourhood_attack_with_counts(
        tiny_model, tokenizer, paper_split, caplog):
    texts, _ = paper_split.labels_and_texts()

    class Stuck(NeighbourParaphraser):  # no word of the first member can be swapped: every rewrite falls back
        def rewrite(self, text: str, *, seed: int) -> str:
            return text if text == texts[0] else super().rewrite(text, seed=seed)

    with caplog.at_level("WARNING"):
        neighbours = generate_neighbours(texts, Stuck(tiny_model, tokenizer, fraction=0.2), 2)
    assert neighbours[texts[0]] == [] and "(1 have none" in caplog.text
    report = run_audit(tiny_model, tokenizer, paper_split, reference=tiny_model,
                       context=AuditContext(neighbours=neighbours),
                       config=AuditConfig(attacks=("loss", "neighbourhood", "ensemble"), n_bootstrap=50))
    assert np.isnan(report.scores["neighbourhood"][0]) and np.isnan(report.scores["ensemble"][0])
    assert report.attacks["neighbourhood"].auc.n_members == 19
    assert "neighbourhood is measured on 19 of 20 members and 20 of 20 non-members" in report.to_markdown()


def test_audit_runs_the_papers_attacks_with_a_context(tiny_model, tokenizer, paper_split, local_texts, tmp_path):
    outside = [t for t in local_texts if t not in set(paper_split.labels_and_texts()[0])]
    texts, _ = paper_split.labels_and_texts()
    paraphraser = NeighbourParaphraser(tiny_model, tokenizer, fraction=0.2)
    context = AuditContext((outside[0][:120],), (outside[1][:120],), generate_neighbours(texts, paraphraser, 2))
    attacks = ("loss", "recall", "con_recall", "neighbourhood", "ensemble")
    report = run_audit(tiny_model, tokenizer, paper_split, reference=tiny_model, context=context,
                       config=AuditConfig(attacks=(*attacks, "ref_ratio"), n_bootstrap=50))
    assert set(report.attacks) == {*attacks, "ref_ratio"}
    assert report.attacks["loss"].auc.n_members == 20
    assert report.attacks["ensemble"].auc.n_members == 14 and report.attacks["ensemble"].auc.n_non_members == 14
    assert report.save(tmp_path)["roc"].exists()  # the ROC plot skips the Ensemble's unscored fitting part


def test_dp_cells_train_dp_lora_at_the_table_5_budgets(tmp_path):
    from privft.paper.reproduce import DP_METHODS, SCALES, run_config

    for method, epsilon in DP_METHODS.items():
        config = run_config(SCALES["quick"], "Wiki", method, tmp_path)
        assert config.dp.target_epsilon == epsilon and config.training.lora is not None
        assert config.soft.rule is None
    assert run_config(SCALES["quick"], "Wiki", "lora", tmp_path).dp.target_epsilon is None


@pytest.mark.slow
def test_reproduce_table1_end_to_end_on_a_tiny_model(tiny_model, tokenizer, tmp_path, monkeypatch, capsys):
    from privft.paper import reproduce as module

    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    monkeypatch.setenv("PRIVFT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(module.SCALES, "quick", PaperScale(
        model=str(tmp_path / "base"), domains=("ArXiv",), n_members=12, n_non_members=24, n_validation=8,
        n_prefix_members=2, n_prefix_non_members=2, n_neighbours=2, epochs=2, n_bootstrap=50, max_words=40))
    main(["reproduce", "table1", "--out", str(tmp_path / "paper")])
    printed = capsys.readouterr().out
    assert "### Measured: attack AUC" in printed and "### Published (SOFT Table 1" in printed
    assert "| Ratio |" in printed and "ArXiv SOFT" in printed and "0.952" in printed  # published FT ArXiv Ratio
    cell = json.loads((tmp_path / "paper" / "quick" / "ArXiv" / "soft" / "cell.json").read_text())
    assert cell["train_seconds"] > 0 and "knows the selection strategy" in cell["adaptive"]
    mtime = (tmp_path / "paper" / "quick" / "ArXiv" / "soft" / "cell.json").stat().st_mtime
    main(["reproduce", "adaptive", "--out", str(tmp_path / "paper")])  # reuses the finished cells
    assert (tmp_path / "paper" / "quick" / "ArXiv" / "soft" / "cell.json").stat().st_mtime == mtime
    assert (tmp_path / "paper" / "quick" / "table1.png").read_bytes().startswith(b"\x89PNG")
    assert "knows paraphraser and selection" in capsys.readouterr().out
    main(["reproduce", "dp", "--out", str(tmp_path / "paper")])  # trains only the two DP-LoRA cells
    printed = capsys.readouterr().out
    assert "| DP-LoRA ε = 100 | 11.66 | 0.735 |" in printed and "### Measured: DP-LoRA against SOFT" in printed
    dp_cell = json.loads((tmp_path / "paper" / "quick" / "ArXiv" / "dp_eps_100" / "cell.json").read_text())
    assert dp_cell["privacy"]["epsilon"] <= 100 and dp_cell["privacy"]["privacy_unit"] == "one training sequence"
    assert (tmp_path / "paper" / "quick" / "ArXiv" / "soft" / "cell.json").stat().st_mtime == mtime


def test_scales_round_trip_through_yaml(tmp_path):
    from privft.config import load_yaml, save_yaml
    from privft.paper.reproduce import SCALES

    for name, scale in SCALES.items():
        assert load_yaml(PaperScale, save_yaml(scale, tmp_path / f"{name}.yaml")) == scale
    with pytest.raises(ValueError, match="recall_shots=5 must be between 1 and the prefix pools"):
        PaperScale(recall_shots=5)


def test_a_finished_cell_is_reused_only_with_the_settings_it_was_measured_with(tmp_path, caplog):
    """run_cells reads matching cells without loading a model, and refuses a mismatch before computing anything."""
    from dataclasses import asdict, replace

    from privft.paper.reproduce import METHODS, Cell, cell_path, cell_recipe, run_cells

    scale = PaperScale(domains=("Wiki",))
    saved_before_start_tokens = cell_recipe(scale)
    del saved_before_start_tokens["scale"]["start_token"]  # read as the rule cells were measured with before
    for method, recipe in zip(METHODS, [cell_recipe(scale), saved_before_start_tokens, None, cell_recipe(scale)]):
        path = cell_path(tmp_path, "Wiki", method)
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(asdict(Cell("Wiki", method, {"n_members": 1}, recipe=recipe))))
    assert [cell.method for cell in run_cells(scale, tmp_path)] == list(METHODS)
    assert "saved before cells recorded their settings" in caplog.text  # the cell without a recipe
    with pytest.raises(ValueError, match=r"Wiki/pretrained/cell.json was measured with other settings "
                                         r"\(scale.n_members, scale.start_token\); pass another --out"):
        run_cells(replace(scale, n_members=60, start_token="auto"), tmp_path)
