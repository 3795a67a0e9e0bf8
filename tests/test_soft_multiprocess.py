"""The callbacks under two CPU processes (accelerate launch): both ranks share SOFT's, the exposure's and the
audit's scoring, rank 0 selects and every rank serves the same mask, and the audit is reported once, on rank 0."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from two_ranks import free_port, run_two_ranks

pytestmark = pytest.mark.slow

N_TRAIN, EPOCHS = 16, 3
BATCH_SIZE = 4  # scoring batches of SOFT, the exposure and the audit: several per pass, so both ranks get some
# Windows scored in eval mode, all ranks together: SOFT reads the 16 training and 8 validation texts each epoch,
# the audit 14 members + 16 non-members and the 8 validation texts, the exposure 1 canary and 20 alternatives.
EVAL_WINDOWS, EVAL_PASSES = EPOCHS * (N_TRAIN + 8) + (14 + 16) + 8 + (1 + 20), 2 * EPOCHS + 2 + 1

SCRIPT = textwrap.dedent('''
    """Train the tiny model with SOFT (paper rule, no warm-up, so the untrained model's selection is mixed);
    each rank writes what it served to <out>/rank<r>.json."""
    import json, math, sys
    import pydoc_data.topics
    import torch.distributed as dist
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments
    import privft.callbacks.soft as soft_module
    from privft.audit import AuditConfig
    from privft.callbacks import CanaryCallback, PrivacyAuditCallback
    from privft.data import MembershipSplit
    from privft.data.canaries import CanaryPlan
    from privft.callbacks import prepare_soft
    from privft.defend import SoftSchedule
    from privft.models import build_tiny_llama, train_bpe_tokenizer

    out, n_train, epochs, batch_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    paragraphs = (p.strip() for topic in pydoc_data.topics.topics.values() for p in topic.split("\\n\\n"))
    texts = list(dict.fromkeys(p[:120] for p in paragraphs if len(p.split()) >= 8))
    tokenizer = train_bpe_tokenizer(texts, vocab_size=1024)
    members, validation = texts[:n_train - 2], texts[n_train:n_train + 8]
    split = MembershipSplit.from_texts(members, texts[n_train + 8:n_train + 24], validation)
    plan = CanaryPlan(n_canaries=1, copies=2, n_alternatives=20)
    train = plan.insert(members)
    view, soft = prepare_soft(tokenizer, train, [" ".join(reversed(t.split())) for t in train], validation,
                              schedule=SoftSchedule(warmup_epochs=0, cumulative=False), batch_size=batch_size)
    canary = CanaryCallback(plan, tokenizer, batch_size=batch_size)
    audit = PrivacyAuditCallback(split, tokenizer, config=AuditConfig(attacks=("loss", "min_k_pp"),
                                 batch_size=batch_size), canary_callback=canary, output_dir=f"{out}/audit")

    scored = []  # how often this rank ran the scorer
    score = soft_module.sample_losses
    soft_module.sample_losses = lambda *args, **kwargs: scored.append(1) or score(*args, **kwargs)

    record = {"masks": {}, "seen": {}}  # per epoch: the served mask; (index, obfuscated?) of every row fed
    lookup = {tuple(view.original[i]["input_ids"]): (i, False) for i in range(len(view))}
    lookup.update({tuple(view.obfuscated[i]["input_ids"]): (i, True) for i in range(len(view))})
    # Canary copies are identical rows, so they map to one index: the expected multiset of indices per epoch.
    record["expected"] = sorted(lookup[tuple(view.original[i]["input_ids"])][0] for i in range(len(view)))

    class Recorder(TrainerCallback):
        epoch = 0
        def on_step_begin(self, args, state, control, **kwargs):
            self.epoch = math.floor(state.epoch + 1e-6)
            record["masks"].setdefault(self.epoch, view.mask.tolist())

    recorder = Recorder()
    model = build_tiny_llama(tokenizer)

    def hook(module, args, kwargs):
        for ids, keep in zip(kwargs["input_ids"], kwargs["attention_mask"]):
            record["seen"].setdefault(recorder.epoch, []).append(lookup[tuple(ids[keep.bool()].tolist())])

    model.register_forward_pre_hook(hook, with_kwargs=True)
    eval_windows = []  # windows this rank scored in eval mode (SOFT, exposure, audit): the scorer calls the decoder

    def count(module, args, kwargs):
        if not module.training:
            eval_windows.append(kwargs["input_ids"].shape[0])

    model.get_decoder().register_forward_pre_hook(count, with_kwargs=True)
    args = TrainingArguments(output_dir=out, num_train_epochs=epochs, per_device_train_batch_size=4,
                             learning_rate=1e-3, seed=0, use_cpu=True, report_to="none", save_strategy="no",
                             logging_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=view, processing_class=tokenizer,
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
                      callbacks=[soft, recorder, canary, audit])
    trainer.train()
    record.update(rank=dist.get_rank(), world_size=dist.get_world_size(), scored=len(scored), history=soft.history,
                  audits=len(audit.reports), exposures=len(canary.results), eval_windows=sum(eval_windows))
    with open(f"{out}/rank{dist.get_rank()}.json", "w") as f:
        json.dump(record, f)
''')


def test_two_ranks_share_the_scoring_serve_one_mask_and_report_once(tmp_path: Path):
    script = tmp_path / "train_soft.py"
    script.write_text(SCRIPT)
    # `accelerate launch --cpu` starts ONE process unless an MPI hostfile is given; `--multi_gpu` selects the
    # torchrun launcher, and the script's `use_cpu=True` makes it two CPU processes over gloo.
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(free_port()), str(script), str(tmp_path), str(N_TRAIN), str(EPOCHS),
               str(BATCH_SIZE)]
    ranks = run_two_ranks(command, tmp_path)
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["masks"] == ranks[1]["masks"] and ranks[0]["history"] == ranks[1]["history"]
    assert len(ranks[0]["history"]) == EPOCHS  # a selection per epoch
    assert ranks[0]["scored"] == ranks[1]["scored"] == 2 * EPOCHS  # train + validation, every rank its share
    for epoch in map(str, range(EPOCHS)):
        mask = ranks[0]["masks"][epoch]
        for rank in ranks:
            assert all(obfuscated == mask[index] for index, obfuscated in rank["seen"][epoch])
        assert sorted(i for rank in ranks for i, _ in rank["seen"][epoch]) == ranks[0]["expected"]
    assert len(ranks[0]["expected"]) == N_TRAIN
    assert 0 < sum(ranks[0]["masks"]["0"]) < N_TRAIN  # a mixed mask, so a rank-dependent serving would show
    assert [r["audits"] for r in ranks] == [1, 0] and [r["exposures"] for r in ranks] == [1, 1]
    assert (tmp_path / "audit" / "report.json").exists()
    windows = [r["eval_windows"] for r in ranks]
    assert sum(windows) == EVAL_WINDOWS  # each window scored once, by one rank
    assert abs(windows[0] - windows[1]) <= EVAL_PASSES * BATCH_SIZE  # each pass split to within a batch
