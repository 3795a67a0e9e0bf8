"""A seeded membership split (members, non-members, validation, test) with a checksummed JSON manifest."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import unicodedata
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from privft.data.errors import DataError
from privft.data.overlap import (
    NEAR_DUPLICATE_THRESHOLD,
    NGRAM_WORDS,
    index_members,
    near_duplicates,
)
from privft.data.records import Record, check_records, record_content, record_format, record_json
from privft.io import atomic_write_text

MANIFEST_FORMAT = "privft.membership-split"
MANIFEST_VERSION = 1
SIDES = ("members", "non_members", "validation", "test")
OPTIONAL_SIDES = ("test",)  # a manifest holds them only when they hold texts (as manifests saved before them)
MIN_PER_SIDE = 2  # members and non-members each: fewer leaves the AUC or the blind baseline undefined
ID_PREFIXES = {"members": "member", "non_members": "non-member", "validation": "validation", "test": "test"}
SHOWN_PAIRS = 5
PREVIEW_CHARS = 80


def text_identity(text: str) -> str:
    """The key under which two texts count as the same: NFC Unicode form, whitespace runs collapsed."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def record_identity(record: Record) -> str:
    """The key under which two records count as the same: the `text_identity` of their content."""
    return text_identity(record_content(record))


def distinct_texts(texts: Sequence[Record]) -> list[Record]:
    """`texts` less each record equal to an earlier one up to Unicode form and spacing (`record_identity`)."""
    first: dict[str, Record] = {}
    for text in texts:
        first.setdefault(record_identity(text), text)
    return list(first.values())


class NearDuplicateWarning(UserWarning):
    """Non-member, validation or test texts share most of their word 13-grams with the members."""


class NearDuplicate(NamedTuple):
    """A `side` text whose `overlap` share of n-grams is in the members, most in `member_index`."""

    side: str
    index: int
    member_index: int
    overlap: float


