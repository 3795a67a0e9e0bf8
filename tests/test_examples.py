"""The README's integration examples run as users run them, on the tiny model; the README shows them verbatim."""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import pytest

from privft.callbacks import PrivacyAuditCallback
from privft.models import build_tiny_llama

ROOT = Path(__file__).parent.parent
EXAMPLES = ("trainer_integration", "sft_integration")
SETUP_BLOCK = "make demo   #"  # the README's one non-Python block: the two set-up commands, run by .ci/run


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
def test_integration_example_plants_selects_and_audits(name, tokenizer, local_texts, tmp_path, one_thread):
    texts = list(dict.fromkeys(local_texts))[:120]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = _example(name).fine_tune(build_tiny_llama(tokenizer), tokenizer, texts, output_dir=str(tmp_path),
                                           n_members=16, epochs=2)
    callbacks = trainer.callback_handler.callbacks
    [audit] = [callback for callback in callbacks if isinstance(callback, PrivacyAuditCallback)]
    assert (audit.report.split["n_members"], audit.report.split["n_non_members"]) == (16, 16)
    assert audit.report.canary_exposure and trainer.state.global_step > 0
    [selection] = [entry for entry in trainer.state.log_history if "soft/n_selected" in entry]
    assert selection["soft/n_served_changed"] > 0
    assert (tmp_path / "privacy-audit" / "report.json").exists() and (tmp_path / "README.md").exists()
