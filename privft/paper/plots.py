"""A figure for the paper reproduction: ten-attack mean AUC per method, measured beside published."""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

from privft.paper.published import Published
from privft.paper.reproduce import Cell
from privft.paper.tables import METHOD_LABELS, attack_metrics, mean_label, measured_rows

PUBLISHED_MEANS = {"full_ft": "ft_mean_auc", "lora": "lora_mean_auc", "soft": "soft_mean_auc"}


def mean_auc_png(cells: Sequence[Cell], published: Published) -> bytes:
    """Grouped bars: our mean AUC per (domain, method) with the published six-dataset means as markers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    domains = list(dict.fromkeys(c.domain for c in cells))
    methods = [m for m in METHOD_LABELS if any(c.method == m for c in cells)]
    grid = {(c.domain, c.method): c for c in cells}
    rows = measured_rows(cells)
    width = 0.8 / len(domains)
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(methods))
    for i, domain in enumerate(domains):
        means = [np.mean([attack_metrics(grid[domain, m], k)["auc"]["auc"] for _, k in rows]) for m in methods]
        ax.bar(x + (i - (len(domains) - 1) / 2) * width, means, width, label=f"measured, {domain}")
    paper = [(j, published.value(PUBLISHED_MEANS[m])) for j, m in enumerate(methods) if m in PUBLISHED_MEANS]
    ax.scatter([j for j, _ in paper], [v for _, v in paper], marker="_", s=900, color="black", zorder=3,
               label="published (six-dataset mean)")
    ax.axhline(0.5, color="grey", linestyle=":", linewidth=1)
    ax.set(xticks=x, xticklabels=[METHOD_LABELS[m] for m in methods], ylim=(0.4, 1.0),
           ylabel=f"mean AUC of {mean_label(rows)}")
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    return buffer.getvalue()
