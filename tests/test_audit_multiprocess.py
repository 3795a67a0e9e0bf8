"""The audit under two CPU processes (torchrun, gloo): each rank scores its share of every pass, rank 0 writes a
report equal to a single process's, through `run_audit(shard=True)`, the statistics cache and `privft audit`."""

from __future__ import annotations

import json
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from two_ranks import free_port, run_two_ranks

from privft.audit import AuditConfig, run_audit
from privft.audit_context import AuditContext
from privft.data import MembershipSplit
from privft.io import atomic_write_text
from privft.models import load_model

pytestmark = pytest.mark.slow

BATCH_SIZE = 4
PASSES = 4  # target, lowercase, ReCaLL prefix, perplexity: each rank's share of a pass is within one batch of half

SCRIPT = textwrap.dedent('''
    """Audit the saved tiny model on the saved split, sharded; each rank writes what it scored to <out>/rank<r>.json."""
    import json, sys
    from pathlib import Path
    from privft.audit import AuditConfig, run_audit
    from privft.audit_context import AuditContext
    from privft.cli import main
    from privft.data import MembershipSplit
    from privft.data.loaders import load_texts
    from privft.models import load_model
    from privft.ranks import init_from_launcher, rank_and_world

    out, batch_size = Path(sys.argv[1]), int(sys.argv[2])
    init_from_launcher()
    rank, world = rank_and_world()
    model, tokenizer = load_model(str(out / "model"))
    split = MembershipSplit.load(out / "split.json")
    context = AuditContext(non_member_prefix=tuple(load_texts(str(out / "prefix.jsonl"), "text")))
    rows = []  # every window this rank fed the decoder, without its padding

    def record(module, args, kwargs):
        rows.extend(ids[keep.bool()].tolist() for ids, keep in zip(kwargs["input_ids"], kwargs["attention_mask"]))

    model.get_decoder().register_forward_pre_hook(record, with_kwargs=True)

    def audit(**settings):
        config = AuditConfig(batch_size=batch_size, **settings)
        report = run_audit(model, tokenizer, split, config=config, context=context, model_name=str(out / "model"),
                           shard=True)
        scored = list(rows)
        rows.clear()
        return (report.to_dict() if report else None), scored

    plain, plain_rows = audit()
    filling, filling_rows = audit(cache_dir=str(out / "cache"))
    cached, cached_rows = audit(cache_dir=str(out / "cache"))
    main(["audit", "--model", str(out / "model"), "--split", str(out / "split.json"), "--prefix-non-members",
          str(out / "prefix.jsonl"), "--batch-size", str(batch_size), "--out", str(out / "cli")])
    with open(out / f"rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "world": world, "plain": plain, "rows": plain_rows, "filling": filling,
                   "filling_rows": len(filling_rows), "cached": cached, "cached_rows": len(cached_rows)}, f)
''')


def _comparable(report: dict, *drop: str) -> str:
    """A report as sorted JSON without its creation time (and the `drop` keys): NaN scores compare equal as text."""
    return json.dumps({k: v for k, v in report.items() if k not in {"created", "generation", *drop}}, sort_keys=True)


def test_two_ranks_share_the_audit_and_rank_0_reports_what_one_process_does(tiny_model, tokenizer, local_texts,
                                                                              tmp_path: Path, one_thread):
    texts = [t[:200] for t in local_texts if len(t) >= 120]
    split = MembershipSplit.random(texts[:80], n_members=20, n_non_members=20, n_validation=6, seed=0,
                                   source="pydoc")
    prefix = texts[100:103]
    tiny_model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    split.save(tmp_path / "split.json")
    atomic_write_text(tmp_path / "prefix.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in prefix))
    script = tmp_path / "audit_sharded.py"
    script.write_text(SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), str(script), str(tmp_path),
               str(BATCH_SIZE)]
    ranks = run_two_ranks(command, tmp_path)
    assert [r["world"] for r in ranks] == [2, 2]

    # The single-process audit of the same model, texts and settings, with the same row recorder.
    model, loaded_tokenizer = load_model(str(tmp_path / "model"))
    single_rows = []
    model.get_decoder().register_forward_pre_hook(lambda module, args, kwargs: single_rows.extend(
        ids[keep.bool()].tolist() for ids, keep in zip(kwargs["input_ids"], kwargs["attention_mask"])),
        with_kwargs=True)
    single = run_audit(model, loaded_tokenizer, split, config=AuditConfig(batch_size=BATCH_SIZE),
                       context=AuditContext(non_member_prefix=tuple(prefix)), model_name=str(tmp_path / "model"))
    single = json.loads(json.dumps(single.to_dict()))
    assert "recall" in single["attacks"] and "lowercase" in single["attacks"]  # every kind of pass was sharded

    # Rank 0 reports exactly what one process reports; the other rank returns no report.
    assert ranks[1]["plain"] is None and ranks[1]["filling"] is None and ranks[1]["cached"] is None
    assert _comparable(ranks[0]["plain"]) == _comparable(single)
    cli = json.loads((tmp_path / "cli" / "report.json").read_text())
    assert _comparable(cli) == _comparable(single)

    # Each rank scored its own share: together every window of the single process, once; each about half.
    shares = [Counter(map(tuple, r["rows"])) for r in ranks]
    assert shares[0] + shares[1] == Counter(map(tuple, single_rows))
    counts = [len(r["rows"]) for r in ranks]
    assert min(counts) > 0 and abs(counts[0] - counts[1]) <= PASSES * BATCH_SIZE

    # The statistics cache: the first cached audit scores everything (shared), the second nothing, same report.
    assert ranks[0]["filling_rows"] + ranks[1]["filling_rows"] == len(single_rows)
    assert ranks[0]["cached_rows"] == ranks[1]["cached_rows"] == 0
    assert _comparable(ranks[0]["cached"]) == _comparable(ranks[0]["filling"])
    assert _comparable(ranks[0]["cached"], "config") == _comparable(single, "config")
