"""The report.json and dp.json fields the release gate reads, with their types, checked before anything is judged.

A field of the wrong type, or a required one missing, raises `MalformedReportError` naming the file
and the field (e.g. `attacks.loss.tpr_at_fpr[0].max_fpr`); `privft gate` exits 2, "cannot judge", on
it, where a traceback would exit 1 and read as a failed model. A section left out or null is "not
measured" and judged as such; inside a section that is there, the fields privft always writes are
required.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class MalformedReportError(ValueError):
    """A report.json or dp.json field the gate reads is missing or of the wrong type."""


@dataclass(frozen=True)
class Leaf:
    """A JSON value the gate reads: what it must be, in words and as a test."""

    name: str
    accepts: Callable[[Any], bool]


@dataclass(frozen=True)
class Required:
    """A field that must be present, and not null, whenever the object holding it is."""

    shape: Any


@dataclass(frozen=True)
class Each:
    """An object whose every value, whatever its key, has `shape` (e.g. the attacks, by name)."""

    shape: Any


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


NUMBER = Leaf("a number", _is_number)
COUNT = Leaf("a whole number ≥ 0", lambda value: _is_number(value) and isinstance(value, int) and value >= 0)
FLAG = Leaf("true or false", lambda value: isinstance(value, bool))
TEXT = Leaf("a string", lambda value: isinstance(value, str))

AUC = {"auc": Required(NUMBER), "ci_low": Required(NUMBER), "ci_high": Required(NUMBER),
       "n_members": Required(COUNT), "n_non_members": Required(COUNT)}
TPR = {"max_fpr": Required(NUMBER), "tpr": NUMBER, "true_positives": COUNT, "false_positives": COUNT,
       "n_members": Required(COUNT), "n_non_members": Required(COUNT), "warning": TEXT}
GREEDY_GROUP = {"n_texts": COUNT, "n_long_enough": COUNT, "n_decoded": Required(COUNT), "exact": COUNT,
                "approximate": Required(COUNT)}
SAMPLED_GROUP = {"n_texts": COUNT, "n_long_enough": COUNT, "at_least_once": Each(NUMBER)}
EXTRACTION = {"greedy": {"prefix_length": COUNT, "suffix_length": COUNT,
                         "summary": {"members": GREEDY_GROUP, "non_members": GREEDY_GROUP}},
              "probabilistic": [{"prefix_length": COUNT, "suffix_length": COUNT,
                                 "summary": {"members": SAMPLED_GROUP, "non_members": SAMPLED_GROUP}}],
              "canaries": [{"greedy": FLAG, "beam": FLAG}]}
ONE_RUN = {"epsilon_lower_bound": NUMBER, "accountant_epsilon": NUMBER, "copies": COUNT,
           "fdp": {"epsilon_lower_bound": NUMBER}}
"""A one-run ε audit (`privft.callbacks.one_run.one_run_entry`): black-box canaries, or DP-LoRA's gradient canaries."""
DP = {"epsilon": Required(NUMBER), "delta": Required(NUMBER), "n_examples": COUNT, "max_multiplicity": COUNT,
      "group_epsilon": NUMBER, "group_delta": NUMBER, "accountant": TEXT}
"""dp.json (`DPLoraEngine.summary`), or report.json's `training.dp`."""
REPORT = {"split": Required({"n_members": COUNT, "n_non_members": COUNT}),
          "attacks": Required(Each(Required({"auc": AUC, "tpr_at_fpr": [TPR]}))),
          "blind_baseline": {"auc": AUC}, "distribution_shift": FLAG, "training_steps": COUNT,
          "canary_exposure": {"max_exposure": Required(NUMBER), "mean_exposure": Required(NUMBER),
                              "max_measurable": NUMBER},
          "extraction": EXTRACTION,
          "epsilon_audit": ONE_RUN, "gradient_epsilon_audit": ONE_RUN,
          "training": {"n_training_texts": COUNT, "dp": DP}}
"""report.json, as far as the gate reads it."""


def check_shape(value: Any, shape: Any, file: str, where: str = "") -> None:
    """Raise `MalformedReportError`, naming `file` and the field, where `value` (JSON data) does not have `shape`."""
    if isinstance(shape, Required):
        if value is None:
            raise _malformed(file, where, "is missing (or null)")
        shape = shape.shape
    if value is None:
        return
    if isinstance(shape, Leaf):
        accepted, expected = shape.accepts(value), shape.name
    elif isinstance(shape, list):
        accepted, expected = isinstance(value, list), "a list"
    else:
        accepted, expected = isinstance(value, Mapping), "an object (key: value)"
    if not accepted:
        raise _malformed(file, where, f"is {reprlib.repr(value)}, not {expected}")
    if isinstance(shape, list):
        for index, item in enumerate(value):
            check_shape(item, Required(shape[0]), file, f"{where}[{index}]")
    elif isinstance(shape, Each):
        for key, item in value.items():
            check_shape(item, shape.shape, file, f"{where}.{key}" if where else str(key))
    elif isinstance(shape, dict):
        for key, inner in shape.items():
            check_shape(value.get(key), inner, file, f"{where}.{key}" if where else key)


def _malformed(file: str, where: str, problem: str) -> MalformedReportError:
    """The error for field `where` of `file` (the whole file when `where` is empty)."""
    field = f"field {where}" if where else "the whole file"
    return MalformedReportError(f"{file}: {field} {problem}, so the gate cannot judge it: rerun the audit (or the "
                                "training run) that wrote it, or correct the field.")
