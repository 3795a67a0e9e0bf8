"""The main job: LoRA fine-tune the embedded default on a random wiki split, then audit it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from privft.audit import AuditConfig, run_audit
from privft.data import MembershipSplit, load_corpus
from privft.models import DEFAULT_MODEL, load_model
from privft.report import AuditReport
from privft.training import FinetuneSettings, finetune


@dataclass
class DemoSettings:
    """Sizes chosen so the demo finishes in about ten minutes on two CPU cores."""

    model: str = DEFAULT_MODEL
    corpus: str = "wiki"
    max_words: int = 60  # short summaries: about 80 tokens, so nothing is truncated in training
    n_members: int = 200
    n_non_members: int = 200
    n_validation: int = 50
    epochs: int = 3
    seed: int = 0
    output_dir: str = "runs/demo"


def run_demo(settings: DemoSettings | None = None) -> AuditReport:
    """Split, fine-tune with LoRA and the plain Trainer, audit, print the table and save the report."""
    settings = settings or DemoSettings()
    out = Path(settings.output_dir)
    texts = [t for t in load_corpus(settings.corpus) if len(t.split()) <= settings.max_words]
    split = MembershipSplit.random(texts, n_members=settings.n_members, n_non_members=settings.n_non_members,
                                   n_validation=settings.n_validation, seed=settings.seed,
                                   source=f"{settings.corpus} (≤ {settings.max_words} words)")
    split.save(out / "split.json")
    print(f"Split: {len(split.members)} members, {len(split.non_members)} non-members, "
          f"{len(split.validation)} validation texts from {split.source}.")
    model, tokenizer = load_model(settings.model)
    model = finetune(model, tokenizer, split.members,
                     FinetuneSettings(epochs=settings.epochs, seed=settings.seed, output_dir=str(out / "trainer")))
    report = run_audit(model, tokenizer, split, config=AuditConfig(seed=settings.seed), model_name=settings.model
                       + " + LoRA")
    paths = report.save(out)
    print(report.to_markdown())
    print(f"Report: {paths['json']}, {paths['markdown']}, {paths['roc']}")
    return report
