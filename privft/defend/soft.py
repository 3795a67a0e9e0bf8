"""Add SOFT to a training script: tokenize originals and obfuscations, and wire the view to the callback."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

from privft.callbacks.soft import SelectiveObfuscationCallback
from privft.data.loaders import check_texts
from privft.defend.view import ObfuscatedView
from privft.training import tokenize_for_training


def prepare_soft(
    tokenizer: PreTrainedTokenizerBase,
    train_texts: Sequence[str],
    obfuscated_texts: Sequence[str],
    validation_texts: Sequence[str] | None = None,
    *,
    rule: str = "paper",
    max_length: int = 256,
    select_ratio: float | None = None,
    warmup_epochs: int | None = None,
    cumulative: bool = True,
    batch_size: int = 8,
    score_max_length: int | None = None,
) -> tuple[ObfuscatedView, SelectiveObfuscationCallback]:
    """The training view and its SOFT callback; `obfuscated_texts[i]` replaces `train_texts[i]` when selected.

    Both versions are tokenized as `privft.training` does (BOS first, cut at `max_length`);
    `score_max_length` is the selection's scoring window (the callback's `max_length`; give the
    audit's, so both read the same losses); the other options are `SelectiveObfuscationCallback`'s.
    Typical use::

        view, soft = prepare_soft(tokenizer, train_texts, [r.text for r in obfuscations], validation_texts)
        trainer = Trainer(model, args, train_dataset=view, data_collator=collator,
                          processing_class=tokenizer, callbacks=[soft])
        trainer.train()

    With trl's SFTTrainer pass ``train_dataset=view.original`` and
    ``SFTConfig(dataset_kwargs={"skip_prepare_dataset": True}, ...)``, then set
    ``trainer.train_dataset = view`` before ``trainer.train()``.
    """
    train_texts = check_texts(train_texts, "train_texts")
    obfuscated_texts = check_texts(obfuscated_texts, "obfuscated_texts")
    if len(train_texts) != len(obfuscated_texts):
        raise ValueError(f"train_texts ({len(train_texts)}) and obfuscated_texts ({len(obfuscated_texts)}) must pair "
                         "up one to one, in the same order.")
    unchanged = sum(a == b for a, b in zip(train_texts, obfuscated_texts))
    if unchanged:
        warnings.warn(f"{unchanged} of {len(train_texts)} obfuscated texts equal their original; selecting them "
                      "protects nothing.", stacklevel=2)
    view = ObfuscatedView(tokenize_for_training(tokenizer, train_texts, max_length),
                          tokenize_for_training(tokenizer, obfuscated_texts, max_length), train_texts)
    callback = SelectiveObfuscationCallback(
        view, tokenizer, rule=rule, validation_texts=validation_texts, select_ratio=select_ratio,
        warmup_epochs=warmup_epochs, cumulative=cumulative, batch_size=batch_size, max_length=score_max_length)
    return view, callback