@dataclass(repr=False)
class MembershipSplit:
    """Members (trained on), non-members (held out) and validation records for a membership audit.

    An optional test side holds texts that nothing but the final utility measurement reads: not
    training, not the audit's attacks, not SOFT's validation threshold, not tuning.

    A side holds texts or conversational records (`privft.data.records`), one format for the whole
    split. Every construction path is validated: the records must be well formed, members and
    non-members non-empty, and no record may sit on two sides (compared by content). Non-member,
    validation or test texts whose word 13-grams are at least `near_duplicate_threshold` (default 0.8,
    the MIMIR filter) found in the members are listed in `near_duplicates` and reported with a
    `NearDuplicateWarning`.
    """

    members: list[Record]
    non_members: list[Record]
    validation: list[Record] = field(default_factory=list)
    test: list[Record] = field(default_factory=list)
    seed: int | None = None
    source: str = "custom"
    near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD
    near_duplicates: list[NearDuplicate] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        """Check the texts and flag near-duplicates across sides."""
        first = next((r for side in SIDES for r in getattr(self, side)), None)
        fmt = record_format(first) or "auto"  # every side takes the format of the split's first record
        for side in SIDES:
            setattr(self, side, check_records(list(getattr(self, side)), self._where(side), fmt))
        self._check_settings()
        self._check_disjoint()
        self.near_duplicates = self._find_near_duplicates()
        if self.near_duplicate_warning:
            warnings.warn(self.near_duplicate_warning, NearDuplicateWarning, stacklevel=_user_stacklevel())

    @classmethod
    def random(
        cls,
        texts: Sequence[Record],
        *,
        n_members: int,
        n_non_members: int,
        n_validation: int = 0,
        n_test: int = 0,
        seed: int = 0,
        source: str = "custom",
        near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD,
    ) -> MembershipSplit:
        """Draw disjoint sides uniformly at random (numpy `default_rng(seed)`) from `texts` (texts or records).

        The sides are cut in order from one seeded permutation, the test side last: adding a test side
        leaves the other three as they were drawn without it.
        """
        pool = distinct_texts(check_records(list(texts), f"{source} texts"))  # the first of texts equal up to spacing
        sizes = {
            "n_members": n_members,
            "n_non_members": n_non_members,
            "n_validation": n_validation,
            **({"n_test": n_test} if n_test else {}),
        }
        _check_sizes(sizes, len(pool), source)
        order = np.random.default_rng(seed).permutation(len(pool))[: sum(sizes.values())]
        drawn = [pool[i] for i in order]
        cut = n_members + n_non_members
        return cls(
            drawn[:n_members],
            drawn[n_members:cut],
            drawn[cut:cut + n_validation],
            drawn[cut + n_validation:],
            seed=seed,
            source=source,
            near_duplicate_threshold=near_duplicate_threshold,
        )

    @classmethod
    def from_texts(
        cls,
        members: Iterable[Record],
        non_members: Iterable[Record],
        validation: Iterable[Record] = (),
        test: Iterable[Record] = (),
        *,
        seed: int | None = None,
        source: str = "custom",
        near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD,
    ) -> MembershipSplit:
        """Build a split from sides the user chose (texts or records; `from_records` is the same)."""
        return cls(
            list(members),
            list(non_members),
            list(validation),
            list(test),
            seed=seed,
            source=source,
            near_duplicate_threshold=near_duplicate_threshold,
        )

    from_records = from_texts

    @property
    def format(self) -> str:
        """The split's record format: "text", "prompt_completion" or "messages" (`privft.data.records`)."""
        return record_format(self.members[0]) or "text"

    def labels_and_texts(self) -> tuple[list[Record], np.ndarray]:
        """Return members then non-members with labels 1 (member) and 0; validation is left out."""
        labels = np.concatenate([np.ones(len(self.members)), np.zeros(len(self.non_members))])
        return self.members + self.non_members, labels.astype(np.int64)

    def sides(self) -> tuple[str, ...]:
        """The sides this split records: members, non-members and validation, and the test side when it has texts."""
        return tuple(side for side in SIDES if side not in OPTIONAL_SIDES or getattr(self, side))

    def counts(self) -> dict[str, int]:
        """Return the number of texts on each side (`sides`)."""
        return {side: len(getattr(self, side)) for side in self.sides()}

    def to_manifest(self) -> dict[str, Any]:
        """Return the JSON-ready manifest: settings, counts and id/sha256/text records per side."""
        manifest: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "seed": self.seed,
            "source": self.source,
            "near_duplicate_threshold": self.near_duplicate_threshold,
            "counts": self.counts(),
        }
        for side in self.sides():
            manifest[side] = [
                _manifest_entry(record_id(side, i), record) for i, record in enumerate(getattr(self, side))
            ]
        return manifest

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the manifest as JSON atomically (temp file + `os.replace`) and return its path."""
        return atomic_write_text(path, json.dumps(self.to_manifest(), ensure_ascii=False, indent=1))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MembershipSplit:
        """Read a manifest written by `save`, verifying every record's sha256."""
        path = Path(path)
        manifest = _read_manifest(path)
        sides = {side: _verified_texts(manifest, side, path) for side in SIDES}
        threshold = manifest.get("near_duplicate_threshold", NEAR_DUPLICATE_THRESHOLD)
        return cls(
            **sides,
            seed=manifest.get("seed"),
            source=manifest.get("source", "custom"),
            near_duplicate_threshold=threshold,
        )

    def __repr__(self) -> str:
        """Summarise the split without printing its texts."""
        sizes = ", ".join(f"{side}={n}" for side, n in self.counts().items())
        return (
            f"MembershipSplit(source={self.source!r}, seed={self.seed}, {sizes}, "
            f"near_duplicates={len(self.near_duplicates)})"
        )

    def _where(self, side: str) -> str:
        """Name one side of this split in error messages."""
        return f"{self.source!r} split, {side}"

    def _check_settings(self) -> None:
        """Require at least 2 members and 2 non-members and a threshold in (0, 1]."""
        for side in ("members", "non_members"):
            if len(getattr(self, side)) < MIN_PER_SIDE:
                found = len(getattr(self, side)) or "no"
                raise DataError(
                    f"{self._where(side)}: {found} texts; a membership split needs at least {MIN_PER_SIDE} "
                    "members and non-members (an audit's AUC and blind baseline need both classes twice)"
                )
        if not 0 < self.near_duplicate_threshold <= 1:
            raise DataError(
                f"{self.source!r} split: near_duplicate_threshold={self.near_duplicate_threshold} "
                "is outside (0, 1]; pass a fraction such as 0.8"
            )

    def _check_disjoint(self) -> None:
        """Raise `DataError` if a text appears twice, on one side or across sides (up to Unicode form and spacing)."""
        repeats = self._repeats()
        if repeats:
            side, i, other, j = repeats[0]
            where = "on more than one side" if side != other else "twice on one side"
            raise DataError(
                f"{self.source!r} split: {len(repeats)} text(s) repeat an earlier one, e.g. {side}[{i}] and "
                f"{other}[{j}] are the same text {where} {_preview(getattr(self, other)[j])}; keep one copy "
                "on one side (MembershipSplit.random draws distinct texts on disjoint sides)"
            )

    def _repeats(self) -> list[tuple[str, int, str, int]]:
        """(side, index, side, index) of each text whose identity was already seen, on its side or an earlier one."""
        first_seen: dict[str, tuple[str, int]] = {}
        repeats: list[tuple[str, int, str, int]] = []
        for side in SIDES:
            for j, text in enumerate(getattr(self, side)):
                key = record_identity(text)
                if key in first_seen:
                    repeats.append((*first_seen[key], side, j))
                else:
                    first_seen[key] = (side, j)
        return repeats

    def _find_near_duplicates(self) -> list[NearDuplicate]:
        """Find non-member, validation and test texts whose 13-grams are mostly found in the members."""
        index = index_members([record_content(r) for r in self.members])
        return [
            NearDuplicate(side, *hit)
            for side in SIDES[1:]
            for hit in near_duplicates(index, [record_content(r) for r in getattr(self, side)],
                                       self.near_duplicate_threshold)
        ]

    @property
    def near_duplicate_warning(self) -> str | None:
        """What the near-duplicates across sides mean for an audit, or None when there are none."""
        if not self.near_duplicates:
            return None
        pairs = ", ".join(
            f"{d.side}[{d.index}]~members[{d.member_index}] ({d.overlap:.0%})"
            for d in self.near_duplicates[:SHOWN_PAIRS]
        )
        more = "" if len(self.near_duplicates) <= SHOWN_PAIRS else ", ..."
        return (
            f"{self.source!r} split: {len(self.near_duplicates)} non-member/validation text(s) "
            f"share >= {self.near_duplicate_threshold:.0%} of their {NGRAM_WORDS}-word n-grams "
            f"with the members: {pairs}{more}. An audit would score them like members; drop them "
            "(see .near_duplicates) or re-draw the split."
        )


