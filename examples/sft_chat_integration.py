"""privft in a trl SFTTrainer script on conversations: canary conversations, SOFT on the replies only, the audit.

    python examples/sft_chat_integration.py   # LoRA r 16 on the embedded SmolLM2-Instruct, 200 support conversations
"""

from pathlib import Path

import torch
import transformers
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer

from privft.callbacks import CanaryCallback, PrivacyAuditCallback, prepare_soft
from privft.chat_templates import SMOLLM2_TRAINING_CHAT_TEMPLATE
from privft.data import MembershipSplit, load_corpus
from privft.data.canaries import CanaryPlan, canary_format
from privft.models import load_model
from privft.paraphrase import NeighbourParaphraser, obfuscate
from privft.scoring.render import RecordRendering


def fine_tune(model: transformers.PreTrainedModel, tokenizer: transformers.PreTrainedTokenizerBase,
              records: list[dict], output_dir: str = "runs/example-chat", n_members: int = 200, epochs: int = 3,
              assistant_only_loss: bool = False) -> SFTTrainer:
    """LoRA-fine-tune `model` on `n_members` conversations with canaries, SOFT and the audit; return the trainer."""
    split = MembershipSplit.random(records, n_members=n_members, n_non_members=n_members,
                                   n_validation=n_members // 4, seed=0)       # records, split by their content
    args = SFTConfig(output_dir, max_length=512, assistant_only_loss=assistant_only_loss, num_train_epochs=epochs,
                     learning_rate=1e-3, per_device_train_batch_size=8, report_to="none", save_strategy="no",
                     bf16=torch.cuda.is_available())                  # trl's default bf16 needs an accelerator
    plan = CanaryPlan(n_canaries=4, copies=4, format=canary_format(split.members))  # the secret in the reply
    train = plan.insert(split.members)
    paraphraser = NeighbourParaphraser(model, tokenizer, fraction=1.0)        # local word swaps: text stays here
    paraphrases = obfuscate(train, paraphraser, mode="rewrite-only")          # replies only, never the question
    view, soft = prepare_soft(tokenizer, train, [p.text for p in paraphrases], split.validation,
                              rendering=RecordRendering.from_args(args))      # trl's own ids and loss mask
    canaries = CanaryCallback(plan, tokenizer)        # exposure: the secret ranked given the canary's prompt
    audit = PrivacyAuditCallback(split, tokenizer, canary_callback=canaries)  # the trained tokens, read off args

    trainer = SFTTrainer(model=model, args=args, train_dataset=view, processing_class=tokenizer,
                         peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"),
                         callbacks=[soft, canaries, audit])
    trainer.train()  # logs soft/* and privacy/*; writes privacy-audit/ and the model card's privacy section
    return trainer


if __name__ == "__main__":
    pairs = load_corpus("tickets-chat", format="prompt_completion")  # the loss on the agent's reply (trl's default)
    trainer = fine_tune(*load_model("smollm2-135m"), pairs)
    print((Path(trainer.args.output_dir) / "privacy-audit" / "report.md").read_text())

    model, tokenizer = load_model("smollm2-135m")
    tokenizer.chat_template = SMOLLM2_TRAINING_CHAT_TEMPLATE  # SmolLM2's template, its assistant turns marked
    conversations = load_corpus("tickets-chat")  # {"messages": [user, assistant]}: the loss on assistant turns
    trainer = fine_tune(model, tokenizer, conversations, "runs/example-chat-messages", assistant_only_loss=True)
    print((Path(trainer.args.output_dir) / "privacy-audit" / "report.md").read_text())
