"""When SOFT selects and by which rule: the one definition of its schedule, shared by config, API and callback."""

from __future__ import annotations

from dataclasses import dataclass

from privft.defend.rules import check_schedule, get_rule

LOSS_SOURCES = ("eval", "training")


def check_loss_source(loss_source: str) -> str:
    """`loss_source` if it is one of LOSS_SOURCES, else a ValueError saying what each means."""
    if loss_source not in LOSS_SOURCES:
        raise ValueError(f"loss_source={loss_source!r} must be 'eval' (re-score the texts in eval mode at each "
                         "selection, as the paper) or 'training' (reuse the training passes' per-sample losses).")
    return loss_source


@dataclass(frozen=True)
class SoftSchedule:
    """SOFT's selection schedule: the rule, its share, the warm-up, whether selections accumulate, the loss source.

    `rule` names a registered `privft.defend.rules.SelectionRule` (``paper``, ``release``, the
    controls ``all`` and ``all-after-warmup``). `select_ratio` is the release rule's share (None:
    its default, 0.5); `warmup_epochs` the epochs trained on originals before the first selection
    (None: the rule's default); `cumulative` ORs each selection into the previous mask;
    `loss_source` is ``"eval"`` (re-score in eval mode, as the paper) or ``"training"`` (reuse the
    training passes' per-sample losses). The YAML's ``soft:`` section, `prepare_soft` and
    `SelectiveObfuscationCallback` all take these settings from here.
    """

    rule: str = "paper"
    select_ratio: float | None = None
    warmup_epochs: int | None = None
    cumulative: bool = True
    loss_source: str = "eval"

    def __post_init__(self) -> None:
        """Refuse an unknown rule or loss source, a share the rule does not take, a negative warm-up."""
        check_schedule(self.rule, self.select_ratio, self.warmup_epochs)
        check_loss_source(self.loss_source)

    @property
    def epochs_before_selection(self) -> int:
        """The warm-up epochs: `warmup_epochs`, else the rule's default."""
        default = get_rule(self.rule).default_warmup_epochs
        return default if self.warmup_epochs is None else self.warmup_epochs
