"""Print docs/epsilon-audit.md's validation table: both one-run bounds on simulated mechanisms of known ε.

    .venv/bin/python scripts/epsilon_audit_validation.py [--trials 100] [--canaries 1000]

Each row is a mechanism calibrated to a true ε at δ = 1e-5 by privft's accountant (PRV), audited
in `--trials` seeded one-run audits (privft.simulated_audit) with the pre-declared guess grid.
`--subsampling RATE STEPS` (repeatable) and `--targets` replace the default mechanisms, e.g. to
forecast what a DP-LoRA run's gradient canaries can show before it trains:

    .venv/bin/python scripts/epsilon_audit_validation.py --subsampling 0.0674 45 --targets 8 4 1 --trials 20
"""

import argparse

import numpy as np
from scipy.optimize import brentq

from privft.dp.accounting import calibrate, epsilon_spent
from privft.fdp_audit import gdp_epsilon
from privft.simulated_audit import SimulatedMechanism, simulated_audits

DELTA = 1e-5
TARGETS = (1.0, 2.0, 4.0, 8.0)
SUBSAMPLING = ((0.05, 200), (0.1, 10))  # (sample rate, steps): DP-SGD-like, and few steps (far from Gaussian)


def mechanisms(targets: tuple[float, ...] = TARGETS, subsampling: tuple[tuple[float, int], ...] = SUBSAMPLING,
               gaussian: bool = True) -> list[tuple[str, SimulatedMechanism]]:
    """The Gaussian mechanism (with `gaussian`) and the subsampled ones, each at every target ε."""
    rows = []
    for target in targets if gaussian else ():
        mu = brentq(lambda m, t: gdp_epsilon(m, DELTA) - t, 1e-6, 50.0, args=(target,))  # the Gaussian mechanism's ε
        rows.append(("Gaussian", SimulatedMechanism(1 / mu)))
    for rate, steps in subsampling:
        for target in targets:
            sigma = calibrate(target, DELTA, rate, steps).noise_multiplier
            rows.append((f"subsampled q = {rate:g}, T = {steps}", SimulatedMechanism(sigma, rate, steps)))
    return rows


def main() -> None:
    """Print the table as Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--subsampling", nargs=2, type=float, action="append", metavar=("RATE", "STEPS"),
                        help="a subsampled mechanism to audit instead of the defaults (then no Gaussian one)")
    parser.add_argument("--targets", nargs="+", type=float, default=list(TARGETS), help="the true ε of each mechanism")
    args = parser.parse_args()
    chosen = mechanisms(tuple(args.targets), tuple((rate, int(steps)) for rate, steps in args.subsampling),
                        gaussian=False) if args.subsampling else mechanisms(tuple(args.targets))
    print("| mechanism | σ | true ε (PRV) | Steinke ε_lb: mean (max) | f-DP ε_lb: mean (max) | recovered: Steinke, "
          "f-DP | runs above the true ε: Steinke, f-DP | f-DP ≥ Steinke |")
    print("|---|---|---|---|---|---|---|---|")
    ceilings = None
    for name, mechanism in chosen:
        truth = epsilon_spent(mechanism.history, DELTA, 8.0)
        audits = [simulated_audits(mechanism, args.canaries, DELTA, seed) for seed in range(args.trials)]
        steinke = np.array([a.epsilon_lower_bound for a, _ in audits])
        fdp = np.array([b.epsilon_lower_bound for _, b in audits])
        ceilings = audits[0][0].ceiling, audits[0][1].ceiling
        print(f"| {name} | {mechanism.noise_multiplier:.3g} | {truth:.2f} | {steinke.mean():.2f} ({steinke.max():.2f}) "
              f"| {fdp.mean():.2f} ({fdp.max():.2f}) | {steinke.mean() / truth:.0%}, {fdp.mean() / truth:.0%} "
              f"| {int((steinke > truth).sum())}, {int((fdp > truth).sum())} of {args.trials} "
              f"| {np.mean(fdp >= steinke):.0%} |")
    print(f"\nCeilings with {args.canaries:,} canaries and the grid of 4 (every guess right): Steinke "
          f"{ceilings[0]:.2f}, f-DP {ceilings[1]:.2f}.")


if __name__ == "__main__":
    main()
