"""privft added to a Hugging Face Trainer script: plant canaries, train on SOFT's local paraphrases, audit at the end.

    python examples/trainer_integration.py   # LoRA r 16 on the embedded SmolLM2, 200 wiki texts
"""

from pathlib import Path

import transformers
from peft import LoraConfig, get_peft_model
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

from privft.callbacks import CanaryCallback, PrivacyAuditCallback, prepare_soft
from privft.data import MembershipSplit, load_corpus
from privft.data.canaries import CanaryPlan
from privft.models import load_model
from privft.paraphrase import NeighbourParaphraser, obfuscate


def fine_tune(model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase, texts: list[str],
              output_dir: str = "runs/example-trainer", n_members: int = 200, epochs: int = 3) -> Trainer:
    """LoRA-fine-tune `model` on `n_members` of `texts` with canaries and SOFT; return the trained Trainer."""
    split = MembershipSplit.random(texts, n_members=n_members, n_non_members=n_members,
                                   n_validation=n_members // 4, seed=0)       # split before training
    plan = CanaryPlan(n_canaries=4, copies=4)                                 # "the access code is 401925", ...
    train_texts = plan.insert(split.members)
    paraphraser = NeighbourParaphraser(model, tokenizer, fraction=1.0)        # local word swaps: text stays here
    paraphrases = obfuscate(train_texts, paraphraser, mode="rewrite-only")    # the rewritten second half alone
    view, soft = prepare_soft(tokenizer, train_texts, [p.text for p in paraphrases], split.validation, max_length=160,
                              rewrite_failed=[p.failed_filter for p in paraphrases])  # a datasets.Dataset
    canaries = CanaryCallback(plan, tokenizer)
    audit = PrivacyAuditCallback(split, tokenizer, canary_callback=canaries)

    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"))
    args = TrainingArguments(output_dir, num_train_epochs=epochs, learning_rate=1e-3, per_device_train_batch_size=8,
                             report_to="none", save_strategy="no")
    trainer = Trainer(model=model, args=args, train_dataset=view, processing_class=tokenizer,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                      callbacks=[soft, canaries, audit])                      # canaries before the audit
    trainer.train()  # logs soft/* and privacy/*; writes privacy-audit/ and the model card's privacy section
    return trainer


if __name__ == "__main__":
    texts = [text for text in load_corpus("wiki") if len(text.split()) <= 60]  # short enough to train on whole
    trainer = fine_tune(*load_model("smollm2-135m"), texts)
    print((Path(trainer.args.output_dir) / "privacy-audit" / "report.md").read_text())
