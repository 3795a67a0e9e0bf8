"""Side-by-side Markdown: our measured cells in the paper's layout, then the published ones; never mixed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from privft.paper.published import Published
from privft.paper.reproduce import Cell
from privft.report import PerplexityResult

# Column and row order, as in the paper (the paper-rule SOFT column exists only in tables filled from a comparison).
METHOD_LABELS = {"pretrained": "Pretrained", "full_ft": "FT", "lora": "LoRA", "dp_eps_0.01": "DP-LoRA ε = 0.01",
                 "dp_eps_100": "DP-LoRA ε = 100", "soft": "SOFT", "soft_paper": "SOFT (paper rule)"}
# The paper's rows, in its order, with the key of our measurement (the bag-of-words row is the blind baseline).
PAPER_ROWS = (("Loss", "loss"), ("Zlib", "zlib"), ("Lowercase", "lowercase"), ("Min-K", "min_k"),
              ("Min-K++", "min_k_pp"), ("Ratio", "ref_ratio"), ("Bag-of-words", "blind_baseline"),
              ("ReCaLL", "recall"), ("CON-ReCaLL", "con_recall"), ("Ensemble", "ensemble"))
EXTRA_ROWS = (("Neighbourhood †", "neighbourhood"),)
DASH = "—"


def attack_metrics(cell: Cell, key: str) -> dict[str, Any]:
    """The metrics dict of one attack (or of the blind baseline) in a cell's report."""
    report = cell.report
    return report["blind_baseline"] if key == "blind_baseline" else report["attacks"][key]


def _auc(cell: Cell, key: str) -> float:
    return attack_metrics(cell, key)["auc"]["auc"]


def _tpr1(cell: Cell, key: str) -> float | None:
    return attack_metrics(cell, key)["tpr_at_fpr"][0]["tpr"]


def _perplexity(cell: Cell) -> str:
    p = PerplexityResult(**cell.report["perplexity"])  # a report before per-text losses has no interval
    return f"{p.value:.2f}{p.interval()} ({p.n_texts} texts, {p.n_tokens} tokens)"


def _grid(cells: Sequence[Cell]) -> tuple[list[str], list[str], dict[tuple[str, str], Cell]]:
    domains = list(dict.fromkeys(c.domain for c in cells))
    methods = [m for m in METHOD_LABELS if any(c.method == m for c in cells)]
    return domains, methods, {(c.domain, c.method): c for c in cells}


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def _columns(domains: Sequence[str], methods: Sequence[str]) -> list[str]:
    return [f"{d} {METHOD_LABELS[m]}" for d in domains for m in methods]


def measures(cell: Cell, key: str) -> bool:
    """Whether the cell's audit ran this attack (the blind baseline always runs)."""
    return key == "blind_baseline" or key in cell.report["attacks"]


def measured_rows(cells: Sequence[Cell]) -> tuple[tuple[str, str], ...]:
    """The paper's rows every cell measured (an audit without context lacks ReCaLL, CON-ReCaLL and the Ensemble)."""
    return tuple((label, key) for label, key in PAPER_ROWS if all(measures(c, key) for c in cells))


def mean_label(rows: Sequence[tuple[str, str]]) -> str:
    """The mean row's label: over the ten paper rows, or over those measured."""
    return "ten paper rows" if len(rows) == len(PAPER_ROWS) else f"the {len(rows)} paper rows measured"


def table1_markdown(cells: Sequence[Cell], published: Published) -> str:
    """Attack AUC (rows: attacks and their mean; columns: dataset × method), measured then published."""
    domains, methods, grid = _grid(cells)
    header = ["Attack", *_columns(domains, methods)]
    rows = measured_rows(cells)
    measured = []
    for label, key in PAPER_ROWS + EXTRA_ROWS:
        row = [label]
        for d in domains:
            for m in methods:
                if not measures(grid[d, m], key):
                    row.append(DASH)
                    continue
                auc = attack_metrics(grid[d, m], key)["auc"]
                row.append(f"{auc['auc']:.3f} ({auc['ci_low']:.2f}–{auc['ci_high']:.2f})")
        measured.append(row)
    measured.append([f"**Mean** ({mean_label(rows)})",
                     *[f"**{np.mean([_auc(grid[d, m], k) for _, k in rows]):.3f}**" for d in domains for m in methods]])
    published_rows = []
    for label, _ in PAPER_ROWS:
        published_rows.append([label, *[_published(published.cell(m, d, label)) for d in domains for m in methods]])
    published_rows.append(["**Mean**", *[_published_mean(published, m, d) for d in domains for m in methods]])
    counts = _counts(cells)
    return (f"### Measured: attack AUC (95 % bootstrap CI)\n\n{_markdown(header, measured)}\n{counts}\n"
            "† not in the paper's table; not in the mean. — not measured by this audit.\n\n"
            f"### Published (SOFT Table 1, Llama-3.2-3B)\n\n{_markdown(header, published_rows)}\n"
            f"Published means over all six datasets: FT {published.value('ft_mean_auc'):.3f}, "
            f"LoRA {published.value('lora_mean_auc'):.3f}, SOFT {published.value('soft_mean_auc'):.3f}; "
            "per-dataset LoRA and pretrained cells are not in our sources (—).\n")


