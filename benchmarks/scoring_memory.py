"""Peak memory of scoring one 32 × 512 batch with a 49,152-token vocabulary (SmolLM2's).

Each measurement runs in a fresh process and reports how far the resident-set high-water mark
rises above what the loaded model already uses:
  privft: the scorer's decoder pass plus its chunked head (log p, μ, σ per token);
  naive:  model(...).logits followed by a full-vocabulary log-softmax, as most MIA scripts do.
The model is a small Llama with SmolLM2's vocabulary, so the head dominates as it does at 135M.
The peak depends on how the allocator's heap happens to fragment, which varies from process to
process, so privft is measured in several fresh processes and the worst rise is the headline.
Target: privft's peak stays under 2 GB.

    python benchmarks/scoring_memory.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB, BATCH, LENGTH = 49_152, 32, 512
PRIVFT_PROCESSES = 8  # fresh processes measured for privft (3 with --quick)


def _model() -> LlamaForCausalLM:
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=LENGTH,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@torch.no_grad()
def _run(kind: str) -> dict[str, float]:
    """Score one batch the `kind` way in this process and return the rise in peak RSS (MiB)."""
    from privft.scoring.forward import _HeadWorkspace, _score_windows, _Window

    model = _model()
    ids = torch.randint(2, VOCAB, (BATCH, LENGTH))
    model(input_ids=ids[:1, :8])  # load kernels before taking the baseline
    before = _peak_mib()
    if kind == "privft":
        _score_windows(model, [_Window(i, 0, ids[i].tolist(), 1) for i in range(BATCH)], pad_id=0,
                       distribution=True, workspace=_HeadWorkspace.for_model(model))
    else:
        logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), dim=-1)
        logp.gather(2, ids[:, 1:, None])
    return {"rise_mib": _peak_mib() - before, "peak_mib": _peak_mib()}


def _measure(kind: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", kind], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"The {kind} measurement failed in its child process:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure privft and the naive baseline in fresh processes; the last line is the headline."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the naive baseline (it allocates ~9 GB)")
    parser.add_argument("--child", choices=("privft", "naive"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_run(args.child)))
        return
    runs = [_measure("privft") for _ in range(3 if args.quick else PRIVFT_PROCESSES)]
    ours = max(runs, key=lambda run: run["rise_mib"])
    print(f"{BATCH} x {LENGTH} tokens, vocabulary {VOCAB}: privft rises at most {ours['rise_mib']:.0f} MiB "
          f"(process peak {ours['peak_mib']:.0f} MiB) over {len(runs)} processes; rises: "
          + ", ".join(f"{run['rise_mib']:.0f}" for run in runs))
    if not args.quick:
        naive = _measure("naive")
        print(f"naive full-logits scoring rises {naive['rise_mib']:.0f} MiB (peak {naive['peak_mib']:.0f} MiB); "
              f"naive / privft = {naive['rise_mib'] / ours['rise_mib']:.1f}")
    print(f"scoring_peak_gb {ours['rise_mib'] / 1024:.2f} (target < 2)")


if __name__ == "__main__":
    main()
