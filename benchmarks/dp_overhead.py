"""What does DP-LoRA cost per training step, against plain LoRA at the same logical batch?

(a) The shipped path: a Trainer step of plain LoRA (fixed batches of L) against the same
    Trainer after `privft.dp.make_private` (Poisson batches of expected size L, per-sample
    gradients from opacus hooks, clipping, noise). Step times come from the Trainer's
    on_step_begin/on_step_end events (calibration and ε logging excluded), mean over steps.
(b) One logical batch of exactly L in a bare loop, with opacus primitives: no DP, per-sample
    hooks, and ghost clipping (two backward passes, no per-sample gradients stored); reported
    to show whether ghost clipping would pay off for LoRA. No target.
Each configuration runs in a fresh process, so each peak RSS is its own. Target for (a): DP step
time / plain step time ≤ 1.3, on the tiny model and on SmolLM2-135M (`--model smollm2-135m`:
logical batch 16 of wiki texts, physical chunks of 8; the SOFT paper reports 1.67 for DP-LoRA).
(c) The same DP-LoRA Trainer with 1,000 white-box gradient canaries (`dp.gradient_canaries`, issue 32): each
    step adds the sampled canaries' Dirac gradients to the clipped sum and gathers 1,000 noised coordinates.
    Target: its step time / DP-LoRA's ≤ 1.05.

    python benchmarks/dp_overhead.py --quick
    python benchmarks/dp_overhead.py --model smollm2-135m --steps 3
    python benchmarks/dp_overhead.py --quick --device cuda   # on a GPU (scripts/device_check.sh)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from peft import get_peft_model
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

LOGICAL_BATCH, MAX_LENGTH, N_TEXTS = 32, 128, 512
GRADIENT_CANARIES = 1000  # the one-run audit's default count (issue 32), Dirac canaries on the LoRA parameters


class StepTimer(TrainerCallback):
    """Wall time of each Trainer step, from on_step_begin to on_step_end."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def on_step_begin(self, *args, **kwargs) -> None:
        self._start = time.perf_counter()

    def on_step_end(self, *args, **kwargs) -> None:
        _synchronize()
        self.seconds.append(time.perf_counter() - self._start)


def _synchronize() -> None:
    """Wait for the GPU work queued so far, so a step's time includes it."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


SMOLLM2_BATCH, SMOLLM2_CHUNK = 16, 8  # SmolLM2: a smaller logical batch keeps a step to seconds on 2 CPU cores


def _setup(model_name: str):
    from privft.data import load_corpus
    from privft.models import build_tiny_llama, load_model, train_bpe_tokenizer
    from privft.training import LoraSettings, tokenize_for_training

    texts = [t for t in load_corpus("wiki") if len(t.split()) <= 80]
    if model_name == "tiny":
        tokenizer = train_bpe_tokenizer(texts[:2000], vocab_size=4096)
        base = build_tiny_llama(tokenizer, hidden_size=128, num_layers=3, max_position_embeddings=256)
    else:
        base, tokenizer = load_model(model_name)
    model = get_peft_model(base, LoraSettings().to_peft())
    return tokenizer, model, tokenize_for_training(tokenizer, texts[2000:2000 + N_TEXTS], MAX_LENGTH)


def _batch_sizes(model_name: str) -> tuple[int, int | None]:
    """Logical batch and DP's physical chunk (None: the whole batch) for `model_name`."""
    return (LOGICAL_BATCH, None) if model_name == "tiny" else (SMOLLM2_BATCH, SMOLLM2_CHUNK)


def _trainer_steps(kind: str, steps: int, model_name: str, device: str) -> dict[str, float]:
    """Mean Trainer step time of plain LoRA or DP-LoRA (hooks) in this process, on `device`."""
    from privft.dp import make_private

    tokenizer, model, dataset = _setup(model_name)
    batch, chunk = _batch_sizes(model_name)
    timer = StepTimer()
    args = TrainingArguments("/tmp/privft-dp-overhead", max_steps=steps + 1, per_device_train_batch_size=batch,
                             learning_rate=1e-3, use_cpu=device == "cpu", report_to="none", save_strategy="no",
                             logging_strategy="no", disable_tqdm=True, seed=0, max_grad_norm=0.0)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[timer],
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    if kind in ("dp-hooks", "dp-canaries"):
        canaries = GRADIENT_CANARIES if kind == "dp-canaries" else 0
        make_private(trainer, target_epsilon=8.0, physical_batch_size=chunk, gradient_canaries=canaries)
    trainer.train()
    seconds = timer.seconds[1:]  # the first step warms up allocators and kernels
    return {"step_seconds": sum(seconds) / len(seconds)}


