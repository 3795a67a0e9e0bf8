"""Does the one-pass audit cost about one forward pass per (text, model)?

Measures, in one run and on the same texts and batches:
  (a) bare batched forward passes (logits only) of target and reference;
  (b) the token-level attack suite: privft's scorer on target (log p, μ, σ) and reference (log p
      alone, as run_audit scores it), then every attack that reads those statistics
      (loss, loss_bpb, zlib, min_k, min_k_pp, ref_ratio, ref_ratio_bpb);
  (c) a naive audit that runs its own forward passes for each of those attacks (two for the
      reference ratios), as per-attack scripts do.
Targets, read on the real model (SmolLM2-135M, vocabulary 49,152): (b)/(a) <= 1.10 and
(c)/(b) >= 3. The large-vocabulary case, a randomly initialised decoder with Gemma 3 270M's
proportions (vocabulary 262,144, hidden 640, tied head; no weights to license), has the same
(b)/(a) target; its (c) is left out (its full-vocabulary passes would hold ~10 GB of logits).
The conversational case scores SmolLM2 on tickets-chat prompt–completion records rendered by
its chat template as trl renders them: (a) reads every token of each record, (b) scores the
completion tokens from the whole record (one pass per record, as a text), with the same
(b)/(a) target. The tiny 4k-vocabulary model's ratios are printed as informational. The lowercase attack scores
other text (the lowercased copy), so it adds its own pass in both designs and is left out of both.
The tiny model gets a context longer than every text, so all three designs read the same
sequences: with a shorter one the scorer must cut long texts into overlapping windows, which a
bare pass cannot do without reading positions the model was never built for. The CPU (model
name and vector extensions) is printed first: record it with every figure.

    python benchmarks/scoring.py --quick            # tiny Llama, a few SmolLM2 and large-vocabulary texts
    python benchmarks/scoring.py                     # more texts of each
    python benchmarks/scoring.py --quick --breakdown # and where the time goes, pass by pass
    python benchmarks/scoring.py --quick --models large-vocab  # one case alone
    python benchmarks/scoring.py --quick --models smollm2-chat  # the conversational case alone
    python benchmarks/scoring.py --quick --device cuda  # on a GPU (scripts/device_check.sh)
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from privft.attacks import AttackInputs, get_attack
from privft.clock import cpu_fields, cpu_model
from privft.data import load_corpus
from privft.data.records import Record
from privft.models import build_tiny_llama, load_model, train_bpe_tokenizer
from privft.scoring import DEFAULT_MAX_LENGTH, score_texts
from privft.scoring.render import render_records, scored_texts

SUITE = ("loss", "loss_bpb", "zlib", "min_k", "min_k_pp", "ref_ratio", "ref_ratio_bpb")
PASSES_PER_ATTACK = {name: 2 if name.startswith("ref_ratio") else 1 for name in SUITE}
BATCH_SIZE = 8
TINY_CONTEXT = 1024  # longer than every benchmark text (the longest wiki lead is under 400 tiny-BPE tokens)
MODELS = ("tiny", "smollm2", "smollm2-chat", "large-vocab")
LARGE_VOCAB = 262_144  # Gemma 3's
HEAD_REPEATS = 5  # turns for each of the breakdown's head-only timings (each a second or two)
VECTOR_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "amx_tile")


def cpu_description() -> str:
    """The CPU's model name and vector extensions (from /proc/cpuinfo where there is one), and torch's kernels."""
    flags = set(cpu_fields().get("flags", "").split())
    return (f"{cpu_model()}, {torch.get_num_threads()} threads; "
            f"vector extensions: {' '.join(f for f in VECTOR_FLAGS if f in flags) or 'unknown'}; "
            f"torch CPU kernels: {torch.backends.cpu.get_cpu_capability()}")


def build_large_vocab(seed: int) -> Gemma3ForCausalLM:
    """A randomly initialised Gemma 3 with 270M's proportions (262,144 vocabulary, hidden 640, 18 layers, tied head).

    Its final-logit softcapping is off, as in Gemma 3 270M's release, so the head is the plain linear layer.
    """
    config = Gemma3TextConfig(vocab_size=LARGE_VOCAB, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                              sliding_window=512, max_position_embeddings=32_768, tie_word_embeddings=True,
                              final_logit_softcapping=None)
    torch.manual_seed(seed)
    return Gemma3ForCausalLM(config).eval()


def _batches(tokenizer, texts: list[Record], device: torch.device | str,
             batch_size: int = BATCH_SIZE) -> list[dict[str, torch.Tensor]]:
    """Length-sorted, right-padded batches on `device` of every token the scorer reads (`render_records`)."""
    ids = sorted((rendered.input_ids for rendered in render_records(texts, tokenizer)), key=len, reverse=True)
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


def suite(target, reference, tokenizer, texts: list[Record]) -> None:
    """(b): privft's scorer once per model, then every attack on the cached statistics (of records: their scored
    tokens, decoded, are what zlib and bits per byte read, as in `run_audit`)."""
    scored = texts if isinstance(texts[0], str) else scored_texts(texts, tokenizer)
    attacks(AttackInputs(scored, target_pass(target, tokenizer, texts), reference_pass(reference, tokenizer, texts)))


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


@torch.no_grad()
def breakdown(target, reference, tokenizer, texts: list[str], batches, repeats: int) -> str:
    """Where the time goes: each pass of (a) and (b), and the target's decoder, head and statistics, timed alone.

    The scorer's head is timed on the rows it scores (the hidden states before each real token), three
    ways: its tiles' matrix products alone, with log p, and with log p, μ and σ; the differences are the
    passes over the vocabulary. The head's parts are short, so they get at least `HEAD_REPEATS` turns.
    """
    from privft.scoring.forward import _head_statistics, _HeadWorkspace, _logit_tiles

    inputs = AttackInputs(texts, target_pass(target, tokenizer, texts), reference_pass(reference, tokenizer, texts))
    decoder, head, workspace = target.get_decoder(), target.get_output_embeddings(), _HeadWorkspace.for_model(target)
    hidden = [decoder(**batch, use_cache=False).last_hidden_state for batch in batches]
    real = [batch["attention_mask"][:, 1:].bool() for batch in batches]  # positions whose token is real
    scored = [(states[:, :-1][mask], batch["input_ids"][:, 1:][mask])
              for states, batch, mask in zip(hidden, batches, real)]

    def tiles_alone() -> None:
        for rows, _ in scored:
            for start in range(0, rows.shape[0], workspace.block_rows):
                for _ in _logit_tiles(head, rows[start:start + workspace.block_rows], workspace):
                    pass

    passes = {
        "bare target": lambda: bare_forward(target, batches),
        "scorer target (log p, μ, σ)": lambda: target_pass(target, tokenizer, texts),
        "bare reference": lambda: bare_forward(reference, batches),
        "scorer reference (log p)": lambda: reference_pass(reference, tokenizer, texts),
        "attacks on the statistics": lambda: attacks(inputs),
        "tokenizing the texts once": lambda: tokenizer(texts, add_special_tokens=False),
        "target decoder": lambda: [decoder(**batch, use_cache=False) for batch in batches],
    }
    heads = {
        "bare head (every position)": lambda: [head(states) for states in hidden],
        "scorer head, matmuls alone": tiles_alone,
        "scorer head + log p": lambda: [_head_statistics(head, rows, ids, False, workspace) for rows, ids in scored],
        "scorer head + log p, μ, σ": lambda: [_head_statistics(head, rows, ids, True, workspace)
                                               for rows, ids in scored],
    }
    times = dict(zip(passes, _interleaved(list(passes.values()), repeats)))
    times |= dict(zip(heads, _interleaved(list(heads.values()), max(repeats, HEAD_REPEATS))))
    matmuls = times["scorer head, matmuls alone"]
    return "\n".join([
        " | ".join(f"{label} {seconds:.3f} s" for label, seconds in times.items()),
        f"passes over the vocabulary: log p {times['scorer head + log p'] - matmuls:.3f} s, "
        f"log p, μ, σ {times['scorer head + log p, μ, σ'] - matmuls:.3f} s "
        f"({sum(int(ids.numel()) for _, ids in scored)} scored rows × {head.weight.shape[0]:,} logits; the bare head "
        f"reads all {sum(int(batch['input_ids'].numel()) for batch in batches)} positions, padding included)",
    ])


def measure(name: str, target, reference, tokenizer, texts: list[Record], repeats: int,
            show_breakdown: bool = False, with_naive: bool = True) -> tuple[float, float | None]:
    """Print the timings for one model pair and return ((b)/(a), (c)/(b) or None when (c) is left out)."""
    batches = _batches(tokenizer, texts, target.device)
    longest = max(b["input_ids"].shape[1] for b in batches)
    window = min(target.config.max_position_embeddings, DEFAULT_MAX_LENGTH)  # the scorer's default window
    if longest > window:
        raise SystemExit(f"{name}: a text of {longest} tokens exceeds the scorer's {window}-token window; the bare "
                         "pass would read it unwindowed while the scorer windows it. Use shorter texts.")
    suite(target, reference, tokenizer, texts[:BATCH_SIZE])  # warm-up
    works = [lambda: (bare_forward(target, batches), bare_forward(reference, batches)),
             lambda: suite(target, reference, tokenizer, texts)]
    if with_naive:
        works.append(lambda: naive(target, reference, batches))
    bare, ours, *naive_seconds = _interleaved(works, repeats)
    speedup = naive_seconds[0] / ours if naive_seconds else None
    naive_part = (f"(c) naive {naive_seconds[0]:.2f} s | (b)/(a) {ours / bare:.3f} | (c)/(b) {speedup:.2f}"
                  if naive_seconds else f"(c) naive left out | (b)/(a) {ours / bare:.3f}")
    print(f"{name}: {len(texts)} {'texts' if isinstance(texts[0], str) else 'records'}, {batch_tokens(batches)} "
          f"tokens | (a) bare {bare:.2f} s | "
          f"(b) suite {ours:.2f} s | {naive_part}", flush=True)
    if show_breakdown:
        print(f"{name} breakdown: {breakdown(target, reference, tokenizer, texts, batches, repeats)}", flush=True)
    return ours / bare, speedup


def main() -> None:
    """Run the benchmark and print the ratios; the last line is the headline (SmolLM2's, when it runs)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few texts of each model (a few minutes)")
    parser.add_argument("--breakdown", action="store_true", help="also time each pass of (a) and (b) on its own")
    parser.add_argument("--device", default="cpu", help="where the models run: cpu (default) or cuda")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS), help="the cases to run")
    args = parser.parse_args()
    print(f"cpu: {cpu_description()}", flush=True)
    torch.manual_seed(0)
    texts = load_corpus("wiki", limit=2000)
    lines = []
    if "tiny" in args.models:
        tokenizer = train_bpe_tokenizer(texts, vocab_size=4096)
        tiny = dict(hidden_size=128, num_layers=3, max_position_embeddings=TINY_CONTEXT)
        overhead, speedup = measure("tiny llama", build_tiny_llama(tokenizer, **tiny, seed=0).to(args.device),
                                    build_tiny_llama(tokenizer, **tiny, seed=1).to(args.device), tokenizer,
                                    texts[:96 if args.quick else 512], repeats=5, show_breakdown=args.breakdown)
        lines += [f"tiny_suite_over_bare_forward {overhead:.3f} (informational: 4k vocabulary, no target)",
                  f"tiny_naive_over_suite {speedup:.2f} (informational)"]
    if "large-vocab" in args.models:
        _, smol_tokenizer = load_model("smollm2-135m")  # its ids are a subset of the 262,144 the head scores
        overhead, _ = measure("large vocabulary (random Gemma 3, 262,144)", build_large_vocab(0).to(args.device),
                              build_large_vocab(1).to(args.device), smol_tokenizer, texts[:8 if args.quick else 48],
                              repeats=2, show_breakdown=args.breakdown, with_naive=False)
        lines += [f"large-vocabulary model: random Gemma 3 270M-like, {LARGE_VOCAB:,} vocabulary, on {args.device}",
                  f"large_vocab_suite_over_bare_forward {overhead:.3f} (target <= 1.10)"]
    if {"smollm2", "smollm2-chat"} & set(args.models):
        target, smol_tokenizer = load_model("smollm2-135m", device=args.device)
        reference, _ = load_model("smollm2-135m", device=args.device)
    if "smollm2-chat" in args.models:  # the GGUF's own chat template; completion tokens scored (trl's default)
        records = load_corpus("tickets-chat", format="prompt_completion")[:16 if args.quick else 48]
        overhead, _ = measure("smollm2-135m on prompt–completion records", target, reference, smol_tokenizer,
                              records, repeats=2, with_naive=False)
        lines += [f"conversational case: smollm2-135m, {len(records)} tickets-chat prompt–completion records, "
                  "completion tokens scored", f"chat_suite_over_bare_forward {overhead:.3f} (target <= 1.10)"]
    if "smollm2" in args.models:
        overhead, speedup = measure("smollm2-135m", target, reference, smol_tokenizer,
                                    texts[:16 if args.quick else 48], repeats=2, show_breakdown=args.breakdown)
        lines += [f"headline model: smollm2-135m on {args.device}", f"naive_over_suite {speedup:.2f} (target >= 3)",
                  f"suite_over_bare_forward {overhead:.3f} (target <= 1.10)"]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
