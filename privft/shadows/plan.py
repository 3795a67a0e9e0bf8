"""A seeded shadow-model plan: which candidate texts (and canaries) each of K shadows trains on.

The plan is the ground truth of a shadow farm. It fixes the pool (candidates, planted
canaries, population texts no shadow sees) and a balanced IN matrix: every candidate and
every canary is IN for exactly ⌊K/2⌋ shadows, each shadow trains on about half the pool.
It is saved once as `plan.json` in the farm folder (a different plan is refused there); each
shadow job reads it from there and records its sha256 beside its losses.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from privft.config import SAVED_BEFORE, from_dict, to_dict
from privft.data.canaries import CanaryPlan
from privft.data.pii import plan_from_dict
from privft.data.sources import load_source
from privft.data.split import text_sha256
from privft.io import atomic_write_text
from privft.models import DEFAULT_MODEL
from privft.pipeline import CanarySettings, canary_plan
from privft.report import package_versions
from privft.scoring import check_start_rule
from privft.training import FinetuneSettings

PLAN_FORMAT = "privft.shadow-plan"
PLAN_VERSION = 1
KINDS = ("candidate", "canary", "population")


@dataclass
class PoolSettings:
    """Where the pool's texts come from: a built-in corpus or a file, filtered, then drawn with the plan's seed."""

    corpus: str | None = "wiki"
    path: str | None = None
    text_column: str = "text"
    max_words: int | None = 60  # short texts are trained on whole
    n_candidates: int = 500  # each IN for half of the shadows
    n_population: int = 100  # OUT for every shadow: RMIA's population


@dataclass
class ShadowSettings:
    """A shadow farm: `n_shadows` fine-tunes of `model` on seeded halves of a candidate pool."""

    model: str = DEFAULT_MODEL
    n_shadows: int = 16
    window: int = 64  # per-token losses of the first `window` tokens of each text are stored
    seed: int = 0
    score_batch_size: int = 16
    pool: PoolSettings = field(default_factory=PoolSettings)
    training: FinetuneSettings = field(default_factory=FinetuneSettings)
    canaries: CanarySettings = field(default_factory=CanarySettings)
    start_token: str = field(default="auto", metadata={SAVED_BEFORE: "bos-else-eos"})  # as RunConfig.start_token

    def __post_init__(self) -> None:
        """Check the settings that the plan's balance and the stored windows rely on."""
        check_start_rule(self.start_token)
        if self.canaries.design != "random":
            raise ValueError(f"canaries.design={self.canaries.design!r}: a shadow farm plants digit or PII canaries "
                             "only, since a designed plan draws from a tokenizer and training records that the farm "
                             "plan does not load; set canaries.design: random.")
        if self.n_shadows < 6:
            raise ValueError(f"The 'n_shadows' parameter of ShadowSettings must be at least 6: each leave-one-out "
                             "fold then keeps 2 IN and 2 OUT shadows per example, the fewest a per-example variance "
                             f"is estimated from. Got {self.n_shadows} instead.")
        if not 1 <= self.window < self.training.max_length:
            raise ValueError(f"The 'window' parameter of ShadowSettings must be in [1, training.max_length - 1 = "
                             f"{self.training.max_length - 1}] so every stored token was trained on. "
                             f"Got {self.window} instead.")


def plan_sha256(directory: str | os.PathLike[str]) -> str:
    """sha256 of the farm's `plan.json` bytes: each shadow records it, so losses stay tied to their plan."""
    return hashlib.sha256((Path(directory) / "plan.json").read_bytes()).hexdigest()


def _stored_plan(path: Path) -> dict | None:
    """The plan record in `path` without its package versions, or None when it is not readable JSON.

    Its settings are read with today's defaults, so a setting added since (with its default) does not
    make the same plan look different.
    """
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    try:
        record["settings"] = to_dict(from_dict(ShadowSettings, record["settings"], saved=True))
    except (KeyError, TypeError, ValueError):  # not a plan this version can read: it compares as different
        pass
    return {k: v for k, v in record.items() if k != "versions"}


def balanced_keep(n_models: int, n_examples: int, rng: np.random.Generator) -> np.ndarray:
    """IN matrix (n_models, n_examples): each example IN for exactly ⌊n_models / 2⌋ models, chosen at random."""
    return rng.random((n_models, n_examples)).argsort(axis=0) < n_models // 2


