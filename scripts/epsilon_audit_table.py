"""Print docs/epsilon-audit.md's tables: the one-run ε lower bounds (Steinke; f-DP) against the number of canaries.

    .venv/bin/python scripts/epsilon_audit_table.py
"""

from privft import epsilon_lower_bound
from privft.epsilon_audit import DEFAULT_GUESS_FRACTIONS
from privft.fdp_audit import fdp_epsilon_lower_bound, mu_lower_bound

DELTA = 1e-5
GRID_CONFIDENCE = 1 - 0.05 / len(DEFAULT_GUESS_FRACTIONS)  # the audit callback's default: 4 guess counts, Bonferroni


def fewest_canaries(target: float) -> int:
    """The fewest canaries, every one guessed and right, whose bound reaches `target` (δ = DELTA, 95 %)."""
    high = 2
    while epsilon_lower_bound(high, high, high, DELTA) < target:
        high *= 2
    low = high // 2
    while low < high:  # the bound grows with the count: bisect for the first one that reaches the target
        mid = (low + high) // 2
        low, high = (low, mid) if epsilon_lower_bound(mid, mid, mid, DELTA) >= target else (mid + 1, high)
    return high


def main() -> None:
    """Print both tables as Markdown."""
    print("| canaries m, all guessed | all right, δ = 0 | all right | all right, grid of 4 | 90 % right | 75 % right |")
    print("|---|---|---|---|---|---|")
    for m in (10, 50, 100, 300, 1000, 3000, 10000, 100000):
        cells = [epsilon_lower_bound(m, m, m, 0.0), epsilon_lower_bound(m, m, m, DELTA),
                 epsilon_lower_bound(m, m, m, DELTA, GRID_CONFIDENCE),
                 epsilon_lower_bound(m, m, round(0.9 * m), DELTA), epsilon_lower_bound(m, m, round(0.75 * m), DELTA)]
        print(f"| {m:,} | " + " | ".join(f"{cell:.2f}" for cell in cells) + " |")
    print()
    print("| target ε lower bound | fewest canaries, every one guessed and right |")
    print("|---|---|")
    for target in (0.5, 1, 2, 3, 4, 5, 6, 7):
        print(f"| {target:g} | {fewest_canaries(target):,} |")
    print()
    print("| canaries m, all guessed, all right | Steinke ε | f-DP μ | f-DP ε | grid of 4: Steinke, f-DP ε |")
    print("|---|---|---|---|---|")
    for m in (10, 50, 100, 300, 1000, 3000, 10000):
        cells = [epsilon_lower_bound(m, m, m, DELTA), mu_lower_bound(m, m, m),
                 fdp_epsilon_lower_bound(m, m, m, DELTA), epsilon_lower_bound(m, m, m, DELTA, GRID_CONFIDENCE),
                 fdp_epsilon_lower_bound(m, m, m, DELTA, GRID_CONFIDENCE)]
        print(f"| {m:,} | " + " | ".join(f"{cell:.2f}" for cell in cells[:3]) + f" | {cells[3]:.2f}, {cells[4]:.2f} |")


if __name__ == "__main__":
    main()
