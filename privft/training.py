"""Plain fine-tuning with the Hugging Face Trainer: full or LoRA, tokenized as the audit scores."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from datasets import Dataset
from peft import LoraConfig, PeftModel, get_peft_model
from torch.utils.data import Dataset as TorchDataset
from transformers import (
    DataCollatorForLanguageModeling,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    set_seed,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import sort_checkpoints

from privft.config import require
from privft.data.records import Record
from privft.heap import add_release_callback
from privft.progress import bars_draw
from privft.scoring import start_token
from privft.scoring.render import record_rendering, render_records

# The default targets: every Linear layer of the decoder (peft's "all-linear", whatever the architecture calls them),
# spelled as Llama, Gemma, Qwen and Mistral name theirs.
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
KEPT_CHECKPOINTS = 2  # the newest checkpoint and the one before it, in case a kill interrupts the newest's save


@dataclass
class LoraSettings:
    """LoRA adapter settings (peft); `targets` name the Linear modules that get adapters (default: all of them)."""

    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    targets: tuple[str, ...] = ALL_LINEAR

    def __post_init__(self) -> None:
        """Refuse values peft would refuse, or that would train nothing, before any file is written."""
        require(self.rank >= 1, "rank", self.rank, "must be at least 1.")
        require(self.alpha > 0, "alpha", self.alpha,
                "must be positive: the adapters' update is scaled by alpha / rank, so 0 trains nothing.")
        require(0 <= self.dropout < 1, "dropout", self.dropout, "must be in [0, 1).")
        require(len(self.targets) > 0, "targets", self.targets, "must name at least one Linear module, e.g. q_proj.")

    def to_peft(self) -> LoraConfig:
        """The equivalent peft LoraConfig for a causal LM; the default targets become peft's "all-linear"."""
        targets = "all-linear" if self.targets == ALL_LINEAR else list(self.targets)
        return LoraConfig(r=self.rank, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=targets, task_type="CAUSAL_LM")


@dataclass
class FinetuneSettings:
    """Training-loop settings passed to the Trainer."""

    epochs: int = 3
    learning_rate: float = 1e-3
    batch_size: int = 8
    max_length: int = 256
    seed: int = 0
    output_dir: str = "runs/finetune"
    lora: LoraSettings | None = field(default_factory=LoraSettings)  # None: full fine-tuning
    save_steps: int | None = None  # a checkpoint every N optimizer steps and at the end, so a rerun resumes; None: none

    def __post_init__(self) -> None:
        """Refuse a run that would train nothing, or that the Trainer would refuse only after files are written.

        With at least one epoch, a batch size of at least 1 and a non-empty training set, every run
        takes at least one optimizer step.
        """
        require(self.epochs >= 1, "epochs", self.epochs, "must be at least 1: a run that trains nothing gives an "
                "audit that reads as no leakage.")
        require(math.isfinite(self.learning_rate) and self.learning_rate > 0, "learning_rate", self.learning_rate,
                "must be a positive number: at 0 or below the run trains nothing (or ascends the loss).")
        require(self.batch_size >= 1, "batch_size", self.batch_size, "must be at least 1.")
        require(self.max_length >= 2, "max_length", self.max_length, "must be at least 2: the start token and one "
                "token of text.")
        require(0 <= self.seed < 2**32, "seed", self.seed, "must be in [0, 2**32), as numpy and torch seeds are.")
        require(bool(self.output_dir), "output_dir", self.output_dir, "must name a folder for the run.")
        require(self.save_steps is None or self.save_steps >= 1, "save_steps", self.save_steps,
                "must be at least 1 (optimizer steps between checkpoints), or null for no checkpoints.")


def tokenize_for_training(tokenizer: PreTrainedTokenizerBase, texts: Sequence[Record],
                          max_length: int | None) -> Dataset:
    """BOS-prefixed token ids, exactly as the audit scores them, truncated (with a warning) to `max_length` if given.

    Conversational records get trl's ids and a ``labels`` column that masks the untrained tokens
    (`privft.scoring.render`), cut at `max_length` if given, else at the rendering's own; each row
    keeps its record's own fields too, so `SFTTrainer` knows the dataset for conversational (its
    `assistant_only_loss` check) while it takes the ids and labels as they are.
    """
    if texts and not isinstance(texts[0], str):
        rendering = record_rendering() if max_length is None else replace(record_rendering(), max_length=max_length)
        rendered = render_records(texts, tokenizer, rendering)
        return Dataset.from_list([{**record, "input_ids": r.input_ids,
                                   "labels": [t if k else -100 for t, k in zip(r.input_ids, r.trained)]}
                                  for record, r in zip(texts, rendered)])
    start = start_token(tokenizer)
    encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    if max_length is None:
        return Dataset.from_dict({"input_ids": [[start, *ids] for ids in encoded]})
    truncated = sum(len(ids) + 1 > max_length for ids in encoded)
    if truncated:
        warnings.warn(f"{truncated} of {len(texts)} training texts exceed max_length={max_length} tokens and are "
                      "truncated; their tails are not trained on although the audit scores them.", stacklevel=2)
    return Dataset.from_dict({"input_ids": [[start, *ids][:max_length] for ids in encoded]})


