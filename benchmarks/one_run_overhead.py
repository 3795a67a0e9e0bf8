"""Does the one-run ε audit cost only one forward pass per canary?

Times, interleaved, best of `--repeats`, on a LoRA model whose reference is the same model with its adapters
disabled (as `privft train` audits a LoRA run):
(a) bare forward passes (logits only) of the target and the reference over the 1,000 canaries' sequences, in the
    same length-sorted batches;
(b) `privft.callbacks.one_run.one_run_epsilon_audit`: both passes through privft's scorer, the secrets'
    log-likelihoods, and both analyses (Steinke et al.'s bound over 4 guess counts, the f-DP bound).
Target, on SmolLM2-135M: (b)/(a) ≤ 1.10. Training is not timed: the canaries add their own sequences (the
inserted half, one copy each) and nothing per step, and the script prints that share of the training tokens.
`--model tiny` runs a tiny Llama instead (seconds; its ratio checks the script, not the target).

    python benchmarks/one_run_overhead.py --quick                # SmolLM2, 200 canaries
    python benchmarks/one_run_overhead.py                        # SmolLM2, 1,000 canaries
    python benchmarks/one_run_overhead.py --quick --model tiny
"""

from __future__ import annotations

import argparse
import time

import torch
from peft import LoraConfig, get_peft_model

from privft.callbacks.one_run import one_run_epsilon_audit
from privft.data import load_corpus
from privft.data.canaries import CanaryPlan
from privft.models import build_tiny_llama, load_model, train_bpe_tokenizer
from privft.scoring.render import render_records

BATCH = 32  # one_run_epsilon_audit's default batch


def bare_passes(model, batches: list[dict[str, torch.Tensor]]) -> None:
    """The target's and the reference's (adapters disabled) forward passes, logits only."""
    with torch.inference_mode():
        for batch in batches:
            model(**batch, use_cache=False)
        with model.disable_adapter():
            for batch in batches:
                model(**batch, use_cache=False)


def canary_batches(tokenizer, plan: CanaryPlan) -> list[dict[str, torch.Tensor]]:
    """Every canary's rendered ids, length-sorted and padded into batches of BATCH, as the scorer batches them."""
    ids = sorted((r.input_ids for r in render_records([plan.record_for(s) for s in plan.secrets], tokenizer)),
                 key=len)
    batches = []
    for start in range(0, len(ids), BATCH):
        chunk = ids[start:start + BATCH]
        width = max(map(len, chunk))
        input_ids = torch.full((len(chunk), width), tokenizer.pad_token_id)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for row, seq in enumerate(chunk):
            input_ids[row, :len(seq)], mask[row, :len(seq)] = torch.tensor(seq), 1
        batches.append({"input_ids": input_ids, "attention_mask": mask})
    return batches


def seconds(work) -> float:
    """Wall time of one call of `work`."""
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    """Time both arms and print the ratio; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200 canaries (about a minute on SmolLM2)")
    parser.add_argument("--model", default="smollm2-135m", help="'smollm2-135m' (the target's model) or 'tiny'")
    parser.add_argument("--repeats", type=int, default=3, help="timings of each arm (default 3)")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.model == "tiny":
        tokenizer = train_bpe_tokenizer(load_corpus("wiki", limit=2000), vocab_size=4096)
        model = build_tiny_llama(tokenizer, hidden_size=128, num_layers=3, max_position_embeddings=1024)
    else:
        model, tokenizer = load_model(args.model)
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear")).eval()
    plan = CanaryPlan(n_canaries=200 if args.quick else 1000, copies=1, one_run=True, seed=0)
    batches = canary_batches(tokenizer, plan)
    audit = lambda: one_run_epsilon_audit(model, tokenizer, plan, [], batch_size=BATCH)  # noqa: E731
    bare = lambda: bare_passes(model, batches)  # noqa: E731
    audit(), bare()  # warm-up: first calls allocate
    timings = [(seconds(bare), seconds(audit)) for _ in range(args.repeats)]
    a, b = min(t[0] for t in timings), min(t[1] for t in timings)
    tokens = sum(int(batch["attention_mask"].sum()) for batch in batches)
    rendered = render_records([plan.record_for(secret) for secret in plan.secrets], tokenizer)
    inserted = [len(r.input_ids) for r, included in zip(rendered, plan.included()) if included]
    print(f"{args.model} + LoRA r 16: {plan.n_canaries} canaries ({tokens} tokens), batch {BATCH}, best of "
          f"{args.repeats}: (a) bare target + reference passes {a:.2f} s, (b) one-run audit {b:.2f} s "
          f"(all: {[(round(x, 2), round(y, 2)) for x, y in timings]})")
    print(f"training: the {len(inserted)} inserted canaries add {sum(inserted)} tokens to each epoch, "
          "one sequence each, and no work per step (informational)")
    print(f"headline model: {args.model}")
    print(f"one_run_audit_over_bare_forward {b / a:.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
