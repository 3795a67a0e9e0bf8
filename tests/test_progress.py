"""privft's progress bars draw on a terminal and leave no carriage-return debris in a log or a pipe."""

from __future__ import annotations

import io
import sys

from transformers import modeling_gguf_pytorch_utils as gguf_loading
from transformers.utils import logging as hf_logging

from privft.progress import bars_draw, library_bars, progress_bar
from privft.scoring import score_texts
from privft.training import FinetuneSettings, build_trainer, tokenize_for_training


class Terminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        """Always: this stream stands for a terminal."""
        return True


def test_a_bar_writes_nothing_to_a_log_and_redraws_on_a_terminal():
    log, terminal = io.StringIO(), Terminal()
    for stream in (log, terminal):
        with progress_bar(total=50, desc="target", file=stream, leave=False) as bar:
            for _ in range(50):
                bar.update()
    assert log.getvalue() == "" and not bars_draw(log)
    assert "\r" in terminal.getvalue() and bars_draw(terminal)


def test_scoring_and_training_draw_no_bars_off_a_terminal(tiny_model, tokenizer, local_texts, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    score_texts(tiny_model, tokenizer, local_texts[:4], batch_size=2)
    trainer = build_trainer(tiny_model, tokenizer, tokenize_for_training(tokenizer, local_texts[:4], 256),
                            FinetuneSettings(output_dir=str(tmp_path), lora=None))
    assert sys.stderr.getvalue() == ""
    assert trainer.args.disable_tqdm  # the Trainer prints its logs instead


def test_library_bars_are_off_within_and_restored_after(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    converting, enabled = gguf_loading.tqdm, hf_logging.is_progress_bar_enabled()
    with library_bars():
        assert not hf_logging.is_progress_bar_enabled()
        assert gguf_loading.tqdm(range(3), file=sys.stderr).disable
    assert hf_logging.is_progress_bar_enabled() == enabled and gguf_loading.tqdm is converting