def training_collator(tokenizer: PreTrainedTokenizerBase, dataset: Dataset) -> Callable[[list[dict]], dict]:
    """Padding for a batch: trl's collator where the dataset carries its own labels (records), else causal LM's."""
    if "labels" in dataset.column_names:
        from trl.trainer.sft_trainer import DataCollatorForLanguageModeling as LabelledCollator

        return LabelledCollator(pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                                else start_token(tokenizer))
    return DataCollatorForLanguageModeling(tokenizer, mlm=False)


def last_complete_checkpoint(output_dir: str | Path, required: Sequence[str] = ()) -> str | None:
    """The newest checkpoint in `output_dir` whose save finished, or None; `required` names files it must also hold.

    The Trainer writes its state (`trainer_state.json`) last, so a checkpoint whose state is missing
    or unreadable was interrupted mid-save (a kill) and is passed over.
    """
    if not Path(output_dir).is_dir():
        return None
    complete = [folder for folder in sort_checkpoints(str(output_dir))
                if _readable_json(Path(folder) / TRAINER_STATE_NAME)
                and all((Path(folder) / name).is_file() for name in required)]
    return complete[-1] if complete else None


def _readable_json(path: Path) -> bool:
    """Whether `path` holds a whole JSON document (a write cut short leaves a truncated one)."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return True


def build_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: TorchDataset,
    settings: FinetuneSettings | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    *,
    max_grad_norm: float = 1.0,
    eval_dataset: TorchDataset | None = None,
) -> Trainer:
    """A plain Trainer on a tokenized dataset, with LoRA adapters added unless `settings.lora` is None.

    `max_grad_norm` is the Trainer's batch-gradient clipping; DP-LoRA (`privft.dp.make_private`) needs 0.
    With `settings.save_steps`, the Trainer writes checkpoints (the last `KEPT_CHECKPOINTS` are kept) and
    rebuilds privft's callbacks from them on resume (`trainer.train(resume_from_checkpoint=...)`).
    With `eval_dataset`, it evaluates its loss after every epoch instead and checkpoints there, keeping every
    epoch's checkpoint (a tuning run, `privft.tune`).
    """
    settings = settings or FinetuneSettings()
    if settings.lora is not None:
        set_seed(settings.seed)  # the adapters' random init, like the data order, follows the run's seed
        model = get_peft_model(model, settings.lora.to_peft())
    saving = (dict(save_strategy="no") if settings.save_steps is None else
              dict(save_strategy="steps", save_steps=settings.save_steps, save_total_limit=KEPT_CHECKPOINTS))
    if eval_dataset is not None:  # logits are not kept: the loss is all a tuning run reads
        saving = dict(save_strategy="epoch", eval_strategy="epoch", prediction_loss_only=True,
                      per_device_eval_batch_size=settings.batch_size)
    args = TrainingArguments(
        output_dir=settings.output_dir,
        num_train_epochs=settings.epochs,
        learning_rate=settings.learning_rate,
        per_device_train_batch_size=settings.batch_size,
        seed=settings.seed,
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        **saving,
        restore_callback_states_from_checkpoint=True,  # SOFT's mask and history, the canary plan
        logging_strategy="epoch",
        lr_scheduler_type="constant",
        disable_tqdm=not bars_draw(),  # the Trainer's bars on a terminal; elsewhere its logs, printed
        max_grad_norm=max_grad_norm,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        data_collator=training_collator(tokenizer, train_dataset),
        callbacks=list(callbacks),
    )
    add_release_callback(trainer)
    return trainer


def finetune(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[Record],
    settings: FinetuneSettings | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    resume_from_checkpoint: str | None = None,
) -> PreTrainedModel | PeftModel:
    """Fine-tune on `texts` with the plain Trainer (LoRA unless `settings.lora` is None); returns the model.

    `resume_from_checkpoint` continues a killed run of the same settings and texts from that checkpoint.
    """
    settings = settings or FinetuneSettings()
    dataset = tokenize_for_training(tokenizer, texts, settings.max_length)
    trainer = build_trainer(model, tokenizer, dataset, settings, callbacks)
    trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    return trainer.model.eval()
