"""How a Goldfish mask would fall on a finished cell's training members: trained, dropped, and dropped in every copy.

    .venv/bin/python scripts/goldfish_drop_counts.py runs/conversations/cells/lora-r-16-tuned \
        runs/scale/cells/lora-r-16-tuned --k 4 --h 13

Each cell's split is rebuilt from its cell.json and its members tokenized as its training run did
(`tokenize_for_training`, the run's start token and rendering); the counts are
`privft.defend.goldfish.drop_counts`, which a Goldfish run records in its report. No model runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from privft.compare import finished_cell_config
from privft.defend.goldfish import GoldfishSettings, drop_counts
from privft.models import load_model
from privft.pipeline import load_split, record_rendering_of
from privft.scoring import start_token_rule
from privft.scoring.render import rendering_context
from privft.training import tokenize_for_training


def main(argv: list[str] | None = None) -> None:
    """Print each cell's drop counts under the given k and h."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cells", nargs="+", type=Path)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--h", type=int, default=13)
    args = parser.parse_args(argv)
    settings = GoldfishSettings(k=args.k, h=args.h)
    for cell in args.cells:
        run = finished_cell_config(cell)
        tokenizer = load_model(run.model)[1]
        with start_token_rule(run.start_token), rendering_context(record_rendering_of(run)):
            rows = tokenize_for_training(tokenizer, list(load_split(run.data).members), run.training.max_length)
        counts = drop_counts(rows, settings)
        print(f"{cell}: {counts.n_trained} trained tokens, {counts.n_dropped} dropped, {counts.n_dropped_recurring} "
              f"after a recurring context ({counts.recurring_share:.1%} of the trained)", flush=True)


if __name__ == "__main__":
    main()
