"""What does SOFT's per-epoch re-scoring cost in training time?

Trains the same LoRA model on the same texts for the same epochs, without SOFT and with the
selective-obfuscation callback under each loss source (paper rule: warm-up 1 epoch, then
τ = mean validation loss and a selection every epoch; cumulative, privft's default, so later
epochs read only the texts not yet obfuscated), paraphrases precomputed:
- ``eval``: the paper-faithful source, which re-scores the open training texts in eval mode;
- ``training``: the losses recorded from the previous epoch's training passes (no extra pass;
  only the validation texts are scored, in eval mode, to set τ). The members are split 90/10 into
training and validation texts, as the SOFT release splits them. Each configuration runs
`--repeats` times, interleaved; the best time of each is compared, and the time SOFT spends
inside its selections is reported beside it. The paraphrasing cost (neighbour paraphraser on
the same model) is measured separately, per 1,000 input tokens.
The last line is the training-pass source's overhead. Target: <= 5 % (the SOFT paper reports 15.73 %).

    python benchmarks/soft_overhead.py --quick
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from peft import get_peft_model
from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

from privft.callbacks import prepare_soft
from privft.data import load_corpus
from privft.defend import SoftSchedule
from privft.models import build_tiny_llama, train_bpe_tokenizer
from privft.paraphrase import NeighbourParaphraser, obfuscate
from privft.training import LoraSettings, tokenize_for_training

EPOCHS = 3


def train_seconds(tokenizer, train: list[str], obfuscated: list[str] | None, validation: list[str],
                  output_dir: str, loss_source: str = "eval") -> tuple[float, float, list[int], np.ndarray | None]:
    """Wall time of trainer.train() for a fresh LoRA model; with `obfuscated`, SOFT's selection time, texts
    scored in eval mode per selection, and the first selection's mask."""
    model = get_peft_model(build_tiny_llama(tokenizer, hidden_size=128, num_layers=3), LoraSettings().to_peft())
    args = TrainingArguments(output_dir, num_train_epochs=EPOCHS, per_device_train_batch_size=8, learning_rate=1e-3,
                             seed=0, use_cpu=True, report_to="none", save_strategy="no", logging_strategy="no",
                             disable_tqdm=True, lr_scheduler_type="constant")
    callbacks, selecting, history = [], [0.0], []
    if obfuscated is None:
        dataset = tokenize_for_training(tokenizer, train, 256)
    else:
        dataset, soft = prepare_soft(tokenizer, train, obfuscated, validation, max_length=256,
                                     schedule=SoftSchedule(rule="paper", loss_source=loss_source))
        select = soft._select

        def timed_select(*args, **kwargs):
            begin = time.perf_counter()
            result = select(*args, **kwargs)
            selecting[0] += time.perf_counter() - begin
            return result

        soft._select = timed_select
        callbacks.append(soft)
        history = soft.history
    trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=callbacks,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    first_mask = np.isin(np.arange(len(train)), history[0]["selected"]) if history else None
    return seconds, selecting[0], [record["n_scored_eval"] for record in history], first_mask


def main() -> None:
    """Measure and print the overhead; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer texts and repeats (under a minute)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--output-dir", default="/tmp/privft-soft-overhead")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one thread: steadier timings on a shared two-core machine
    repeats = args.repeats or (2 if args.quick else 3)
    n_members = 110 if args.quick else 220
    texts = [t for t in load_corpus("wiki") if len(t.split()) <= 60]
    tokenizer = train_bpe_tokenizer(texts[:2000], vocab_size=4096)
    members = texts[2000:2000 + n_members]
    n_train = n_members * 9 // 10
    train, validation = members[:n_train], members[n_train:]

    paraphraser = NeighbourParaphraser(build_tiny_llama(tokenizer, hidden_size=128, num_layers=3), tokenizer)
    start = time.perf_counter()
    obfuscated = [r.text for r in obfuscate(train, paraphraser)]
    paraphrase_seconds = time.perf_counter() - start
    n_tokens = sum(len(ids) for ids in tokenizer(train, add_special_tokens=False)["input_ids"])

    plain, soft = [], {"eval": [], "training": []}
    for _ in range(repeats):
        plain.append(train_seconds(tokenizer, train, None, validation, args.output_dir)[0])
        for source, runs in soft.items():
            runs.append(train_seconds(tokenizer, train, obfuscated, validation, args.output_dir, source))
    best = {source: min(runs, key=lambda run: run[0]) for source, runs in soft.items()}
    print(f"tiny llama LoRA, {n_train} training texts ({n_tokens} tokens) + {len(validation)} validation, "
          f"{EPOCHS} epochs, SOFT paper rule, best of {repeats}: plain {min(plain):.2f} s")
    for source, (seconds, selecting, n_eval, _) in best.items():
        print(f"  loss source {source!r}: {seconds:.2f} s, of which {selecting:.2f} s in its selections; training "
              f"texts scored in eval mode per selection {n_eval} (+ {len(validation)} validation each)")
    print(f"all runs: plain {[round(t, 2) for t in plain]}, "
          + ", ".join(f"{source} {[round(run[0], 2) for run in runs]}" for source, runs in soft.items()))
    eval_mask, training_mask = best["eval"][3], best["training"][3]
    jaccard = (eval_mask & training_mask).sum() / max(1, (eval_mask | training_mask).sum())
    print(f"first selection, eval vs training-pass losses: {int(eval_mask.sum())} vs {int(training_mask.sum())} "
          f"selected, Jaccard {jaccard:.2f}")
    print(f"paraphrase_seconds_per_1k_tokens {paraphrase_seconds / n_tokens * 1000:.3f} "
          "(neighbour paraphraser on the same tiny model; reported, no target)")
    print(f"soft_eval_overhead {best['eval'][0] / min(plain) - 1:.3f} (paper-faithful eval-mode source; no target)")
    print(f"soft_training_overhead {best['training'][0] / min(plain) - 1:.3f} (target <= 0.05)")


if __name__ == "__main__":
    main()
