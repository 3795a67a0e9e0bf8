"""PII canaries: realistic synthetic secrets (emails, phone numbers, card and account numbers, names).

Values come from small seeded generators over fixed name lists and digit patterns (numpy only,
no Faker: a recorded plan then reads the same under every library version). A `PIICanaryPlan`
is a `CanaryPlan` of one format: it plants, records and restores exactly like the digit
canaries, and its reference secrets are drawn from the same format, so the exposure rank is
the rank of the true value among candidates of its own kind.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from privft.data.canaries import CanaryError, CanaryPlan
from privft.data.designed_canaries import DesignedCanaryPlan

FIRST_NAMES = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
    "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Carlos", "Karen",
    "Daniel", "Lisa", "Matthew", "Nancy", "Anthony", "Sandra", "Mark", "Ashley", "Steven", "Emily",
    "Andrew", "Donna", "Joshua", "Michelle", "Kevin", "Carol", "Brian", "Amanda", "Priya", "Melissa",
    "Ahmed", "Deborah", "Wei", "Stephanie", "Luca", "Rebecca", "Omar", "Laura", "Hiroshi", "Fatima",
)
LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson", "Martin",
    "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson",
    "Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores",
    "Green", "Adams", "Nelson", "Baker", "Hall", "Rivera", "Campbell", "Mitchell", "Patel", "Kowalski",
)
EMAIL_DOMAINS = ("gmail.com", "outlook.com", "yahoo.com", "proton.me", "icloud.com", "example.org")


def _digits(rng: np.random.Generator, count: int) -> str:
    return "".join(map(str, rng.integers(10, size=count)))


def luhn_check_digit(digits: str) -> str:
    """The digit that makes `digits` + it pass the Luhn checksum, as payment card numbers do."""
    total = 0
    for position, digit in enumerate(reversed(digits)):
        value = int(digit) * (2 if position % 2 == 0 else 1)
        total += value - 9 if value > 9 else value
    return str(-total % 10)


def _name(rng: np.random.Generator) -> str:
    return f"{FIRST_NAMES[rng.integers(len(FIRST_NAMES))]} {LAST_NAMES[rng.integers(len(LAST_NAMES))]}"


def _email(rng: np.random.Generator) -> str:
    return email_for(_name(rng), rng)


def email_for(name: str, rng: np.random.Generator) -> str:
    """An address for `name` as the email generator writes them: first.last, two digits, a common domain.

    Letters are folded to ASCII and other characters dropped, so "Zoë O'Hara-Lind" becomes zoe.oharalind.
    """
    first, last = (re.sub(r"[^a-z]", "", unicodedata.normalize("NFKD", part).lower()) for part in
                   (name.split()[0], name.split()[-1]))
    return f"{first}.{last}{_digits(rng, 2)}@{EMAIL_DOMAINS[rng.integers(len(EMAIL_DOMAINS))]}"


def _phone(rng: np.random.Generator) -> str:  # North American numbering: area and exchange codes start at 2
    area, exchange = (f"{rng.integers(2, 10)}{_digits(rng, 2)}" for _ in range(2))
    return f"+1 ({area}) {exchange}-{_digits(rng, 4)}"


def _card(rng: np.random.Generator) -> str:  # a 16-digit Visa-like number with a valid Luhn digit
    body = "4" + _digits(rng, 14)
    number = body + luhn_check_digit(body)
    return " ".join(number[i:i + 4] for i in range(0, 16, 4))


def _account(rng: np.random.Generator) -> str:  # a UK-style sort code and 8-digit account number
    code = _digits(rng, 6)
    return f"{code[:2]}-{code[2:4]}-{code[4:]} {_digits(rng, 8)}"


@dataclass(frozen=True)
class PIIFormat:
    """One kind of personal data: how a value is drawn, what every value looks like, and how many there are."""

    template: str  # the default canary text, with {secret} where the value goes
    pattern: str  # a regular expression every value of the kind matches in full
    space: int  # the number of distinct values the generator can draw
    draw: Callable[[np.random.Generator], str]


_NAMES = "|".join(FIRST_NAMES), "|".join(LAST_NAMES)
PII_FORMATS: dict[str, PIIFormat] = {
    "name": PIIFormat("the patient's full name is {secret}", rf"(?:{_NAMES[0]}) (?:{_NAMES[1]})",
                      len(FIRST_NAMES) * len(LAST_NAMES), _name),
    "email": PIIFormat("you can reach the customer at {secret}",
                       rf"(?:{_NAMES[0].lower()})\.(?:{_NAMES[1].lower()})\d\d@(?:{'|'.join(EMAIL_DOMAINS)})",
                       len(FIRST_NAMES) * len(LAST_NAMES) * 100 * len(EMAIL_DOMAINS), _email),
    "phone": PIIFormat("the customer's phone number is {secret}", r"\+1 \([2-9]\d\d\) [2-9]\d\d-\d{4}",
                       800 * 800 * 10**4, _phone),
    "card": PIIFormat("the card number on file is {secret}", r"4\d{3} \d{4} \d{4} \d{4}", 10**14, _card),
    "account": PIIFormat("the bank account is {secret}", r"\d\d-\d\d-\d\d \d{8}", 10**14, _account),
}


@dataclass(frozen=True)
class PIICanaryPlan(CanaryPlan):
    """Canaries whose secrets are realistic personal data of one `kind` (a key of `PII_FORMATS`).

    `template` defaults to the kind's ("the card number on file is {secret}"); `alphabet` and
    `secret_length` do not apply (the format decides) and must stay empty. Everything else
    (copies, references, seeds, insertion, the manifest record) is `CanaryPlan`'s.
    """

    template: str = ""
    alphabet: str = ""
    secret_length: int = 0
    kind: str = "email"

    def __post_init__(self) -> None:
        """Fill in the kind's template, then validate and draw as `CanaryPlan` does."""
        if self.kind not in PII_FORMATS:
            raise CanaryError(f"PIICanaryPlan kind={self.kind!r} is not one of {sorted(PII_FORMATS)}")
        if not self.template:
            object.__setattr__(self, "template", PII_FORMATS[self.kind].template)
        super().__post_init__()

    @property
    def secret_space(self) -> int:
        """Number of distinct values the kind's generator can draw."""
        return PII_FORMATS[self.kind].space

    def _draw(self, rng: np.random.Generator, count: int, exclude: frozenset[str]) -> list[str]:
        """`count` distinct values of the kind, none in `exclude`."""
        drawn: dict[str, None] = {}
        draw = PII_FORMATS[self.kind].draw
        while len(drawn) < count:
            value = draw(rng)
            if value not in exclude:
                drawn.setdefault(value)
        return list(drawn)

    def _check_format(self) -> None:
        """Refuse an alphabet or secret length: the kind's format decides what a secret looks like."""
        if self.alphabet or self.secret_length:
            raise CanaryError(f"PIICanaryPlan: alphabet={self.alphabet!r} and secret_length={self.secret_length} "
                              f"do not apply to PII canaries (the {self.kind!r} format decides); leave them unset")

    def _space_origin(self) -> str:
        """Where the secret space's size comes from, for error messages."""
        return f"the {self.kind!r} generator's distinct values"

    def _check_secrets(self) -> None:
        """Raise `CanaryError` unless the given secrets are n_canaries distinct values of the kind's format."""
        if len(self.secrets) != self.n_canaries or len(set(self.secrets)) != len(self.secrets):
            raise CanaryError(f"PIICanaryPlan secrets: {len(self.secrets)} given ({len(set(self.secrets))} distinct) "
                              f"but n_canaries={self.n_canaries}; pass n_canaries distinct values, or none to draw")
        pattern = re.compile(PII_FORMATS[self.kind].pattern)
        for secret in self.secrets:
            if not isinstance(secret, str) or not pattern.fullmatch(secret):
                raise CanaryError(f"PIICanaryPlan secret {secret!r} is not a {self.kind!r} value; fix the secret "
                                  "or the plan's kind")


def plan_from_dict(record: Mapping[str, Any]) -> CanaryPlan:
    """Rebuild a digit, PII or designed canary plan from its `to_dict()` record (one carries `kind` or `design`)."""
    if "design" in record:
        return DesignedCanaryPlan.from_dict(record)
    return PIICanaryPlan.from_dict(record) if "kind" in record else CanaryPlan.from_dict(record)
