"""How much does batching the LLM paraphraser save?

Rewrites the second half (the part SOFT rewrites) of wiki texts with `LLMParaphraser` twice on
one model, interleaved: one prompt at a time, then `--batch-size` prompts at a time. Rows are
sampled with their own seeded generators, so both passes should give the same rewrites; the
script counts how many do. Target, on SmolLM2-135M-Instruct: batched no slower than one at a time
(speedup ≥ 1.0). On CPU cores generation is compute-bound, so batching gains little there; the
gain is on accelerators.
`--model tiny` runs a tiny Llama with a chat template instead (seconds; its ratio checks the script).

    python benchmarks/paraphrase_batch.py --quick               # SmolLM2, 16 texts
    python benchmarks/paraphrase_batch.py                       # SmolLM2, 64 texts
    python benchmarks/paraphrase_batch.py --quick --model tiny
"""

from __future__ import annotations

import argparse
import time

import torch

from privft.data import load_corpus
from privft.models import build_tiny_llama, load_model, train_bpe_tokenizer
from privft.paraphrase import LLMParaphraser, split_prefix

TINY_CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def rewrite_seconds(paraphraser: LLMParaphraser, texts: list[str], batch_size: int) -> tuple[float, list[str]]:
    """Wall time and rewrites of `texts` (seed 0 each) at `batch_size` prompts per generate call."""
    paraphraser.batch_size = batch_size
    start = time.perf_counter()
    rewrites = paraphraser.rewrite_many(texts, seeds=[0] * len(texts))
    return time.perf_counter() - start, rewrites


def main() -> None:
    """Time both passes and print the speedup; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="16 texts (about 2 minutes on SmolLM2)")
    parser.add_argument("--model", default="smollm2-135m", help="'smollm2-135m' (the target's model) or 'tiny'")
    parser.add_argument("--batch-size", type=int, default=16, help="prompts per generate call when batched")
    args = parser.parse_args()
    texts = load_corpus("wiki", limit=3000)
    if args.model == "tiny":
        tokenizer = train_bpe_tokenizer(texts[:2000], vocab_size=4096)
        tokenizer.chat_template = TINY_CHAT_TEMPLATE
        torch.manual_seed(0)
        model = build_tiny_llama(tokenizer, hidden_size=128, num_layers=3, max_position_embeddings=1024)
    else:
        model, tokenizer = load_model(args.model)
    n_texts = 16 if args.quick else 64
    suffixes = [split_prefix(text, 0.5)[1] for text in texts[200:200 + n_texts]]
    paraphraser = LLMParaphraser(model, tokenizer, max_new_tokens=32 if args.model == "tiny" else None)
    one, one_rewrites = rewrite_seconds(paraphraser, suffixes, 1)
    batched, batched_rewrites = rewrite_seconds(paraphraser, suffixes, args.batch_size)
    same = sum(a == b for a, b in zip(one_rewrites, batched_rewrites))
    print(f"model {args.model}, {n_texts} texts: one at a time {one:.1f} s ({one / n_texts:.2f} s per text), "
          f"{args.batch_size} at a time {batched:.1f} s ({batched / n_texts:.2f} s per text); "
          f"same rewrite {same}/{n_texts}")
    print(f"llm_batch_speedup {one / batched:.2f} (target >= 1.0)")


if __name__ == "__main__":
    main()
