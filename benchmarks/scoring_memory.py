"""Peak memory of scoring one 32 × 512 batch at a 49,152-token vocabulary (SmolLM2's) and at 262,144 (Gemma 3's).

Each measurement runs in a fresh process and reports how far the resident-set high-water mark
rises above what the loaded model already uses (the mark is reset once the model is loaded, so a
higher transient while building the model cannot hide the scorer's peak; Linux only):
  privft: the scorer's decoder pass plus its tiled head (log p, μ, σ per token);
  naive:  model(...).logits followed by a full-vocabulary log-softmax, as most MIA scripts do
          (49,152 only: at 262,144 the batch's logits alone are 16 GiB, so it is not run).
The model is a small Llama with the vocabulary measured, so the head dominates as it does at 135M.
The peak depends on how the allocator's heap happens to fragment, which varies from process to
process, so privft is measured in several fresh processes and the worst rise is the headline.
Target: privft's peak stays under 2 GB at both vocabularies.

    python benchmarks/scoring_memory.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCABS, BATCH, LENGTH = (49_152, 262_144), 32, 512
NAIVE_VOCAB = 49_152  # the naive arm's vocabulary: its full logits at 262,144 would need 16 GiB
PRIVFT_PROCESSES = 8  # fresh processes measured for privft at each vocabulary (3 with --quick)


def _model(vocab: int) -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=LENGTH,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _status_mib(field: str) -> float:
    """One memory field of /proc/self/status (VmRSS: resident now; VmHWM: its high-water mark), in MiB."""
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


@torch.no_grad()
def _run(kind: str, vocab: int) -> dict[str, float]:
    """Score one batch the `kind` way in this process and return the rise in peak RSS (MiB)."""
    from privft.scoring.forward import _HeadWorkspace, _score_windows, _Window

    model = _model(vocab)
    ids = torch.randint(2, vocab, (BATCH, LENGTH))
    model(input_ids=ids[:1, :8])  # load kernels before taking the baseline
    Path("/proc/self/clear_refs").write_text("5")  # the high-water mark restarts from what is resident now
    before = _status_mib("VmRSS")
    if kind == "privft":
        _score_windows(model, [_Window(i, 0, ids[i].tolist(), 1) for i in range(BATCH)], pad_id=0,
                       distribution=True, workspace=_HeadWorkspace.for_model(model))
    else:
        logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), dim=-1)
        logp.gather(2, ids[:, 1:, None])
    return {"rise_mib": _status_mib("VmHWM") - before, "peak_mib": _status_mib("VmHWM")}


def _measure(kind: str, vocab: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--vocab", str(vocab)], capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise SystemExit(f"The {kind} measurement (vocabulary {vocab}) failed in its child process:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure privft at each vocabulary and the naive baseline in fresh processes; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the naive baseline (it allocates ~9 GB)")
    parser.add_argument("--child", choices=("privft", "naive"), help=argparse.SUPPRESS)
    parser.add_argument("--vocab", type=int, choices=VOCABS, default=VOCABS[0], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_run(args.child, args.vocab)))
        return
    worst = {}
    for vocab in VOCABS:
        runs = [_measure("privft", vocab) for _ in range(3 if args.quick else PRIVFT_PROCESSES)]
        worst[vocab] = max(runs, key=lambda run: run["rise_mib"])
        print(f"{BATCH} x {LENGTH} tokens, vocabulary {vocab}: privft rises at most {worst[vocab]['rise_mib']:.0f} MiB "
              f"(process peak {worst[vocab]['peak_mib']:.0f} MiB) over {len(runs)} processes; rises: "
              + ", ".join(f"{run['rise_mib']:.0f}" for run in runs), flush=True)
    if not args.quick:
        naive = _measure("naive", NAIVE_VOCAB)
        ratio = naive["rise_mib"] / worst[NAIVE_VOCAB]["rise_mib"]
        print(f"naive full-logits scoring, vocabulary {NAIVE_VOCAB}, rises {naive['rise_mib']:.0f} MiB (peak "
              f"{naive['peak_mib']:.0f} MiB); naive / privft = {ratio:.1f}")
    print(f"scoring_peak_gb {max(run['rise_mib'] for run in worst.values()) / 1024:.2f} (target < 2)")


if __name__ == "__main__":
    main()
