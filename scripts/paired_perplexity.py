"""Print each cell's validation perplexity over a baseline cell's, paired over the same texts, with a 95 % interval.

    .venv/bin/python scripts/paired_perplexity.py runs/scale/cells/lora-r-4 runs/scale/cells/dp-lora-eps-8-r-16

`privft compare` pairs every cell with plain LoRA at the base rank; this pairs them with any
other finished cell (report.json with per-text losses; `scripts/add_perplexity_losses.py` adds
them to reports that predate them).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from privft.metrics import paired_perplexity_ratio


def held_out(cell: Path) -> dict:
    """The perplexity record of a cell's report, refused without per-text losses."""
    record = json.loads((cell / "report.json").read_text(encoding="utf-8"))["perplexity"]
    if not record.get("nll_sums"):
        raise SystemExit(f"{cell}/report.json has no per-text losses; run scripts/add_perplexity_losses.py {cell}.")
    return record


def main() -> None:
    """One Markdown row per cell: its perplexity, the baseline's, and the paired ratio."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("baseline", type=Path)
    parser.add_argument("cells", nargs="+", type=Path)
    args = parser.parse_args()
    base = held_out(args.baseline)
    print(f"| cell | perplexity | ÷ {args.baseline.name} ({base['value']:.2f}) [paired 95 % CI] |")
    print("|---|---|---|")
    for cell in args.cells:
        record = held_out(cell)
        if record["token_counts"] != base["token_counts"]:
            raise SystemExit(f"{cell} and {args.baseline} did not score the same validation tokens; pair cells of one "
                             "split and tokenizer.")
        ratio = paired_perplexity_ratio(record["nll_sums"], base["nll_sums"], base["token_counts"])
        print(f"| {cell.name} | {record['value']:.2f} | {ratio.ratio:.3f} [{ratio.ci_low:.3f}, {ratio.ci_high:.3f}]"
              f"{' ✱' if ratio.significant else ''} |")


if __name__ == "__main__":
    main()
