"""The same with trl's SFTTrainer: the SOFT view is a `datasets.Dataset`, and the trainer's own max_length applies.

    python examples/sft_integration.py   # LoRA r 16 on the embedded SmolLM2, 200 wiki texts
"""

from pathlib import Path

import torch
import transformers
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer

from privft.callbacks import CanaryCallback, PrivacyAuditCallback, prepare_soft
from privft.data import MembershipSplit, load_corpus
from privft.data.canaries import CanaryPlan
from privft.models import load_model
from privft.paraphrase import NeighbourParaphraser, obfuscate


def fine_tune(model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase, texts: list[str],
              output_dir: str = "runs/example-sft", n_members: int = 200, epochs: int = 3) -> SFTTrainer:
    """LoRA-fine-tune `model` with SFTTrainer on `n_members` of `texts`, with canaries and SOFT; return the trainer."""
    split = MembershipSplit.random(texts, n_members=n_members, n_non_members=n_members,
                                   n_validation=n_members // 4, seed=0)
    plan = CanaryPlan(n_canaries=4, copies=4)
    train_texts = plan.insert(split.members)
    paraphrases = obfuscate(train_texts, NeighbourParaphraser(model, tokenizer, fraction=1.0), mode="rewrite-only")
    view, soft = prepare_soft(tokenizer, train_texts, [p.text for p in paraphrases], split.validation,  # no cut
                              rewrite_failed=[p.failed_filter for p in paraphrases])
    canaries = CanaryCallback(plan, tokenizer)
    audit = PrivacyAuditCallback(split, tokenizer, canary_callback=canaries)

    args = SFTConfig(output_dir, max_length=160, num_train_epochs=epochs, learning_rate=1e-3,
                     per_device_train_batch_size=8, report_to="none", save_strategy="no",
                     bf16=torch.cuda.is_available())                  # trl's default bf16 needs an accelerator
    trainer = SFTTrainer(model=model, args=args, train_dataset=view, processing_class=tokenizer,
                         peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"),
                         callbacks=[soft, canaries, audit])
    trainer.train()
    return trainer


if __name__ == "__main__":
    texts = [text for text in load_corpus("wiki") if len(text.split()) <= 60]  # short enough to train on whole
    trainer = fine_tune(*load_model("smollm2-135m"), texts)
    print((Path(trainer.args.output_dir) / "privacy-audit" / "report.md").read_text())
