"""Secret Sharer canaries (Carlini et al. 2019): random secrets in a template, inserted k times.

Canaries join training data of any of trl's formats (`CanaryPlan.format`): as texts, or as
conversations of a fixed user prompt whose reply holds the secret (or, for prompt-side
exposure, whose user turn holds it).

A `CanaryPlan` is the ground truth of a canary run: the template, the secret alphabet and
length, the seeded secrets, how often each is inserted and how many random reference secrets
the exposure is measured against. Everything random comes from the plan's seed, on separate
streams, so the same plan always yields the same secrets, positions and references.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from privft.data.errors import DataError
from privft.data.loaders import check_texts
from privft.data.records import Record, check_records, is_conversational, record_content, record_format

PLACEHOLDER = "{secret}"
MIN_ALTERNATIVES = 10  # fewer reference secrets make both exposure estimates meaningless
MIN_ONE_RUN_CANARIES = 10  # fewer bound ε by at most ~1 even if every guess is right (docs/epsilon-audit.md)
_SECRETS_STREAM, _POSITIONS_STREAM, _REFERENCES_STREAM, _INCLUSION_STREAM = 0, 1, 2, 3
# The records a plan's canaries join: trl's formats, with prompt–completion as plain strings apart.
CANARY_FORMATS = ("text", "prompt_completion", "messages", "prompt_completion_strings")
SECRET_IN = ("completion", "prompt")  # the turn of a conversational canary that holds the secret
# recorded before these existed, a plan rebuilds with their defaults
_ADDED_FIELDS = ("one_run", "format", "prompt", "reply", "secret_in")


class CanaryError(DataError):
    """A canary plan or its use is invalid; the message names the setting and the fix."""


@dataclass(frozen=True)
class CanaryPlan:
    """Canaries to insert into a fine-tuning run, and the ground truth to measure their exposure.

    Each canary is `template` with `{secret}` replaced by a secret of `secret_length` characters
    from `alphabet`. `secrets` is drawn from `seed` when left empty (distinct, uniform over the
    secret space); pass it explicitly only to rebuild a recorded plan (see `from_dict`).
    `n_alternatives` reference secrets, drawn from the same space, are what exposure is
    measured against (`privft.callbacks.measure_exposure`). With `one_run`, each canary is
    inserted independently with probability ½ (drawn from the seed, `included()`) and the others
    are never trained on: the controls of the one-run ε audit (`privft.epsilon_audit`).
    With a conversational `format` (`canary_format(records)` names the records'), each canary is
    a record: the user turn `prompt` and the reply `template` with the secret, or with
    `secret_in="prompt"` the user turn `template` with the secret and the reply `reply`.
    """

    template: str = "the access code is {secret}"
    alphabet: str = "0123456789"
    secret_length: int = 6
    n_canaries: int = 10
    copies: int = 5
    n_alternatives: int = 1000
    seed: int = 0
    one_run: bool = False
    format: str = "text"
    prompt: str = "What is the access code?"
    reply: str = "Thank you, I have noted it."
    secret_in: str = "completion"
    secrets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Validate the settings, then draw the secrets from the seed or check the given ones."""
        self._check_settings()
        if self.secrets:
            object.__setattr__(self, "secrets", tuple(self.secrets))
            self._check_secrets()
        else:
            rng = self._rng(_SECRETS_STREAM)
            object.__setattr__(self, "secrets", tuple(self._draw(rng, self.n_canaries, frozenset())))

    @property
    def secret_space(self) -> int:
        """Number of possible secrets: len(alphabet) ** secret_length."""
        return len(self.alphabet) ** self.secret_length

    def text_for(self, secret: str) -> str:
        """The template with `secret` in place of `{secret}`."""
        return self.template.replace(PLACEHOLDER, secret)

    def canary_texts(self) -> list[str]:
        """The canary texts, one per secret, in the order of `secrets`."""
        return [self.text_for(secret) for secret in self.secrets]

    def record_for(self, secret: str) -> Record:
        """The canary holding `secret` as a record of the plan's format (a text: `text_for(secret)`)."""
        text = self.text_for(secret)
        if self.format == "text":
            return text
        user, assistant = (self.prompt, text) if self.secret_in == "completion" else (text, self.reply)
        if self.format == "prompt_completion_strings":
            return {"prompt": user + "\n", "completion": assistant}
        turns = [{"role": "user", "content": user}], [{"role": "assistant", "content": assistant}]
        return {"messages": turns[0] + turns[1]} if self.format == "messages" else \
            {"prompt": turns[0], "completion": turns[1]}

    def candidates(self) -> list[Record]:
        """The canaries' records, then the reference secrets' (same format), as exposure ranks them."""
        return [self.record_for(secret) for secret in (*self.secrets, *self.reference_secrets())]

    def reference_secrets(self) -> list[str]:
        """`n_alternatives` distinct seeded secrets that are none of the canaries' secrets."""
        return self._draw(self._rng(_REFERENCES_STREAM), self.n_alternatives, frozenset(self.secrets))

    def included(self) -> tuple[bool, ...]:
        """Per canary, whether it is inserted: all of them, or with `one_run` each with probability ½ from the seed."""
        if not self.one_run:
            return (True,) * self.n_canaries
        return tuple(bool(draw < 0.5) for draw in self._rng(_INCLUSION_STREAM).random(self.n_canaries))

    def insert(self, texts: Sequence[Record]) -> list[Record]:
        """Return `texts` (texts, or records of the plan's format) with each included canary added `copies` times
        at seeded random positions.

        The original texts keep their relative order; `check_room` refuses more canary texts than texts.
        """
        originals = self._training_records(texts)
        inserted = [self.record_for(secret) for secret, inside in zip(self.secrets, self.included()) if inside]
        if not inserted:
            raise CanaryError(f"CanaryPlan seed {self.seed} includes none of the {self.n_canaries} canaries in its "
                              "one-run draw; use more canaries or another seed")
        self.check_room(len(originals))
        copies = [text for text in inserted for _ in range(self.copies)]
        rng = self._rng(_POSITIONS_STREAM)
        total = len(originals) + len(copies)
        is_canary = np.zeros(total, dtype=bool)
        is_canary[rng.choice(total, size=len(copies), replace=False)] = True
        canaries = iter([copies[i] for i in rng.permutation(len(copies))])
        rest = iter(originals)
        return [next(canaries) if flag else next(rest) for flag in is_canary]

    def check_room(self, n_training: int,
                   fix: str = "Lower n_canaries or copies, or insert them into more training texts.") -> None:
        """Refuse more canary texts (included canaries × copies) than the `n_training` texts they join.

        The rule keeps canaries to at most half of a run; a one-run plan's inclusion draw depends on its seed and
        count alone, so this can run before any data or model loads. `fix` names the settings to change.
        """
        included = sum(self.included())
        if included * self.copies > n_training:
            raise CanaryError(f"canaries: {included * self.copies} canary texts ({included} canaries × {self.copies} "
                              f"copies) would join {n_training} training texts, but canaries may be at most half of "
                              f"a run. {fix}")

    def _training_records(self, texts: Sequence[Record]) -> list[Record]:
        """The training texts or records, checked, refused when their format is not the plan's."""
        found = canary_format(texts)
        if found is not None and found != self.format:
            raise CanaryError(f"CanaryPlan format={self.format!r} but the training data are {found} records; "
                              f"set format={found!r} (privft.data.canaries.canary_format(records) names it)")
        if self.format == "text":
            return check_texts(list(texts), "training texts for the canaries")
        return check_records(texts, "training records for the canaries")

    def check_absent(self, *text_sets: Iterable[Record]) -> None:
        """Raise `CanaryError` if a canary text occurs in any of `text_sets` (e.g. non-members, validation).

        A record is searched in its content (`privft.data.records.record_content`). Matching ignores
        case and collapses whitespace, so reformatted copies are found too.
        """
        canaries = [_normalize(text) for text in self.canary_texts()]
        hits = [
            (set_index, text_index, canary_index)
            for set_index, texts in enumerate(text_sets)
            for text_index, text in enumerate(_normalize(record_content(text)) for text in texts)
            for canary_index, canary in enumerate(canaries)
            if canary in text
        ]
        if hits:
            set_index, text_index, canary_index = hits[0]
            raise CanaryError(
                f"{len(hits)} canary occurrence(s) in texts that must not contain canaries, e.g. canary "
                f"{canary_index} ({self.canary_texts()[canary_index]!r}) in text set {set_index}, text "
                f"{text_index}; canaries may only be in the training texts. Remove those texts or draw "
                "a plan with another seed"
            )

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict for the run manifest, secrets included."""
        record = dataclasses.asdict(self)
        record["secrets"] = list(self.secrets)
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> CanaryPlan:
        """Rebuild a plan written by `to_dict`, keeping its recorded secrets."""
        names = {field.name for field in dataclasses.fields(cls)}
        missing, unknown = sorted(names - set(record) - set(_ADDED_FIELDS)), sorted(set(record) - names)
        if missing or unknown:
            raise CanaryError(
                f"Not a canary plan record: missing keys {missing}, unknown keys {unknown}; "
                "pass the dict written by CanaryPlan.to_dict()"
            )
        return cls(**{**record, "secrets": tuple(record["secrets"])})

    def _rng(self, stream: int) -> np.random.Generator:
        """An independent generator for one use of the seed."""
        return np.random.default_rng([self.seed, stream])

    def _draw(self, rng: np.random.Generator, count: int, exclude: frozenset[str]) -> list[str]:
        """`count` distinct uniform secrets not in `exclude`, by rejection of repeats."""
        symbols = np.array(list(self.alphabet))
        drawn: dict[str, None] = {}
        while len(drawn) < count:
            for row in symbols[rng.integers(len(symbols), size=(count, self.secret_length))]:
                secret = "".join(row)
                if secret not in exclude:
                    drawn.setdefault(secret)
        return list(drawn)[:count]

    def _check_settings(self) -> None:
        """Raise `CanaryError` on a setting that cannot give a meaningful canary run."""
        if self.template.count(PLACEHOLDER) != 1:
            raise CanaryError(
                f"CanaryPlan template {self.template!r} must contain {PLACEHOLDER} exactly once, "
                "e.g. 'the access code is {secret}'"
            )
        self._check_format()
        self._check_conversation()
        for name, least in (("n_canaries", 1), ("copies", 1), ("n_alternatives", MIN_ALTERNATIVES), ("seed", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < least:
                raise CanaryError(f"CanaryPlan {name}={value!r} must be an integer of at least {least}")
        if not isinstance(self.one_run, bool) or (self.one_run and self.n_canaries < MIN_ONE_RUN_CANARIES):
            raise CanaryError(f"CanaryPlan one_run={self.one_run!r} must be True or False, and True needs at least "
                              f"{MIN_ONE_RUN_CANARIES} canaries (n_canaries={self.n_canaries}); a strong bound needs "
                              "hundreds: see docs/epsilon-audit.md")
        needed = self.n_canaries + self.n_alternatives
        if self.secret_space < needed:
            raise CanaryError(
                f"CanaryPlan: the secret space has {self.secret_space} secrets ({self._space_origin()}) but "
                f"{self.n_canaries} canaries + {self.n_alternatives} reference secrets need {needed} distinct "
                "ones; lengthen the secret, widen the alphabet, or lower n_canaries or n_alternatives"
            )

    def _check_conversation(self) -> None:
        """Raise `CanaryError` unless the records' format, the secret's turn and the fixed turns make a canary."""
        if self.format not in CANARY_FORMATS or self.secret_in not in SECRET_IN:
            raise CanaryError(f"CanaryPlan format={self.format!r} and secret_in={self.secret_in!r} must be one of "
                              f"{CANARY_FORMATS} and one of {SECRET_IN}")
        if self.format == "text" and self.secret_in != "completion":
            raise CanaryError("CanaryPlan secret_in='prompt' needs conversational canaries (a format other than "
                              "'text'): a text has no prompt; leave secret_in='completion'")
        for name in ("prompt", "reply"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip() or PLACEHOLDER in value:
                raise CanaryError(f"CanaryPlan {name}={value!r} must be a non-empty text without {PLACEHOLDER}: "
                                  "the secret goes in the template")

    def _check_format(self) -> None:
        """Raise `CanaryError` unless the alphabet and secret length define a secret space."""
        if not self.alphabet or len(set(self.alphabet)) != len(self.alphabet):
            raise CanaryError(
                f"CanaryPlan alphabet {self.alphabet!r} must be non-empty with no repeated character, "
                "e.g. '0123456789'"
            )
        if not isinstance(self.secret_length, int) or self.secret_length < 1:
            raise CanaryError(f"CanaryPlan secret_length={self.secret_length!r} must be an integer of at least 1")

    def _space_origin(self) -> str:
        """Where the secret space's size comes from, for error messages."""
        return f"{len(self.alphabet)} symbols ^ length {self.secret_length}"

    def _check_secrets(self) -> None:
        """Raise `CanaryError` unless the given secrets fit the plan's count, alphabet and length."""
        if len(self.secrets) != self.n_canaries or len(set(self.secrets)) != len(self.secrets):
            raise CanaryError(
                f"CanaryPlan secrets: {len(self.secrets)} given ({len(set(self.secrets))} distinct) but "
                f"n_canaries={self.n_canaries}; pass n_canaries distinct secrets, or none to draw them"
            )
        symbols = set(self.alphabet)
        for secret in self.secrets:
            if not isinstance(secret, str) or len(secret) != self.secret_length or set(secret) - symbols:
                raise CanaryError(
                    f"CanaryPlan secret {secret!r} is not {self.secret_length} characters from "
                    f"{self.alphabet!r}; fix the secret or the plan's alphabet and secret_length"
                )


def canary_format(records: Sequence[Record]) -> str | None:
    """The `CanaryPlan.format` whose canaries join `records` ("text" when empty; None for no record format)."""
    if not records:
        return "text"
    found = record_format(records[0])
    return "prompt_completion_strings" if found == "prompt_completion" and not is_conversational(records[0]) \
        else found


def _normalize(text: str) -> str:
    """Case-folded text with runs of whitespace collapsed to one space."""
    return " ".join(text.casefold().split())
