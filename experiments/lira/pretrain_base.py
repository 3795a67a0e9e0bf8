"""The shared base model of the documented LiRA run: a tiny Llama pre-trained briefly on wiki texts outside the pool.

Every shadow fine-tunes from this one base, as shadows of a real fine-tune start from its public
base model. Its texts are disjoint from the farm's pool (candidates, canaries, population).

    python experiments/lira/pretrain_base.py runs/lira-farm runs/lira-base
"""

from __future__ import annotations

import argparse
import time

import torch

from privft.data import load_corpus
from privft.models import build_tiny_llama, train_bpe_tokenizer
from privft.shadows import ShadowPlan
from privft.training import FinetuneSettings, finetune

N_TEXTS = 4000  # 1 epoch over 4,000 summaries of <= 60 words: ~0.3M tokens, a few minutes on 2 cores


def main() -> None:
    """Train the tokenizer and the base model on texts outside the plan's pool, then save both."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("plan_dir", help="farm folder with plan.json (its texts are excluded)")
    parser.add_argument("out", help="where to save the base model and tokenizer")
    parser.add_argument("--texts", type=int, default=N_TEXTS)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(0)
    pool = set(ShadowPlan.load(args.plan_dir).texts)
    texts = [t for t in load_corpus("wiki") if len(t.split()) <= 60 and t not in pool][:args.texts]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=4096)
    model = build_tiny_llama(tokenizer, hidden_size=128, num_layers=3, max_position_embeddings=256)
    start = time.perf_counter()
    settings = FinetuneSettings(epochs=args.epochs, learning_rate=2e-3, batch_size=16, max_length=128,
                                output_dir=f"{args.out}-trainer", lora=None)
    model = finetune(model, tokenizer, texts, settings)
    print(f"pre-trained on {len(texts)} texts in {time.perf_counter() - start:.1f} s")
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)


if __name__ == "__main__":
    main()