def _published(value: float | None) -> str:
    return DASH if value is None else f"{value:.3f}"


def _published_mean(published: Published, method: str, dataset: str) -> str:
    values = published.cells.get(method, {}).get(dataset)
    return DASH if values is None else f"**{np.mean(values):.3f}**"


def _counts(cells: Sequence[Cell]) -> str:
    split = cells[0].report["split"]
    counts = f"Each cell: {split['n_members']} members vs {split['n_non_members']} non-members"
    if "ensemble" not in cells[0].report["attacks"]:
        return counts + "."
    ensemble = attack_metrics(cells[0], "ensemble")["auc"]
    return (f"{counts} (Ensemble: scored on the {ensemble['n_members']} vs {ensemble['n_non_members']} it was not "
            "fitted on).")


def tpr_markdown(cells: Sequence[Cell], published: Published) -> str:
    """TPR at FPR ≤ 1 % with counts, same layout; the paper gives only the means over its six datasets."""
    domains, methods, grid = _grid(cells)
    header = ["Attack", *_columns(domains, methods)]
    rows = []
    for label, key in PAPER_ROWS + EXTRA_ROWS:
        row = [label]
        for d in domains:
            for m in methods:
                t = attack_metrics(grid[d, m], key)["tpr_at_fpr"][0]
                row.append(DASH if t["tpr"] is None else f"{t['tpr']:.3f} ({t['true_positives']}/{t['n_members']})")
        rows.append(row)
    means = [np.mean([v for _, k in PAPER_ROWS if (v := _tpr1(grid[d, m], k)) is not None])
             for d in domains for m in methods]
    rows.append(["**Mean** (ten paper rows)", *[f"**{v:.3f}**" for v in means]])
    t = attack_metrics(cells[0], "loss")["tpr_at_fpr"][0]
    note = (f"The threshold admits at most {int(t['max_fpr'] * t['n_non_members'])} false positive(s) among "
            f"{t['n_non_members']} non-members; — where that is too few to set one.")
    pub_header = ["Attack", *[f"all six datasets {METHOD_LABELS[m]}" for m in methods]]
    by_method = {"pretrained": "tpr1_pretrained", "full_ft": "tpr1_full_ft", "soft": "tpr1_soft"}
    pub_rows = [[label, *[DASH] * len(methods)] for label, _ in PAPER_ROWS]
    pub_rows.append(["**Mean**", *[f"**{published.value(by_method[m]):.3f}**" if m in by_method else DASH
                                   for m in methods]])
    return (f"### Measured: TPR at FPR ≤ 1 % (members caught / members)\n\n{_markdown(header, rows)}\n{note}\n\n"
            f"### Published (SOFT, mean TPR at 1 % FPR)\n\n{_markdown(pub_header, pub_rows)}")


def perplexity_markdown(cells: Sequence[Cell], published: Published) -> str:
    """Validation perplexity and training time per method; the paper's ArXiv perplexities and overheads."""
    domains, methods, grid = _grid(cells)
    rows = []
    for m in methods:
        row = [METHOD_LABELS[m]]
        for d in domains:
            seconds = grid[d, m].train_seconds
            row += [_perplexity(grid[d, m]), DASH if seconds is None else f"{seconds:.0f} s"]
        rows.append(row)
    overhead = ["SOFT training overhead over FT"]
    for d in domains:
        ft, soft = grid.get((d, "full_ft")), grid.get((d, "soft"))
        overhead += [DASH, f"{soft.train_seconds / ft.train_seconds - 1:+.1%}" if ft and soft else DASH]
    rows.append(overhead)
    header = ["Method", *[c for d in domains for c in (f"{d} perplexity", f"{d} training time")]]
    pub = [["Pretrained", f"{published.value('ppl_pretrained'):.2f}", DASH],
           ["FT", f"{published.value('ppl_full_ft'):.2f}", DASH],
           ["SOFT", f"{published.value('ppl_soft'):.2f}", DASH],
           ["SOFT training overhead", DASH, f"{published.value('overhead_soft'):.2%}"],
           ["DP-LoRA training overhead", DASH, f"{published.value('overhead_dp_lora'):.2%}"]]
    return (f"### Measured: perplexity on the validation texts (corpus-level, exp of total NLL / tokens)\n\n"
            f"{_markdown(header, rows)}\nTraining time is the Trainer's epochs only (SOFT's selection passes "
            "included, its offline paraphrasing and every audit excluded). ⚠ One run per cell: on a shared "
            "machine these times, and so the overhead row, vary by tens of percent; "
            "benchmarks/soft_overhead.py measures SOFT's overhead properly (best of interleaved runs).\n\n"
            "### Published (SOFT, ArXiv, Llama-3.2-3B)\n\n"
            f"{_markdown(['Method', 'ArXiv perplexity', 'overhead'], pub)}")