def _loop_steps(kind: str, steps: int, model_name: str, device: str) -> dict[str, float]:
    """Mean time of one exact logical batch (forward, backward, clip, noise, step) in a bare loop, on `device`."""
    from opacus.grad_sample import prepare_module
    from opacus.optimizers import DPOptimizer, DPOptimizerFastGradientClipping
    from opacus.utils.fast_gradient_clipping_utils import DPLossFastGradientClipping

    from privft.dp import sequence_losses

    tokenizer, model, dataset = _setup(model_name)
    model.to(device)
    collate = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    batches = [{k: v.to(device) for k, v in collate([dataset[i] for i in range(s * LOGICAL_BATCH,
                                                                                (s + 1) * LOGICAL_BATCH)]).items()}
               for s in range(steps + 1)]
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model.train()
    dp = dict(noise_multiplier=0.6, max_grad_norm=1.0, expected_batch_size=LOGICAL_BATCH, loss_reduction="mean")
    if kind == "dp-hooks":
        prepare_module(model, grad_sample_mode="hooks", wrap_model=False, loss_reduction="mean")
        optimizer = DPOptimizer(optimizer, **dp)
    elif kind == "dp-ghost":
        hooks = prepare_module(model, grad_sample_mode="ghost", wrap_model=False, loss_reduction="mean",
                               max_grad_norm=1.0)
        optimizer = DPOptimizerFastGradientClipping(optimizer, **dp)
        criterion = DPLossFastGradientClipping(hooks, optimizer, torch.nn.CrossEntropyLoss(ignore_index=-100))
    seconds = []
    for batch in batches:
        start = time.perf_counter()
        if kind == "dp-ghost":  # per-sequence mean over non-ignored tokens, as sequence_losses
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
            loss = criterion(logits.reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1),
                             shape=logits.shape[:2])
        else:
            loss = sequence_losses(model, batch).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _synchronize()
        seconds.append(time.perf_counter() - start)
    return {"step_seconds": sum(seconds[1:]) / steps}


def _child(kind: str, steps: int, model_name: str, device: str) -> dict[str, float]:
    torch.set_num_threads(1)  # one thread: steadier timings on a shared two-core machine
    torch.manual_seed(0)
    path, mode = kind.split(":")
    result = (_trainer_steps if path == "trainer" else _loop_steps)(mode, steps, model_name, device)
    return {**result, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _measure(kind: str, steps: int, model_name: str, device: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--steps", str(steps), "--model", model_name,
                          "--device", device], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure every configuration in a fresh process; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer steps (under a minute)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--model", default="tiny", help="'tiny' (default) or a privft model name, e.g. smollm2-135m")
    parser.add_argument("--device", default="cpu", help="where the steps run: cpu (default) or cuda")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    steps = args.steps or (4 if args.quick else 12)
    if args.child:
        print(json.dumps(_child(args.child, steps, args.model, args.device)))
        return
    loops = not args.quick and args.model == "tiny"  # the bare loops' logical batch is the tiny model's
    kinds = ["trainer:plain", "trainer:dp-hooks", "trainer:dp-canaries"] + (
        ["loop:plain", "loop:dp-hooks", "loop:dp-ghost"] if loops else [])
    results = {kind: _measure(kind, steps, args.model, args.device) for kind in kinds}
    name = "tiny llama (hidden 128, 3 layers, vocab 4,096)" if args.model == "tiny" else args.model
    batch, chunk = _batch_sizes(args.model)
    print(f"{name} + LoRA r 16 on all linear layers, logical batch {batch} (DP chunks: {chunk or batch}), "
          f"texts ≤ {MAX_LENGTH} tokens, mean of {steps} steps after one warm-up, one thread, on {args.device}:")
    for kind, result in results.items():
        print(f"  {kind:20s} {result['step_seconds'] * 1000:8.1f} ms/step   peak RSS {result['peak_rss_mib']:.0f} MiB")
    for path in ("loop",):
        if f"{path}:plain" in results:
            plain = results[f"{path}:plain"]["step_seconds"]
            print(f"  bare loop: hooks / plain {results[f'{path}:dp-hooks']['step_seconds'] / plain:.2f}, "
                  f"ghost / plain {results[f'{path}:dp-ghost']['step_seconds'] / plain:.2f} (reported, no target)")
    canaries = results["trainer:dp-canaries"]["step_seconds"] / results["trainer:dp-hooks"]["step_seconds"]
    print(f"gradient_canary_step_ratio {canaries:.3f} (DP-LoRA with {GRADIENT_CANARIES} gradient canaries over "
          "without; target <= 1.05)")
    ratio = results["trainer:dp-hooks"]["step_seconds"] / results["trainer:plain"]["step_seconds"]
    print(f"model: {args.model}")
    print(f"dp_lora_step_time_ratio {ratio:.3f} (target <= 1.3)")


if __name__ == "__main__":
    main()
