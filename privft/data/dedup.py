"""Near-duplicate clusters within a set of texts, and a membership split with one copy per cluster.

Two texts are linked when the Jaccard similarity of their sets of word n-grams (lowercased, 3 words by
default) reaches `threshold`; clusters are the connected components of those links, so a chain of small
edits stays one cluster. The overlap check of `privft.data.overlap` flags non-members that copy the
members; this module removes repeats before training, the usual defence against memorising them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.sparse.csgraph import connected_components
from sklearn.feature_extraction.text import CountVectorizer

from privft.data.errors import DataError
from privft.data.split import SIDES, MembershipSplit

DEDUP_THRESHOLD = 0.7
DEDUP_NGRAM_WORDS = 3


def near_duplicate_clusters(texts: Sequence[str], *, threshold: float = DEDUP_THRESHOLD,
                            ngram: int = DEDUP_NGRAM_WORDS) -> list[list[int]]:
    """Indices of each cluster of two or more near-identical texts (n-gram Jaccard ≥ `threshold`), in text order."""
    if not 0 < threshold <= 1:
        raise DataError(f"near_duplicate_clusters: threshold={threshold} must be in (0, 1], e.g. 0.7")
    if ngram < 1:
        raise DataError(f"near_duplicate_clusters: ngram={ngram} must be at least 1 word")
    if len(texts) < 2:
        return []
    grams = CountVectorizer(ngram_range=(ngram, ngram), binary=True, token_pattern=r"(?u)\b\w+\b",
                            dtype=np.int32).fit_transform(texts)
    shared = (grams @ grams.T).tocoo()
    sizes = np.asarray(grams.sum(axis=1)).ravel()
    jaccard = shared.data / np.maximum(sizes[shared.row] + sizes[shared.col] - shared.data, 1)
    linked = (jaccard >= threshold) & (shared.row != shared.col)
    adjacency = shared.copy()
    adjacency.data = linked.astype(np.int8)
    adjacency.eliminate_zeros()
    _, labels = connected_components(adjacency, directed=False)
    clusters: dict[int, list[int]] = {}
    for index, label in enumerate(labels):
        clusters.setdefault(int(label), []).append(index)
    return [members for members in clusters.values() if len(members) > 1]


def deduplicated_split(split: MembershipSplit, *, threshold: float = DEDUP_THRESHOLD,
                       ngram: int = DEDUP_NGRAM_WORDS) -> tuple[MembershipSplit, list[list[str]]]:
    """The split with one text per near-duplicate cluster, and the clusters found (as texts, kept text first).

    Clusters are found over all sides together; a cluster keeps its first text in the order members,
    non-members, validation, test, so a ticket that was trained on stays a member and its held-out copies go:
    the same as de-duplicating the pool before drawing the split.
    """
    texts = [text for side in SIDES for text in getattr(split, side)]
    side_of = [side for side in SIDES for _ in getattr(split, side)]
    clusters = near_duplicate_clusters(texts, threshold=threshold, ngram=ngram)
    dropped = {index for cluster in clusters for index in cluster[1:]}
    kept = {side: [t for i, (t, s) in enumerate(zip(texts, side_of)) if s == side and i not in dropped]
            for side in SIDES}
    deduplicated = MembershipSplit.from_texts(kept["members"], kept["non_members"], kept["validation"], kept["test"],
                                              seed=split.seed, source=f"{split.source}, near-duplicates removed",
                                              near_duplicate_threshold=split.near_duplicate_threshold)
    return deduplicated, [[texts[i] for i in cluster] for cluster in clusters]
