"""Extension points: a toy attack, paraphraser and selection rule, each one class or function in this file, run by
`privft train` from a YAML config that names them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from transformers import PreTrainedModel

from privft.attacks import ATTACKS, AttackInputs, register_attack
from privft.attacks.ensemble import ensemble_components
from privft.audit import AuditConfig, default_attacks, select_attacks
from privft.cli import main
from privft.defend.rules import RULES, Selection, SelectionRule
from privft.paraphrase import PARAPHRASERS, Paraphraser, register_paraphraser

MARK = "(rewritten by the toy paraphraser)"


@pytest.fixture(params=[True, False], ids=["paraphraser-on-a-model", "paraphraser-without-a-model"])
def toy_extensions(request):
    """Register the toy attack, paraphraser (with or without a model) and rule for one test; unregister them after."""
    models_seen: list[PreTrainedModel] = []

    @register_attack("toy_sum_ratio", needs=("reference",), default=True, ensemble_component=True,
                     description="reference minus target total NLL (a toy)")
    def toy_sum_ratio(inputs: AttackInputs) -> np.ndarray:
        """Members are easier for the target than for the reference over the whole text."""
        return np.array([r.nll_sum - s.nll_sum for s, r in zip(inputs.target, inputs.reference)])

    @register_paraphraser
    class ToyParaphraser(Paraphraser):
        """Appends a marker: a rewrite whose words differ from the original's."""

        name = "toy"
        needs_model = request.param

        def __init__(self, *model_and_tokenizer) -> None:  # given only when the registry was told it needs them
            models_seen.extend(model_and_tokenizer[:1])
            self.model_name = str(model_and_tokenizer[0].name_or_path) if model_and_tokenizer else None

        def rewrite(self, text: str, *, seed: int) -> str:
            return f"{text} {MARK}"

        def settings(self) -> dict:
            return {"model": self.model_name}

    class HigherHalf(SelectionRule):
        """Obfuscates the open samples whose loss is at least the median."""

        name = "toy-higher-half"

        def select(self, n_open, losses, validation_losses, selection_index):
            return Selection(losses >= np.median(losses))

    try:
        yield models_seen
    finally:
        del ATTACKS["toy_sum_ratio"], PARAPHRASERS["toy"], RULES["toy-higher-half"]


def test_the_registry_says_how_the_audit_uses_a_new_attack(toy_extensions):
    built_in = ("loss", "loss_bpb", "zlib", "lowercase", "min_k", "min_k_pp", "ref_ratio", "ref_ratio_bpb")
    assert default_attacks(set()) == (*built_in, "toy_sum_ratio")  # context attacks only with their context
    assert default_attacks({"prefixed"}) == (*built_in, "toy_sum_ratio", "recall")
    assert ensemble_components()[-4:] == ("toy_sum_ratio", "recall", "con_recall", "neighbourhood")
    chosen, notes = select_attacks(AuditConfig(), {"lowercase", "known_labels"}, same_tok=True)
    assert "toy_sum_ratio" not in chosen and "toy_sum_ratio skipped: needs reference statistics." in notes


def test_a_toy_attack_paraphraser_and_rule_run_from_a_yaml_config(toy_extensions, tiny_model, tokenizer,
                                                                   write_texts, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVFT_CACHE", str(tmp_path / "cache"))  # the toy's paraphrases stay out of the user's cache
    tiny_model.save_pretrained(tmp_path / "base")
    tokenizer.save_pretrained(tmp_path / "base")
    write_texts(tmp_path, 120, min_chars=150, max_chars=250)
    run = tmp_path / "run"
    (tmp_path / "run.yaml").write_text(f"""\
model: {tmp_path / "base"}
data: {{corpus: null, path: {tmp_path / "texts.json"}, max_words: null, n_members: 30, n_non_members: 30,
        n_validation: 10}}
training: {{epochs: 1, batch_size: 8, max_length: 128, output_dir: {run},
            lora: {{rank: 4, alpha: 8, targets: [q_proj, v_proj]}}}}
soft: {{rule: toy-higher-half, paraphraser: toy, paraphraser_options: {{}}}}
audit: {{n_bootstrap: 20}}
""")
    main(["train", str(tmp_path / "run.yaml")])

    assert "| toy_sum_ratio |" in capsys.readouterr().out  # a default, so the audit ran it unasked
    report = json.loads((run / "report.json").read_text())
    assert {"loss", "ref_ratio", "toy_sum_ratio"} <= set(report["attacks"])
    needs_model = PARAPHRASERS["toy"].needs_model
    assert len(toy_extensions) == needs_model and all(isinstance(m, PreTrainedModel) for m in toy_extensions)
    obfuscations = json.loads((run / "obfuscations.json").read_text())
    assert all(o["text"].endswith(MARK) and not o["fallback"] for o in obfuscations)
    selection, = json.loads((run / "soft_selections.json").read_text())
    assert selection["rule"] == "toy-higher-half" and selection["n_scored"] == 30
    assert selection["n_selected"] == 15  # the median splits 30 distinct losses in half
    used = f" ({tmp_path / 'base'})" if needs_model else ""  # the model is named only when one was loaded
    assert f"SOFT: toy-higher-half rule; toy paraphraser{used}; rewrite-only" in (run / "report.md").read_text()
