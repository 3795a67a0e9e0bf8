"""SOFT selection rules as an extension point: which samples to obfuscate at each selection, by name.

A rule is one class: subclass `SelectionRule`, give it a `name`, and it is registered (the
callback, the YAML's ``soft.rule`` and ``privft compare`` then accept that name). Rules decide
from per-sample losses alone (`privft.defend.selection` holds the pure maths); the callback
scores, keeps the cumulative mask and logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from privft.defend.selection import Mask, check_select_ratio, paper_rule, release_rule

RULES: dict[str, type[SelectionRule]] = {}
DEFAULT_SELECT_RATIO = 0.5


@dataclass(frozen=True)
class Selection:
    """A rule's decision: the mask over the scored samples, and the threshold if the rule has one."""

    mask: Mask
    tau: float | None = None


class SelectionRule:
    """Decides, from the losses of the samples still open, which of them to obfuscate from this epoch on.

    Class attributes say what the rule reads, so the callback scores only what it needs:
    `needs_validation` (held-out texts whose losses set a threshold), `takes_select_ratio`,
    and `default_warmup_epochs` (epochs on the original texts before the first selection).
    """

    name: ClassVar[str]
    default_warmup_epochs: ClassVar[int] = 0
    needs_validation: ClassVar[bool] = False
    takes_select_ratio: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls, "name", None):
            RULES[cls.name] = cls

    def __init__(self, select_ratio: float | None = None) -> None:
        if select_ratio is not None and not self.takes_select_ratio:
            takers = sorted(name for name, rule in RULES.items() if rule.takes_select_ratio)
            raise ValueError(f"select_ratio applies to rules {takers} only; rule {self.name!r} takes none.")
        self.select_ratio = (check_select_ratio(DEFAULT_SELECT_RATIO if select_ratio is None else select_ratio)
                             if self.takes_select_ratio else None)

    def needs_losses(self, selection_index: int) -> bool:
        """Whether selection number `selection_index` (0 = first) reads the samples' losses."""
        return True

    def select(self, n_open: int, losses: np.ndarray | None, validation_losses: np.ndarray | None,
               selection_index: int) -> Selection:
        """Which of the `n_open` samples not yet obfuscated to obfuscate now.

        `losses` holds their mean NLLs when `needs_losses(selection_index)`, else None;
        `validation_losses` those of the held-out texts when the rule `needs_validation`.
        """
        raise NotImplementedError


def check_schedule(rule: str | None, select_ratio: float | None, warmup_epochs: int | None) -> None:
    """Refuse an unknown rule, a `select_ratio` the rule does not take or outside (0, 1], and a negative warm-up.

    `rule=None` (SOFT off in a config) checks the values alone.
    """
    if rule is not None:
        get_rule(rule)(select_ratio=select_ratio)
    elif select_ratio is not None:
        check_select_ratio(select_ratio)
    if warmup_epochs is not None and (isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, int)
                                      or warmup_epochs < 0):
        raise ValueError(f"warmup_epochs={warmup_epochs!r} must be an integer >= 0 (epochs trained on the "
                         "original texts before the first selection).")


def get_rule(name: str) -> type[SelectionRule]:
    """The registered rule `name`, or a ValueError listing the registered ones."""
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"rule={name!r} is not one of {sorted(RULES)}; a new rule is a SelectionRule subclass "
                         "with that name (privft.defend.rules).") from None


class PaperRule(SelectionRule):
    """The paper's validation-threshold rule: after a warm-up epoch, select samples with loss < mean validation loss."""

    name = "paper"
    default_warmup_epochs = 1
    needs_validation = True

    def select(self, n_open: int, losses: np.ndarray | None, validation_losses: np.ndarray | None,
               selection_index: int) -> Selection:
        mask, tau = paper_rule(losses, validation_losses)
        return Selection(mask, tau)


class ReleaseRule(SelectionRule):
    """The released code's schedule: the lowest-loss `select_ratio` share first, every sample afterwards."""

    name = "release"
    takes_select_ratio = True

    def needs_losses(self, selection_index: int) -> bool:
        return selection_index == 0

    def select(self, n_open: int, losses: np.ndarray | None, validation_losses: np.ndarray | None,
               selection_index: int) -> Selection:
        if selection_index > 0:
            return Selection(np.ones(n_open, dtype=bool))
        return Selection(release_rule(losses, self.select_ratio, selection_index))


class AllRule(SelectionRule):
    """Control without selectivity: every sample obfuscated from the first epoch (plain paraphrase training)."""

    name = "all"

    def needs_losses(self, selection_index: int) -> bool:
        return False

    def select(self, n_open: int, losses: np.ndarray | None, validation_losses: np.ndarray | None,
               selection_index: int) -> Selection:
        return Selection(np.ones(n_open, dtype=bool))


class AllAfterWarmupRule(AllRule):
    """Control: one warm-up epoch on the originals, then every sample obfuscated (the release's later epochs)."""

    name = "all-after-warmup"
    default_warmup_epochs = 1