def record_id(side: str, index: int) -> str:
    """Return the stable manifest id of the `index`-th text on `side`, e.g. 'member-00012'."""
    return f"{ID_PREFIXES[side]}-{index:05d}"


def text_sha256(text: Record) -> str:
    """Return the hex sha256 of `text` encoded as UTF-8; of a record, of its canonical JSON (`record_json`)."""
    return hashlib.sha256((text if isinstance(text, str) else record_json(text)).encode("utf-8")).hexdigest()


def _manifest_entry(entry_id: str, record: Record) -> dict[str, Any]:
    """One manifest entry: id, sha256 and the text, or the record under "record"."""
    return {"id": entry_id, "sha256": text_sha256(record), ("text" if isinstance(record, str) else "record"): record}


def _check_sizes(sizes: dict[str, int], available: int, source: str) -> None:
    """Require non-negative sizes (at least `MIN_PER_SIDE` on both audit sides) that fit in `available` texts."""
    for name, n in sizes.items():
        if n < (0 if name in ("n_validation", "n_test") else MIN_PER_SIDE):
            raise DataError(f"{source!r} split: {name}={n} is too small; an audit needs at least {MIN_PER_SIDE} "
                            "members and non-members")
    needed = sum(sizes.values())
    if needed > available:
        asked = " + ".join(f"{n} {name.removeprefix('n_')}" for name, n in sizes.items())
        raise DataError(
            f"{source!r} split: asked for {asked} = {needed} texts but only {available} distinct "
            "texts are available; lower the counts or supply more texts"
        )


def _read_manifest(path: Path) -> dict[str, Any]:
    """Parse a manifest file and check its format and version."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise DataError(
            f"{path}: cannot read the split manifest ({err}); re-create it with save()"
        ) from err
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise DataError(f"{path}: not a membership-split manifest (no format {MANIFEST_FORMAT!r})")
    if manifest.get("version") != MANIFEST_VERSION:
        raise DataError(
            f"{path}: manifest version {manifest.get('version')!r} is not supported "
            f"(expected {MANIFEST_VERSION}); re-create it with this privft"
        )
    return manifest


def _verified_texts(manifest: dict[str, Any], side: str, path: Path) -> list[Record]:
    """Return one side's texts after checking ids, sha256 digests and the recorded count."""
    if side in OPTIONAL_SIDES and side not in manifest and side not in manifest.get("counts", {}):
        return []  # saved without it: the split has none
    records = manifest.get(side, [])
    expected = manifest.get("counts", {}).get(side)
    if expected != len(records):
        raise DataError(
            f"{path}: {side} has {len(records)} records but counts says {expected}; "
            "records were added or removed by hand, re-create the manifest with save()"
        )
    texts = []
    for i, record in enumerate(records):
        want_id = record_id(side, i)
        if not isinstance(record, dict) or record.get("id") != want_id:
            raise DataError(
                f"{path}: {side} record {i} should have id {want_id!r}; re-create the manifest"
            )
        text = record.get("text", record.get("record"))
        if not isinstance(text, (str, dict)) or text_sha256(text) != record.get("sha256"):
            raise DataError(
                f"{path}: record {want_id} does not match its sha256 (the text was edited); "
                "restore the original text or re-create the split and save() it"
            )
        texts.append(text)
    return texts


def _user_stacklevel() -> int:
    """Return the `warnings.warn` stacklevel of the first caller outside `privft.data`."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(f"{__package__}."):
        level, frame = level + 1, frame.f_back
    return level


def _preview(text: Record) -> str:
    """Return a truncated repr of a record's content for an error message."""
    text = record_content(text)
    return repr(text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 3] + "...")
