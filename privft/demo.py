"""The main job: undefended LoRA and SOFT (paper rule) on the same wiki split of the embedded default, audited."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from privft.audit import AuditConfig
from privft.io import atomic_write_text
from privft.models import DEFAULT_MODEL
from privft.pipeline import CanarySettings, DataSettings, RunConfig, RunResult, SoftSettings, run_training
from privft.report import comparison_markdown
from privft.training import FinetuneSettings


@dataclass
class DemoSettings:
    """Sizes chosen so both runs and their audits finish in about ten minutes on two CPU cores."""

    model: str = DEFAULT_MODEL
    n_members: int = 100
    n_non_members: int = 200  # twice the members: steadier blind baseline, 2 false positives at FPR 1 %
    n_validation: int = 40
    epochs: int = 3
    n_canaries: int = 4
    seed: int = 0
    output_dir: str = "runs/demo"


def demo_configs(settings: DemoSettings) -> dict[str, RunConfig]:
    """The undefended and the SOFT run: same split, canaries, training settings and audit.

    SOFT runs at privft's defaults, the SOFT study's best protection per unit of perplexity
    (docs/results/soft-study.md): the paper rule, every eligible word of each selected text's
    second half swapped by the neighbour paraphraser, trained on that rewritten half alone.
    """
    out = Path(settings.output_dir)
    undefended = RunConfig(
        model=settings.model,
        data=DataSettings(corpus="wiki", max_words=60, n_members=settings.n_members,
                          n_non_members=settings.n_non_members, n_validation=settings.n_validation,
                          seed=settings.seed),
        training=FinetuneSettings(epochs=settings.epochs, seed=settings.seed, output_dir=str(out / "undefended")),
        canaries=CanarySettings(n_canaries=settings.n_canaries, copies=4, n_alternatives=200),
        audit=AuditConfig(seed=settings.seed),
    )
    soft = dataclasses.replace(
        undefended, soft=SoftSettings(rule="paper"),
        training=dataclasses.replace(undefended.training, output_dir=str(out / "soft")))
    return {"undefended": undefended, "SOFT (paper rule)": soft}


def run_demo(settings: DemoSettings | None = None) -> dict[str, RunResult]:
    """Train and audit both runs, then print and save the side-by-side comparison."""
    settings = settings or DemoSettings()
    results = {name: run_training(config) for name, config in demo_configs(settings).items()}
    table = comparison_markdown({name: r.report for name, r in results.items()})
    timing = "\n".join(f"- {name}: training took {r.train_seconds:.0f} s" for name, r in results.items())
    text = f"## privft demo: {settings.model} + LoRA on wiki\n\n{table}\n{timing}\n"
    path = atomic_write_text(Path(settings.output_dir) / "comparison.md", text)
    print(text)
    print(f"Reports: {Path(settings.output_dir)}/*/report.md; this table: {path}")
    return results