@dataclass
class ShadowPlan:
    """The pool texts, their kinds, the IN matrix and the canary ground truth of one farm."""

    settings: ShadowSettings
    texts: list[str]
    kinds: list[str]  # per text: "candidate", "canary" or "population"
    keep: np.ndarray  # (n_shadows, n_texts) bool: text IN for that shadow's training set
    canary_plan: CanaryPlan | None = None

    @classmethod
    def build(cls, settings: ShadowSettings) -> ShadowPlan:
        """Draw the pool and the IN matrix from `settings.seed`."""
        pool = settings.pool
        texts, _ = load_source(corpus=pool.corpus, path=pool.path, text_column=pool.text_column,
                               max_words=pool.max_words, key="pool")
        needed = pool.n_candidates + pool.n_population
        if needed > len(texts):
            raise ValueError(f"The pool needs {pool.n_candidates} candidates + {pool.n_population} population texts"
                             f" = {needed}, but the source has {len(texts)} usable texts; lower the counts or raise "
                             "pool.max_words.")
        rng = np.random.default_rng([settings.seed, 0])
        drawn = [texts[i] for i in rng.permutation(len(texts))[:needed]]
        planted = canary_plan(settings.canaries, settings.seed)
        canaries = planted.canary_texts() if planted else []
        if planted:
            planted.check_absent(drawn)
        kinds = ["candidate"] * pool.n_candidates + ["canary"] * len(canaries) + ["population"] * pool.n_population
        trained = balanced_keep(settings.n_shadows, pool.n_candidates + len(canaries), rng)
        keep = np.concatenate([trained, np.zeros((settings.n_shadows, pool.n_population), bool)], axis=1)
        texts = drawn[:pool.n_candidates] + canaries + drawn[pool.n_candidates:]
        return cls(settings, texts, kinds, keep, planted)

    def training_texts(self, index: int) -> list[str]:
        """Shadow `index`'s training set: its IN candidates, and its IN canaries `copies` times each."""
        self._check_index(index)
        copies = self.settings.canaries.copies
        return [text for text, kind, inside in zip(self.texts, self.kinds, self.keep[index]) if inside
                for _ in range(copies if kind == "canary" else 1)]

    def indices(self, kind: str) -> np.ndarray:
        """Positions of the texts of one kind in the pool."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
        return np.flatnonzero(np.array(self.kinds) == kind)

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write `plan.json` (settings, texts with sha256, kinds, IN matrix, canaries, versions) atomically.

        A farm keeps its first plan: saving the same plan again leaves the file as it is, and a
        different plan is refused, since shadows trained on the old one would be scored against it.
        """
        path = Path(directory) / "plan.json"
        record = {
            "format": PLAN_FORMAT, "version": PLAN_VERSION, "settings": to_dict(self.settings),
            "texts": self.texts, "sha256": [text_sha256(t) for t in self.texts], "kinds": self.kinds,
            "keep": ["".join("1" if k else "0" for k in row) for row in self.keep],
            "canaries": self.canary_plan.to_dict() if self.canary_plan else None,
        }
        if path.exists():
            if _stored_plan(path) == json.loads(json.dumps(record)):  # JSON-plain, as stored
                return path
            raise FileExistsError(f"{path} already holds a different shadow plan, and shadows trained on it would "
                                  f"be scored against the new one. Plan into a new farm folder (--out), or delete "
                                  f"{Path(directory)} first to start this farm over.")
        record["versions"] = package_versions()
        return atomic_write_text(path, json.dumps(record, ensure_ascii=False, indent=1))

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ShadowPlan:
        """Read the `plan.json` of a farm folder, checking its format and text hashes."""
        path = Path(directory) / "plan.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist; create the farm with: privft shadows plan CONFIG --out "
                                    f"{directory}")
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") != PLAN_FORMAT or record.get("version") != PLAN_VERSION:
            raise ValueError(f"{path} is not a privft shadow plan (format {PLAN_FORMAT!r}, version {PLAN_VERSION}).")
        if [text_sha256(t) for t in record["texts"]] != record["sha256"]:
            raise ValueError(f"{path}: the texts no longer match their recorded sha256; the plan was edited.")
        keep = np.array([[c == "1" for c in row] for row in record["keep"]], dtype=bool)
        canaries = plan_from_dict(record["canaries"]) if record["canaries"] else None  # a digit or a PII plan
        settings = from_dict(ShadowSettings, record["settings"], saved=True)
        return cls(settings, record["texts"], record["kinds"], keep, canaries)

    def _check_index(self, index: int) -> None:
        if not 0 <= index < self.settings.n_shadows:
            raise ValueError(f"Shadow index {index} is out of range; this plan has shadows "
                             f"0..{self.settings.n_shadows - 1}.")

