"""How fast is sequence-aware LiRA, and does its cost grow linearly with the number of examples?

Fits OAS shared-covariance LiRA on synthetic per-token losses (n_examples × 64 shadow models ×
64 positions, correlated across positions) and scores one target model, for several numbers
of examples. Everything per example is batched (one Cholesky call per block of 512 examples),
so time per example should stay flat. Target: 10,000 examples fit and scored in ≤ 30 s on
2 cores; the ratio of time per example at the largest and smallest N shows linearity (1.0 is
perfectly linear).

    python benchmarks/lira_fit.py --quick
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from privft.lira import LiRA

N_MODELS, N_POSITIONS = 64, 64


def synthetic_losses(n_examples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shadow losses (models, examples, positions), IN masks, and a target's losses; float32 like the farm's files."""
    rng = np.random.default_rng(seed)
    keep = rng.random((N_MODELS + 1, n_examples)).argsort(axis=0) < (N_MODELS + 1) // 2
    base = rng.gamma(2.0, 1.5, (n_examples, N_POSITIONS))
    level = rng.normal(0, 0.3, (N_MODELS + 1, n_examples, 1))  # a per-model, per-text loss level: correlation
    losses = base + level + rng.normal(0, 0.2, (N_MODELS + 1, n_examples, N_POSITIONS)) - 0.1 * keep[:, :, None]
    losses = losses.astype(np.float32)
    return losses[1:], keep[1:], losses[0]


def fit_and_score_seconds(n_examples: int, repeats: int) -> float:
    """Best wall time over `repeats` of LiRA(oas, shared).fit + score_samples."""
    losses, keep, target = synthetic_losses(n_examples)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        LiRA(estimator="oas", covariance="shared").fit(losses, keep).score_samples(target)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    """Time several sizes and print the headline last."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one repeat (under a minute)")
    args = parser.parse_args()
    sizes = (500, 1000, 2000) if args.quick else (1250, 2500, 5000, 10000)
    repeats = 1 if args.quick else 2
    seconds = {n: fit_and_score_seconds(n, repeats) for n in sizes}
    for n, s in seconds.items():
        print(f"{n:>6} examples × {N_MODELS} models × {N_POSITIONS} positions: {s:.2f} s "
              f"({s / n * 1e3:.3f} ms per example)")
    small, large = sizes[0], sizes[-1]
    ratio = (seconds[large] / large) / (seconds[small] / small)
    print(f"time per example at N={large:,} / at N={small:,}: {ratio:.2f} (linear: 1.0; target <= 1.5)")
    extrapolated = seconds[large] / large * 10_000
    label = "lira_oas_fit_seconds_10k" if large == 10_000 else "lira_oas_fit_seconds_10k_extrapolated"
    print(f"{label} {extrapolated:.2f} (target <= 30)")


if __name__ == "__main__":
    main()
