"""Does probabilistic extraction come free with the audit?

Times `run_audit` on one split twice, interleaved, best of `--repeats`: the default audit, and
the same audit with `AuditConfig.extraction` set to probabilistic extraction alone
(`ExtractionSettings(greedy=False)`: P(suffix | prefix) at prefixes of 32 and 50 tokens from the
target pass's own log-probs). Greedy decoding generates tokens and is extra work by design, so it
is left out. No cache: every run scores every pass. Target, on SmolLM2-135M:
audit with extraction / audit without ≤ 1.05. `--model tiny` runs a tiny Llama instead (seconds;
its ratio checks the script, not the target).

    python benchmarks/extraction_overhead.py --quick              # SmolLM2, 24 + 24 wiki texts
    python benchmarks/extraction_overhead.py                      # SmolLM2, 100 + 100
    python benchmarks/extraction_overhead.py --quick --model tiny
"""

from __future__ import annotations

import argparse
import time

import torch

from privft.audit import AuditConfig, run_audit
from privft.data import MembershipSplit, load_corpus
from privft.extraction import ExtractionSettings, run_extraction
from privft.models import build_tiny_llama, load_model, train_bpe_tokenizer
from privft.scoring import score_texts

MIN_TOKENS = 82  # the longest prefix (50) + the suffix (32): shorter texts would not be measured


def audit_seconds(model, tokenizer, split: MembershipSplit, extraction: ExtractionSettings | None) -> float:
    """Wall time of one uncached audit of `split`."""
    start = time.perf_counter()
    run_audit(model, tokenizer, split, config=AuditConfig(extraction=extraction))
    return time.perf_counter() - start


def main() -> None:
    """Time both audits and print the ratio; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="24 members and 24 non-members (a few minutes)")
    parser.add_argument("--model", default="smollm2-135m", help="'smollm2-135m' (the target's model) or 'tiny'")
    parser.add_argument("--repeats", type=int, default=None, help="timings of each audit (default 3)")
    args = parser.parse_args()
    torch.manual_seed(0)
    texts = load_corpus("wiki", limit=3000)
    if args.model == "tiny":
        tokenizer = train_bpe_tokenizer(texts[:2000], vocab_size=4096)
        model = build_tiny_llama(tokenizer, hidden_size=128, num_layers=3, max_position_embeddings=1024)
    else:
        model, tokenizer = load_model(args.model)
    lengths = tokenizer(texts, add_special_tokens=False)["input_ids"]
    usable = [text for text, ids in zip(texts, lengths) if len(ids) >= MIN_TOKENS]
    n = 24 if args.quick else 100
    split = MembershipSplit.random(usable, n_members=n, n_non_members=n, n_validation=0, seed=0, source="wiki")
    repeats = args.repeats or 3
    audit_seconds(model, tokenizer, split, None)  # warm-up: first calls allocate and compile
    plain, extracted = [], []
    for _ in range(repeats):
        plain.append(audit_seconds(model, tokenizer, split, None))
        extracted.append(audit_seconds(model, tokenizer, split, ExtractionSettings(greedy=False)))
    print(f"{args.model}: {n} members + {n} non-members (each ≥ {MIN_TOKENS} tokens), default attacks, best of "
          f"{repeats}: audit {min(plain):.2f} s, with probabilistic extraction {min(extracted):.2f} s "
          f"(all: {[round(t, 2) for t in plain]} vs {[round(t, 2) for t in extracted]})")
    audited, labels = split.labels_and_texts()
    target = score_texts(model, tokenizer, audited, desc="target")
    start = time.perf_counter()
    run_extraction(model, tokenizer, audited, labels, target, ExtractionSettings(greedy=False))
    print(f"probabilistic extraction alone, on the target pass's statistics: "
          f"{(time.perf_counter() - start) * 1000:.1f} ms (informational)")
    print(f"headline model: {args.model}")
    print(f"extraction_over_audit {min(extracted) / min(plain):.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