def adaptive_markdown(cells: Sequence[Cell], published: Published) -> str:
    """The attacker who knows the defence: AUC and TPR at FPR ≤ 1 % for FT and SOFT, then published."""
    domains, _, grid = _grid(cells)
    methods = [m for m in ("full_ft", "soft") if any(c.method == m for c in cells)]
    names = list(next(c.adaptive for c in cells if c.adaptive))
    header = ["Attacker", *[f"{d} {METHOD_LABELS[m]} {x}"
                            for d in domains for m in methods for x in ("AUC", "TPR@1 %")]]
    rows = []
    for name in names:
        row = [name]
        for d in domains:
            for m in methods:
                metrics = grid[d, m].adaptive[name]
                auc, t = metrics["auc"], metrics["tpr_at_fpr"][0]
                row += [f"{auc['auc']:.3f} ({auc['ci_low']:.2f}–{auc['ci_high']:.2f})",
                        DASH if t["tpr"] is None else f"{t['tpr']:.3f} ({t['true_positives']}/{t['n_members']})"]
        rows.append(row)
    v = published.value
    pub = [["non-adaptive (Ratio)", DASH, f"{v('adaptive_tpr1_undefended'):.3f}",
            f"{v('adaptive_auc_baseline'):.3f}", f"{v('adaptive_tpr1_baseline'):.3f}"],
           ["knows the selection strategy", DASH, DASH, f"{v('adaptive_auc_selection_only'):.3f}", DASH],
           ["knows paraphraser and selection", DASH, DASH, f"{v('adaptive_auc_full_knowledge'):.3f}",
            f"{v('adaptive_tpr1_full_knowledge'):.3f}"]]
    return (f"### Measured: adaptive attackers (Ratio-based; see privft/paper/adaptive.py)\n\n"
            f"{_markdown(header, rows)}\n### Published (SOFT, adaptive attacks)\n\n"
            f"{_markdown(['Attacker', 'FT AUC', 'FT TPR@1 %', 'SOFT AUC', 'SOFT TPR@1 %'], pub)}")


def dp_markdown(cells: Sequence[Cell], published: Published) -> str:
    """Table 5's layout (pretrained, DP-LoRA at two ε, SOFT × perplexity, Ensemble AUC), measured then published."""
    domains, methods, grid = _grid(cells)
    rows = []
    for m in methods:
        row = [METHOD_LABELS[m]]
        for d in domains:
            cell = grid[d, m]
            auc = attack_metrics(cell, "ensemble")["auc"]
            spent = DASH if cell.privacy is None else (f"{cell.privacy['epsilon']:.3g} "
                                                       f"(δ = {cell.privacy['delta']:.1e}, σ = "
                                                       f"{cell.privacy['noise_multiplier']:.3g})")
            row += [_perplexity(cell),
                    f"{auc['auc']:.3f} ({auc['ci_low']:.2f}–{auc['ci_high']:.2f}; "
                    f"{auc['n_members']} vs {auc['n_non_members']})", spent]
        rows.append(row)
    header = ["Method", *[c for d in domains for c in (f"{d} perplexity", f"{d} Ensemble AUC", f"{d} ε spent")]]
    return (f"### Measured: DP-LoRA against SOFT (Table 5 layout)\n\n{_markdown(header, rows)}\n"
            "ε spent is the PRV accountant's bound after training, at the δ shown; the privacy unit is one "
            "training sequence. Perplexity on the validation texts; the Ensemble is measured on the part of the "
            "split it was not fitted on.\n\n" + dp_published_markdown(published))


def dp_published_markdown(published: Published) -> str:
    """The DP table (Table 5 layout) with the published cells only."""
    digits = {"Perplexity": 2}
    rows = [[r["label"], *[DASH if c not in r else f"{published.value(r[c]):.{digits.get(c, 3)}f}"
                           for c in published.dp_columns]] for r in published.dp_rows]
    return f"### Published (SOFT Table 5, Llama-3.2-1B)\n\n{_markdown(['Method', *published.dp_columns], rows)}"
