"""The README's integration examples run as users run them, on the tiny model; the README shows them verbatim."""

from __future__ import annotations

import re
import runpy
import warnings
from pathlib import Path

import pytest

import privft.data
import privft.models
from privft.callbacks import PrivacyAuditCallback
from privft.models import EMBEDDED_MODELS, build_tiny_llama

ROOT = Path(__file__).parent.parent
EXAMPLES = ("trainer_integration", "sft_integration")
SETUP_BLOCK = "make demo   #"  # the README's one non-Python block: the two set-up commands, run by .ci/run


def test_every_readme_code_block_is_an_example_file_or_the_set_up():
    blocks = re.findall(r"```(\w*)\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    files = {path.read_text(encoding="utf-8") for path in (ROOT / "examples").glob("*.py")}
    python = [body for language, body in blocks if language == "python"]
    assert python and all(body in files for body in python)
    others = [body for language, body in blocks if language != "python"]
    assert len(others) == 1 and others[0].startswith(SETUP_BLOCK)
    targets = re.findall(r"^(\w+):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    assert [line.split()[:2] for line in others[0].splitlines()] == [["make", "demo"], ["make", "test"]]
    assert {"demo", "test"} <= set(targets)


@pytest.mark.parametrize("name", EXAMPLES)
def test_integration_example_runs_as_a_user_runs_it(name, tokenizer, local_texts, tmp_path, monkeypatch, capsys,
                                                    one_thread):
    """The file's `__main__` lines as written, with only the model and the corpus swapped for the tiny ones."""
    real_load_corpus = privft.data.load_corpus

    def tiny_corpus(corpus: str, **options: object) -> list[str]:
        real_load_corpus(corpus, limit=0, **options)  # the example's own call, checked against the real corpus
        return list(dict.fromkeys(local_texts))

    def tiny_model(model: str, **options: object) -> tuple:
        assert model in EMBEDDED_MODELS and not options
        return build_tiny_llama(tokenizer), tokenizer

    monkeypatch.setattr(privft.data, "load_corpus", tiny_corpus)
    monkeypatch.setattr(privft.models, "load_model", tiny_model)
    monkeypatch.chdir(tmp_path)  # the example writes under runs/
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = runpy.run_path(str(ROOT / "examples" / f"{name}.py"), run_name="__main__")["trainer"]
    callbacks = trainer.callback_handler.callbacks
    [audit] = [callback for callback in callbacks if isinstance(callback, PrivacyAuditCallback)]
    assert (audit.report.split["n_members"], audit.report.split["n_non_members"]) == (200, 200)
    assert audit.report.canary_exposure and trainer.state.global_step > 0
    selections = [entry for entry in trainer.state.log_history if "soft/n_selected" in entry]
    assert len(selections) == 2 and selections[-1]["soft/n_served_changed"] > 0  # after one warm-up epoch of 3
    assert "soft/n_served_failed_rewrites" in selections[-1]  # the example passes obfuscate's failed-filter flags
    output = Path(trainer.args.output_dir)
    assert audit.report.model == str(output)  # the fine-tune, named where it is written (the tiny base has no name)
    assert (output / "README.md").exists()
    assert (output / "privacy-audit" / "report.md").read_text() in capsys.readouterr().out  # what the example prints
