"""Where a Goldfish fine-tune's held-out loss goes: the test replies' loss on the tokens Goldfish keeps and drops.

    .venv/bin/python scripts/goldfish_dropped_loss.py runs/conversations/cells/goldfish-k-4-r-16-tuned \
        runs/conversations/cells/lora-r-16-tuned runs/conversations/cells/pretrained-not-fine-tuned

The first cell is a finished Goldfish cell; its `goldfish` settings mask every cell's test replies
alike. Each scored (trained) token of the split's test records falls in one of three groups:
- kept: Goldfish trains on it;
- dropped, seen context: Goldfish drops it, and the `h` ids before it also precede a trained token
  of some member, so training dropped that token in that context every time it met it (a template);
- dropped, new context: Goldfish drops it in a context no member's trained tokens followed.
For each cell the script prints each group's token count and mean loss (nats per token). It reads
no audit score and changes no file.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from privft.compare import finished_cell_config
from privft.defend.goldfish import GoldfishSettings, goldfish_mask, token_contexts
from privft.models import load_model
from privft.pipeline import load_split, record_rendering_of
from privft.scoring import score_texts, start_token_rule
from privft.scoring.render import render_records, rendering_context

GROUPS = ("kept", "dropped, seen context", "dropped, new context")


def trained_contexts(ids_list: list[list[int]], trained: list[list[bool]], h: int) -> set[bytes]:
    """The `h` ids before every trained token of the given records, as bytes."""
    return {context for ids, mask in zip(ids_list, trained)
            for context, is_trained in zip(token_contexts(ids, h), mask) if is_trained and context is not None}


def token_groups(ids: list[int], scored: list[int], settings: GoldfishSettings, seen: set[bytes]) -> list[int]:
    """The group (index into GROUPS) of each scored position of one record."""
    dropped, contexts = goldfish_mask(ids, settings), token_contexts(ids, settings.h)
    return [0 if not dropped[i] else 1 if contexts[i] in seen else 2 for i in scored]


def main(argv: list[str] | None = None) -> None:
    """Print, for each cell, the test replies' token count and mean loss in each group."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("goldfish_cell", type=Path)
    parser.add_argument("other_cells", nargs="*", type=Path)
    args = parser.parse_args(argv)
    run = finished_cell_config(args.goldfish_cell)
    if not run.goldfish.on:
        raise SystemExit(f"{args.goldfish_cell}: its config has no Goldfish loss (goldfish.k is null); name a "
                         "Goldfish cell first.")
    split = load_split(run.data)
    rendering = record_rendering_of(run)
    groups: list[list[int]] | None = None
    for cell in [args.goldfish_cell, *args.other_cells]:
        config = finished_cell_config(cell)
        if config.data != run.data:
            raise SystemExit(f"{cell}: its split is not {args.goldfish_cell}'s; compare cells of one split.")
        model, tokenizer = load_model(str(cell / "model" if (cell / "model").is_dir() else config.model))
        if groups is None:
            members, tests = (render_records(list(r), tokenizer, rendering) for r in (split.members, split.test))
            seen = trained_contexts([r.input_ids for r in members], [r.trained for r in members], run.goldfish.h)
            groups = [token_groups(r.input_ids, r.scored, run.goldfish, seen) for r in tests]
        with start_token_rule(config.start_token), rendering_context(rendering):
            stats = score_texts(model, tokenizer, list(split.test), batch_size=run.audit.batch_size, desc=cell.name)
        losses = np.concatenate([-s.token_logprobs for s in stats])
        of = np.concatenate([np.asarray(g) for g in groups])
        cells = [f"{name} {int((of == g).sum())} tokens, loss {losses[of == g].mean():.3f}"
                 for g, name in enumerate(GROUPS)]
        print(f"{cell.name}: all {len(losses)} tokens, loss {losses.mean():.3f}; " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
