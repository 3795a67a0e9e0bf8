"""Does the one-pass audit cost about one forward pass per (text, model)?

Measures, in one run and on the same texts and batches:
  (a) bare batched forward passes (logits only) of target and reference;
  (b) the token-level attack suite: privft's scorer on target (log p, μ, σ) and reference (log p
      alone, as run_audit scores it), then every attack that reads those statistics
      (loss, loss_bpb, zlib, min_k, min_k_pp, ref_ratio, ref_ratio_bpb);
  (c) a naive audit that runs its own forward passes for each of those attacks (two for the
      reference ratios), as per-attack scripts do.
Targets, read on the real model (SmolLM2-135M; the tiny 4k-vocabulary model's ratios are printed
above them as informational): (b)/(a) <= 1.10 and (c)/(b) >= 3. The lowercase attack scores other text (the
lowercased copy), so it adds its own pass in both designs and is left out of both. The tiny
model gets a context longer than every text, so all three designs read the same sequences:
with a shorter one the scorer must cut long texts into overlapping windows, which a bare
pass cannot do without reading positions the model was never built for.

    python benchmarks/scoring.py --quick            # tiny Llama, then a few SmolLM2 texts (a few minutes)
    python benchmarks/scoring.py                     # more texts of both
    python benchmarks/scoring.py --quick --breakdown # and where (b) - (a) goes, pass by pass
    python benchmarks/scoring.py --quick --device cuda  # on a GPU (scripts/device_check.sh)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from privft.attacks import AttackInputs, get_attack
from privft.data import load_corpus
from privft.models import build_tiny_llama, load_model, train_bpe_tokenizer
from privft.scoring import DEFAULT_MAX_LENGTH, score_texts

SUITE = ("loss", "loss_bpb", "zlib", "min_k", "min_k_pp", "ref_ratio", "ref_ratio_bpb")
PASSES_PER_ATTACK = {name: 2 if name.startswith("ref_ratio") else 1 for name in SUITE}
BATCH_SIZE = 8
TINY_CONTEXT = 1024  # longer than every benchmark text (the longest wiki lead is under 400 tiny-BPE tokens)


def _batches(tokenizer, texts: list[str], device: torch.device | str,
             batch_size: int = BATCH_SIZE) -> list[dict[str, torch.Tensor]]:
    """Length-sorted, right-padded BOS-prefixed batches on `device`, as the scorer builds them."""
    ids = [[tokenizer.bos_token_id, *x] for x in tokenizer(texts, add_special_tokens=False)["input_ids"]]
    ids.sort(key=len, reverse=True)
    batches = []
    for start in range(0, len(ids), batch_size):
        chunk = ids[start:start + batch_size]
        width = max(map(len, chunk))
        input_ids = torch.full((len(chunk), width), tokenizer.pad_token_id)
        mask = torch.zeros_like(input_ids)
        for row, seq in enumerate(chunk):
            input_ids[row, :len(seq)], mask[row, :len(seq)] = torch.tensor(seq), 1
        batches.append({"input_ids": input_ids.to(device), "attention_mask": mask.to(device)})
    return batches


def batch_tokens(batches: list[dict[str, torch.Tensor]]) -> int:
    """The real (unpadded) tokens in `batches`."""
    return sum(int(b["attention_mask"].sum()) for b in batches)


@torch.no_grad()
def bare_forward(model, batches) -> None:
    """(a): logits of every batch, nothing else."""
    for batch in batches:
        model(**batch, use_cache=False)


@torch.no_grad()
def naive_pass(model, batches, distribution: bool) -> None:
    """One forward pass as a per-attack script runs it: full-vocabulary log-softmax and gather, and μ, σ if asked."""
    for batch in batches:
        logp = torch.log_softmax(model(**batch, use_cache=False).logits[:, :-1].float(), dim=-1)
        logp.gather(2, batch["input_ids"][:, 1:, None])
        if distribution:  # Min-K%++ alone reads the model's own expectation and spread of log p
            weighted = logp.exp() * logp
            mean = weighted.sum(-1)
            (weighted * logp).sum(-1).sub_(mean.square()).clamp_min_(0).sqrt_()


def naive(target, reference, batches) -> None:
    """(c): every attack of the suite with its own forward passes (two for the reference ratios)."""
    for name in SUITE:
        for i in range(PASSES_PER_ATTACK[name]):
            naive_pass(target if i == 0 else reference, batches, distribution=name == "min_k_pp")


def target_pass(target, tokenizer, texts) -> list:
    """privft's scorer on the target: log p, μ and σ (Min-K%++ reads them)."""
    return score_texts(target, tokenizer, texts, batch_size=BATCH_SIZE, desc="target")


def reference_pass(reference, tokenizer, texts) -> list:
    """privft's scorer on the reference for its loss alone, as run_audit scores it."""
    return score_texts(reference, tokenizer, texts, batch_size=BATCH_SIZE, desc="reference", distribution=False)


def attacks(inputs: AttackInputs) -> None:
    """Every attack of the suite on statistics already scored."""
    for name in SUITE:
        get_attack(name)(inputs)


def suite(target, reference, tokenizer, texts) -> None:
    """(b): privft's scorer once per model, then every attack on the cached statistics."""
    attacks(AttackInputs(texts, target_pass(target, tokenizer, texts), reference_pass(reference, tokenizer, texts)))


def _once(work: Callable[[], None]) -> float:
    """Wall-clock seconds of one call, up to the end of any GPU work it queued."""
    start = time.perf_counter()
    work()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _interleaved(works: list[Callable[[], None]], repeats: int) -> list[float]:
    """Best of `repeats` timings of each work, run in turn, so a slow spell on a shared machine hits all of them."""
    times = [[_once(work) for work in works] for _ in range(repeats)]
    return [min(column) for column in zip(*times)]


def breakdown(target, reference, tokenizer, texts: list[str], batches, repeats: int) -> str:
    """Where (b) − (a) goes: each pass of (a) and (b) timed on its own (best of `repeats`, interleaved)."""
    inputs = AttackInputs(texts, target_pass(target, tokenizer, texts), reference_pass(reference, tokenizer, texts))
    parts = {
        "bare target": lambda: bare_forward(target, batches),
        "scorer target (log p, μ, σ)": lambda: target_pass(target, tokenizer, texts),
        "bare reference": lambda: bare_forward(reference, batches),
        "scorer reference (log p)": lambda: reference_pass(reference, tokenizer, texts),
        "attacks on the statistics": lambda: attacks(inputs),
        "tokenizing the texts once": lambda: tokenizer(texts, add_special_tokens=False),
    }
    times = _interleaved(list(parts.values()), repeats)
    return " | ".join(f"{label} {seconds:.3f} s" for label, seconds in zip(parts, times))


def measure(name: str, target, reference, tokenizer, texts: list[str], repeats: int,
            show_breakdown: bool = False) -> tuple[float, float]:
    """Print the three timings for one model pair and return ((b)/(a), (c)/(b))."""
    batches = _batches(tokenizer, texts, target.device)
    longest = max(b["input_ids"].shape[1] for b in batches)
    window = min(target.config.max_position_embeddings, DEFAULT_MAX_LENGTH)  # the scorer's default window
    if longest > window:
        raise SystemExit(f"{name}: a text of {longest} tokens exceeds the scorer's {window}-token window; the bare "
                         "pass would read it unwindowed while the scorer windows it. Use shorter texts.")
    suite(target, reference, tokenizer, texts[:BATCH_SIZE])  # warm-up
    bare, ours, naive_seconds = _interleaved(
        [lambda: (bare_forward(target, batches), bare_forward(reference, batches)),
         lambda: suite(target, reference, tokenizer, texts), lambda: naive(target, reference, batches)], repeats)
    tokens = batch_tokens(batches)
    print(f"{name}: {len(texts)} texts, {tokens} tokens | (a) bare {bare:.2f} s | (b) suite {ours:.2f} s | "
          f"(c) naive {naive_seconds:.2f} s | (b)/(a) {ours / bare:.3f} | (c)/(b) {naive_seconds / ours:.2f}")
    if show_breakdown:
        print(f"{name} breakdown: {breakdown(target, reference, tokenizer, texts, batches, repeats)}")
    return ours / bare, naive_seconds / ours


def main() -> None:
    """Run the benchmark and print the ratios; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few texts of each model (a few minutes)")
    parser.add_argument("--breakdown", action="store_true", help="also time each pass of (a) and (b) on its own")
    parser.add_argument("--device", default="cpu", help="where the models run: cpu (default) or cuda")
    args = parser.parse_args()
    torch.manual_seed(0)
    texts = load_corpus("wiki", limit=2000)
    tokenizer = train_bpe_tokenizer(texts, vocab_size=4096)
    n_tiny = 96 if args.quick else 512
    tiny = dict(hidden_size=128, num_layers=3, max_position_embeddings=TINY_CONTEXT)
    tiny_overhead, tiny_speedup = measure("tiny llama", build_tiny_llama(tokenizer, **tiny, seed=0).to(args.device),
                                          build_tiny_llama(tokenizer, **tiny, seed=1).to(args.device), tokenizer,
                                          texts[:n_tiny], repeats=5, show_breakdown=args.breakdown)
    target, smol_tokenizer = load_model("smollm2-135m", device=args.device)
    reference, _ = load_model("smollm2-135m", device=args.device)
    overhead, speedup = measure("smollm2-135m", target, reference, smol_tokenizer, texts[:16 if args.quick else 48],
                                repeats=2, show_breakdown=args.breakdown)
    print(f"tiny_suite_over_bare_forward {tiny_overhead:.3f} (informational: 4k vocabulary, no target)")
    print(f"tiny_naive_over_suite {tiny_speedup:.2f} (informational)")
    print(f"headline model: smollm2-135m on {args.device}")
    print(f"naive_over_suite {speedup:.2f} (target >= 3)")
    print(f"suite_over_bare_forward {overhead:.3f} (target <= 1.10)")


if __name__ == "__main__":
    main()
