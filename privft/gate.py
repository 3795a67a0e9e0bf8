"""The release gate: an audit report judged against a policy of limits, with a verdict a CI can act on.

`check(report, policy)` reads a report (report.json, its folder, its dict or an `AuditReport`) and
DP-LoRA's `dp.json` beside it; it never loads a model. Every criterion is shown with its number,
its limit and pass / fail / not measured. A limit the policy sets on something the report did not
measure makes the verdict "cannot judge", as does an audit below the minimum counts or a blind
baseline above chance: a release cannot pass by being too small, or too shifted, to measure.

The report.json and dp.json fields read, with their types, are `privft.gate_input`'s `REPORT` and
`DP`: a section left out is "not measured"; a field of the wrong type, or one privft always writes
missing from its section, is refused before judging (`MalformedReportError`, "cannot judge"),
naming the file and the field. On every DP run the guarantee's δ (a repeated text's group δ) is
held below 1/N, N its training sequences, whatever `max_epsilon` asks. Beside a "cannot judge"
the verdict shows the strongest attack's AUC, its interval and TPR: measured, though not judged.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from privft.config import require, to_dict
from privft.gate_input import DP, REPORT, MalformedReportError, Required, check_shape
from privft.metrics import clopper_pearson
from privft.report import AuditReport, read_report, split_description

PASS, FAIL, NOT_MEASURED, NOT_APPLICABLE = "pass", "fail", "not measured", "not applicable"
CANNOT_JUDGE = "cannot judge"
EXIT_CODES = {PASS: 0, FAIL: 1, CANNOT_JUDGE: 2}
"""`privft gate`'s exit status per verdict."""


def _doc(text: str) -> dict[str, str]:
    """Field metadata: the comment `policy_yaml` writes above the key."""
    return {"doc": text}


@dataclass(frozen=True)
class GatePolicy:
    """Release criteria for one audit (`privft gate --policy`, or `gate:` in a `privft train` config).

    A limit left None (an empty mapping) is not asked; every limit set must be measured.
    """

    min_members: int = field(default=1000, metadata=_doc(
        "Fewest members the audit must have scored, or the gate cannot judge (an audit too small to measure "
        "anything must not pass)."))
    min_non_members: int = field(default=1000, metadata=_doc(
        "Fewest non-members the audit must have scored (1,000 resolve FPR 0.1 % with one false positive)."))
    max_blind_baseline_auc: float = field(default=0.55, metadata=_doc(
        "Highest AUC of the blind baseline (no model access) at which attack numbers still measure memorisation; "
        "above it, or when the report flags distribution shift, the gate refuses to judge."))
    max_tpr_at_fpr: dict[float, float] = field(default_factory=lambda: {0.01: 0.05, 0.001: 0.01}, metadata=_doc(
        "For each FPR ceiling (key), the highest TPR (value) of the strongest attack, judged on the upper end of its "
        "Clopper-Pearson interval, not the point estimate. Each ceiling must be among the audit's max_fprs."))
    confidence: float = field(default=0.95, metadata=_doc(
        "Confidence of the two-sided Clopper-Pearson intervals whose upper ends are judged (0.95: as report.json)."))
    max_canary_exposure: float | None = field(default=8.0, metadata=_doc(
        "Highest exposure (bits) of any planted canary; needs canaries. By chance alone the highest of n canaries "
        "reaches e bits with probability 1 - (1 - 2^-e)^n: 4 % at 8 bits for 10 canaries."))
    max_extraction_rate: float | None = field(default=None, metadata=_doc(
        "Highest share of members whose suffix greedy decoding reproduces (approximate match, k-extractability), "
        "judged on the upper Clopper-Pearson end; needs the audit's extraction."))
    max_sampled_extraction: dict[int, float] = field(default_factory=dict, metadata=_doc(
        "n sampled continuations: highest mean chance, over members, that a member's suffix appears among them "
        "(probabilistic extraction, at the worst prefix length); e.g. {100: 0.01}."))
    max_canaries_extracted: int | None = field(default=None, metadata=_doc(
        "Most canaries whose secret greedy or beam decoding from the template prefix yields; needs canary "
        "extraction."))
    max_epsilon: float | None = field(default=None, metadata=_doc(
        "Highest DP accountant epsilon (dp.json; the group epsilon of a text present several times). A model "
        "trained without DP fails it."))
    max_delta_times_n: float = field(default=1.0, metadata=_doc(
        "Checked on every DP run, whatever max_epsilon: its δ (the group δ of a text present several times) times N, "
        "its training sequences, must be below this. At δ ≥ 1/N publishing one random training sequence verbatim "
        "meets the guarantee, so 1 (δ < 1/N) is the loosest; 0.1 asks δ < 1/(10 N)."))
    require_epsilon_lower_bound: bool = field(default=False, metadata=_doc(
        "Require the one-run empirical epsilon lower bound on a DP run (canaries.one_run). Whether required or "
        "not, a measured bound above the accountant's epsilon fails: the guarantee would be contradicted."))

    def __post_init__(self) -> None:
        """Refuse limits no audit can be held to, naming the key."""
        for key in ("min_members", "min_non_members"):
            require(getattr(self, key) >= 2, key, getattr(self, key), "must be at least 2 (an audit needs both sides).")
        require(0.5 <= self.max_blind_baseline_auc <= 1, "max_blind_baseline_auc", self.max_blind_baseline_auc,
                "must be in [0.5, 1]; 0.55 allows the blind baseline's noise on a few hundred texts.")
        require(all(0 < fpr <= 1 and 0 <= tpr <= 1 for fpr, tpr in self.max_tpr_at_fpr.items()), "max_tpr_at_fpr",
                self.max_tpr_at_fpr, "must map FPR ceilings in (0, 1] to TPR limits in [0, 1], e.g. {0.01: 0.05}.")
        require(0 < self.confidence < 1, "confidence", self.confidence, "must be in (0, 1), e.g. 0.95.")
        for key in ("max_canary_exposure", "max_extraction_rate", "max_canaries_extracted"):
            value = getattr(self, key)
            require(value is None or value >= 0, key, value, "must be at least 0, or null to not check it.")
        require(self.max_extraction_rate is None or self.max_extraction_rate <= 1, "max_extraction_rate",
                self.max_extraction_rate, "must be a share in [0, 1].")
        require(all(n >= 1 and 0 <= limit <= 1 for n, limit in self.max_sampled_extraction.items()),
                "max_sampled_extraction", self.max_sampled_extraction,
                "must map sample counts (at least 1) to chances in [0, 1], e.g. {100: 0.01}.")
        require(self.max_epsilon is None or self.max_epsilon > 0, "max_epsilon", self.max_epsilon,
                "must be positive, or null to not check it.")
        require(0 < self.max_delta_times_n <= 1, "max_delta_times_n", self.max_delta_times_n,
                "must be in (0, 1]: above 1 it would pass a δ ≥ 1/N, a guarantee that means nothing.")


def policy_yaml(policy: GatePolicy) -> str:
    """The policy as YAML with each key's meaning commented above it; `load_yaml(GatePolicy, ...)` reads it back."""
    lines = ["# privft release gate: `privft gate REPORT --policy THIS_FILE`, or these keys under `gate:` in a",
             "# `privft train` config. A limit set to null (or {}) is not checked; a limit set on something the",
             "# report did not measure makes the verdict 'cannot judge'. Exit codes: 0 pass, 1 fail, 2 cannot judge.",
             ""]
    values = to_dict(policy)
    for item in fields(policy):
        lines += [f"# {line}" for line in textwrap.wrap(item.metadata["doc"], 98)]
        lines += [yaml.safe_dump({item.name: values[item.name]}, sort_keys=False, allow_unicode=True).rstrip(), ""]
    return "\n".join(lines)


@dataclass(frozen=True)
class Criterion:
    """One criterion as judged: its number, the limit it is held to, the result, and the counts behind it."""

    name: str
    value: float | None
    limit: float | None
    status: str  # PASS, FAIL, NOT_MEASURED or NOT_APPLICABLE
    evidence: str
    at_least: bool = False  # the limit is a minimum (counts), not a maximum
    precondition: bool = False  # when it does not pass the report cannot be judged, rather than failing
    strict: bool = False  # a number equal to the limit fails: it must be below it (or above, with at_least)

    def limit_text(self) -> str:
        """The limit as shown, e.g. '≤ 0.05', '< 0.0033' or '≥ 1,000'; '—' when there is none."""
        sign = ('>' if self.at_least else '<') if self.strict else ('≥' if self.at_least else '≤')
        return "—" if self.limit is None else f"{sign} {_number(self.limit)}"

    def row(self) -> str:
        """A Markdown table row: criterion, number, limit, result, evidence."""
        value = "—" if self.value is None else _number(self.value)
        return f"| {self.name} | {value} | {self.limit_text()} | {self.status} | {self.evidence} |"


def _number(value: float) -> str:
    """A number for the table: counts with thousands separators, rates to 4 significant digits."""
    if math.isinf(value):
        return "∞"
    return f"{int(value):,}" if float(value).is_integer() and abs(value) >= 1 else f"{value:.4g}"


def _judge(name: str, value: float | None, limit: float | None, evidence: str, *, at_least: bool = False,
           precondition: bool = False, strict: bool = False) -> Criterion:
    """A criterion whose status follows from its number and limit (not measured when there is no number)."""
    if value is None:
        status = NOT_MEASURED
    elif strict:
        status = PASS if (value > limit if at_least else value < limit) else FAIL
    else:
        status = PASS if (value >= limit if at_least else value <= limit) else FAIL
    return Criterion(name, value, limit, status, evidence, at_least, precondition, strict)


@dataclass(frozen=True)
class Verdict:
    """The gate's decision on one report: pass, fail or cannot judge, with every criterion behind it."""

    outcome: str
    criteria: tuple[Criterion, ...]
    source: str
    policy: GatePolicy
    strongest: str | None = None  # the strongest attack's AUC and TPR, shown beside a "cannot judge"

    @classmethod
    def of(cls, criteria: list[Criterion], source: str, policy: GatePolicy, strongest: str | None = None) -> Verdict:
        """Unmet preconditions first (cannot judge), then any failure, then any criterion not measured."""
        if any(c.precondition and c.status != PASS for c in criteria):
            outcome = CANNOT_JUDGE
        elif any(c.status == FAIL for c in criteria):
            outcome = FAIL
        elif any(c.status == NOT_MEASURED for c in criteria):
            outcome = CANNOT_JUDGE
        else:
            outcome = PASS
        return cls(outcome, tuple(criteria), source, policy, strongest)

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail, 2 cannot judge."""
        return EXIT_CODES[self.outcome]

    @property
    def deciding(self) -> list[Criterion]:
        """The criteria that decided a verdict other than pass."""
        if self.outcome == PASS:
            return []
        preconditions = [c for c in self.criteria if c.precondition and c.status != PASS]
        if preconditions:
            return preconditions
        failed = [c for c in self.criteria if c.status == FAIL]
        return failed or [c for c in self.criteria if c.status == NOT_MEASURED]

    def headline(self) -> str:
        """One line: the verdict and what decided it."""
        reasons = "; ".join(f"{c.name}: {c.status}" + ("" if c.value is None or c.limit is None else
                                                       f" ({_number(c.value)}, limit {c.limit_text()})")
                            for c in self.deciding)
        return f"**Release gate: {self.outcome.upper()}**" + (f" — {reasons}" if reasons else "")

    def to_markdown(self) -> str:
        """The headline (with the strongest attack's numbers when it cannot judge) and one row per criterion."""
        measured = [self.strongest, ""] if self.outcome == CANNOT_JUDGE and self.strongest else []
        return "\n".join([self.headline(), "", *measured, f"Judged: {self.source}.", "",
                          "| Criterion | Number | Limit | Result | Evidence |", "|---|---|---|---|---|",
                          *(c.row() for c in self.criteria)]) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: outcome, exit code, source, policy and criteria."""
        return {"outcome": self.outcome, "exit_code": self.exit_code, "source": self.source,
                "policy": to_dict(self.policy), "criteria": [asdict(c) for c in self.criteria],
                "strongest_attack": self.strongest}


def load_audit(report: AuditReport | Mapping[str, Any] | str | Path) -> tuple[dict[str, Any], dict | None, str]:
    """The report as a dict, the DP summary beside it (dp.json, else the report's training record), and its name.

    A report or dp.json the gate cannot read is refused with `MalformedReportError`, naming the file and the field.
    """
    dp = None
    if isinstance(report, AuditReport):
        data, source = report.to_dict(), f"audit of {report.model or 'an unnamed model'} ({report.created})"
        file = source
    elif isinstance(report, Mapping):
        data, source = dict(report), f"audit of {report.get('model') or 'an unnamed model'}"
        file = source
    else:
        folder = _report_folder(Path(report))
        file = str(folder / "report.json")
        try:
            data = read_report(folder)  # refuses a report.md or roc.png from another save
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise MalformedReportError(f"{file} is not an audit report (invalid JSON: {error}).") from None
        if (folder / "dp.json").is_file():
            dp = _read_dp(folder / "dp.json")
        source = file + (" and dp.json" if dp else "")
    check_shape(data, REPORT, file)
    return data, dp if dp is not None else (data.get("training") or {}).get("dp"), source


def _report_folder(path: Path) -> Path:
    """The folder of the report.json at `path` (the file, or its folder); another file is refused, not read as it."""
    if path.is_file() and path.name != "report.json":  # e.g. split.json: its folder's report.json is another file
        raise ValueError(f"{path} is not a report.json: expected the report.json that privft audit or privft train "
                         "wrote, or its run folder.")
    folder = path if path.is_dir() else path.parent
    if not path.exists() or not (folder / "report.json").is_file():
        raise FileNotFoundError(f"No audit report at {path}: give the report.json that privft audit or "
                                "privft train wrote, or its folder.")
    return folder


def _read_dp(path: Path) -> dict[str, Any]:
    """DP-LoRA's dp.json beside a report, its fields checked as the gate reads them."""
    try:
        dp = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise MalformedReportError(f"{path} is not valid JSON ({error}), so the gate cannot judge the DP guarantee "
                                   "it states: its write was interrupted or it was edited; rerun the training run "
                                   "that wrote it.") from None
    check_shape(dp, Required(DP), str(path))
    return dp


def check(report: AuditReport | Mapping[str, Any] | str | Path, policy: GatePolicy | None = None) -> Verdict:
    """Judge an audit report against `policy` (default `GatePolicy()`): every criterion, then the verdict."""
    policy = policy or GatePolicy()
    data, dp, source = load_audit(report)
    criteria = [*_count_criteria(data, policy), _blind_criterion(data, policy), *_tpr_criteria(data, policy)]
    if policy.max_canary_exposure is not None:
        criteria.append(_exposure_criterion(data, policy.max_canary_exposure))
    criteria += _extraction_criteria(data, policy)
    criteria += _epsilon_criteria(data, dp, policy)
    return Verdict.of(criteria, source, policy, strongest_attack(data))


def strongest_attack(data: Mapping[str, Any]) -> str | None:
    """The attack with the highest AUC, with its interval and its TPR at each FPR ceiling; None without attacks."""
    measured = {name: m for name, m in data["attacks"].items()
                if isinstance(m, Mapping) and isinstance((m.get("auc") or {}).get("auc"), (int, float))}
    if not measured:
        return None
    name, metrics = max(measured.items(), key=lambda item: item[1]["auc"]["auc"])
    auc = metrics["auc"]
    interval = f" [{auc['ci_low']:.3f}, {auc['ci_high']:.3f}]" if auc.get("ci_low") is not None else ""
    tprs = "".join(f"; TPR {_tpr_text(entry)}" for entry in metrics.get("tpr_at_fpr") or [])
    return f"Measured, not judged: the strongest attack, {name}, reaches AUC {auc['auc']:.3f}{interval}{tprs}."


def _tpr_text(entry: Mapping[str, Any]) -> str:
    """One TPR as shown: '0.950 (38/40 members) at FPR ≤ 1 %', or 'not estimable at FPR ≤ 0.1 %'."""
    ceiling = f"FPR ≤ {entry['max_fpr'] * 100:g} %"
    if entry.get("tpr") is None:
        return f"not estimable at {ceiling}"
    return f"{entry['tpr']:.3f} ({entry.get('true_positives', '?')}/{entry.get('n_members', '?')} members) at {ceiling}"


def _count_criteria(data: Mapping[str, Any], policy: GatePolicy) -> list[Criterion]:
    """The audit's size, and a model that was trained at all: what must hold before any number is judged."""
    split = data["split"]
    where = f"{split_description(split)}; no smaller audit is judged"
    found = [_judge("members audited", split.get("n_members"), policy.min_members, where, at_least=True,
                    precondition=True),
             _judge("non-members audited", split.get("n_non_members"), policy.min_non_members, where, at_least=True,
                    precondition=True)]
    if data.get("training_steps") == 0:  # audited by a training callback before any step: the base model
        found.append(_judge("optimizer steps before the audit", 0, 1, "the audit describes the model before "
                            "fine-tuning", at_least=True, precondition=True))
    return found


def _blind_criterion(data: Mapping[str, Any], policy: GatePolicy) -> Criterion:
    """The blind baseline near chance, or the gate refuses: attack numbers would measure distribution shift."""
    auc = (data.get("blind_baseline") or {}).get("auc") or {}
    name = "blind baseline AUC (no model access)"
    if "auc" not in auc:
        return _judge(name, None, policy.max_blind_baseline_auc, "the report has no blind baseline",
                      precondition=True)
    evidence = (f"95 % CI [{auc['ci_low']:.3f}, {auc['ci_high']:.3f}] on {auc['n_members']} vs "
                f"{auc['n_non_members']}; above the limit attack numbers measure distribution shift")
    shift = data.get("distribution_shift", False)
    if shift is None:  # too few texts for the baseline to give a verdict
        return Criterion(name, auc["auc"], policy.max_blind_baseline_auc, NOT_MEASURED,
                         evidence + "; too few texts for the baseline to rule a shift out", precondition=True)
    if shift:
        return Criterion(name, auc["auc"], policy.max_blind_baseline_auc, FAIL,
                         "the report flags DISTRIBUTION SHIFT: " + evidence, precondition=True)
    return _judge(name, auc["auc"], policy.max_blind_baseline_auc, evidence, precondition=True)


def _tpr_criteria(data: Mapping[str, Any], policy: GatePolicy) -> list[Criterion]:
    """Per FPR ceiling: the attack with the highest upper Clopper-Pearson bound on its TPR."""
    found = []
    for ceiling, limit in sorted(policy.max_tpr_at_fpr.items(), reverse=True):
        name = f"TPR @ FPR ≤ {ceiling * 100:g} %, strongest attack (upper {policy.confidence * 100:g} % bound)"
        entries = {attack: entry for attack, metrics in data["attacks"].items()
                   for entry in metrics.get("tpr_at_fpr") or [] if math.isclose(entry["max_fpr"], ceiling)}
        estimable = {a: e for a, e in entries.items() if None not in (e.get("true_positives"), e.get("tpr"))}
        bounds = {a: clopper_pearson(e["true_positives"], e["n_members"], policy.confidence)[1]
                  for a, e in estimable.items()}
        if not bounds:
            why = (next(iter(entries.values())).get("warning") if entries else
                   f"the audit did not report this ceiling: add {ceiling:g} to audit.max_fprs")
            found.append(_judge(name, None, limit, why))
            continue
        strongest = max(bounds, key=bounds.get)
        e = estimable[strongest]
        evidence = (f"{strongest}: {e['true_positives']}/{e['n_members']} members (point {e['tpr']:.4f}) at "
                    f"{e.get('false_positives', '?')}/{e['n_non_members']} non-members")
        criterion = _judge(name, bounds[strongest], limit, evidence)
        unknown = sorted(set(entries) - set(estimable))
        if unknown and criterion.status == PASS:  # one of them may be the strongest
            criterion = Criterion(name, bounds[strongest], limit, NOT_MEASURED,
                                  f"{evidence}; not estimable for {', '.join(unknown)}, which may be stronger")
        found.append(criterion)
    return found


def _exposure_criterion(data: Mapping[str, Any], limit: float) -> Criterion:
    """The highest canary exposure, not measured when the limit lies beyond what the alternatives resolve."""
    name = "canary exposure, highest canary (bits)"
    exposure = data.get("canary_exposure")
    if not exposure or exposure.get("max_exposure") is None:
        return _judge(name, None, limit, "no canaries were planted: set canaries.n_canaries (privft train) or "
                                         "pass a CanaryCallback to the audit callback")
    value, ceiling = exposure["max_exposure"], exposure.get("max_measurable") or math.inf
    evidence = (f"{exposure.get('n_canaries', '?')} canaries × {exposure.get('copies', '?')} copies, mean "
                f"{exposure.get('mean_exposure', math.nan):.2f} bits; measurable up to {ceiling:.2f} bits "
                f"({exposure.get('n_alternatives', '?')} alternatives)")
    if value >= ceiling - 1e-9 and limit >= ceiling:  # a canary ranked first: its exposure is ceiling or more
        return Criterion(name, value, limit, NOT_MEASURED, evidence + "; a canary ranks first, so the limit is "
                         "beyond what these alternatives resolve: raise canaries.n_alternatives")
    return _judge(name, value, limit, evidence)


def _extraction_criteria(data: Mapping[str, Any], policy: GatePolicy) -> list[Criterion]:
    """Greedy and probabilistic extraction of members, and canary extraction, from report.json's `extraction`."""
    extraction = data.get("extraction") or {}
    found = []
    if policy.max_extraction_rate is not None:
        name = f"greedy extraction, members (upper {policy.confidence * 100:g} % bound)"
        summary = (extraction.get("greedy") or {}).get("summary") or {}
        members, others = summary.get("members") or {}, summary.get("non_members") or {}
        if members.get("n_decoded"):
            upper = clopper_pearson(members["approximate"], members["n_decoded"], policy.confidence)[1]
            found.append(_judge(name, upper, policy.max_extraction_rate,
                                f"{members['approximate']}/{members['n_decoded']} decoded members match approximately "
                                f"({members.get('exact', '?')} exactly); non-members {others.get('approximate', '?')}"
                                f"/{others.get('n_decoded', '?')}"))
        else:
            found.append(_judge(name, None, policy.max_extraction_rate, _no_greedy_extraction(extraction)))
    for n, limit in sorted(policy.max_sampled_extraction.items()):
        name = f"sampled extraction in {n} samples, members (mean chance)"
        entries = extraction.get("probabilistic") or []
        measured = [(chance, entry) for entry in entries
                    if (chance := (_members(entry).get("at_least_once") or {}).get(str(n))) is not None]
        if not measured:
            found.append(_judge(name, None, limit, _no_sampled_extraction(entries, n)))
            continue
        chance, worst = max(measured, key=lambda m: m[0])
        control = (((worst["summary"].get("non_members") or {}).get("at_least_once") or {}).get(str(n)))
        found.append(_judge(name, chance, limit, f"worst of {len(measured)} prefix length(s): k = "
                                                 f"{worst.get('prefix_length', '?')}, over "
                                                 f"{_members(worst).get('n_long_enough', '?')} members; "
                                                 f"non-members {'?' if control is None else f'{control:.4g}'}"))
    if policy.max_canaries_extracted is not None:
        name = "canaries extracted (greedy or beam decoding)"
        canaries = extraction.get("canaries")
        if not canaries:
            found.append(_judge(name, None, policy.max_canaries_extracted, "the report has no canary extraction: "
                                "set audit.extraction and plant canaries (canaries.n_canaries)"))
        else:
            extracted = sum(bool(c.get("greedy") or c.get("beam")) for c in canaries)
            found.append(_judge(name, extracted, policy.max_canaries_extracted,
                                f"{extracted} of {len(canaries)} canaries' secrets decoded from their template prefix"))
    return found


def _members(entry: Mapping[str, Any]) -> Mapping[str, Any]:
    """The members' summary of one extraction entry; empty when it has none."""
    return (entry.get("summary") or {}).get("members") or {}


TOO_SHORT = ("none of the {} members has the {} tokens it reads, so none was measured: audit longer texts "
             "(data.max_words), or lower {}")


def _no_greedy_extraction(extraction: Mapping[str, Any]) -> str:
    """Why no member's greedy extraction was measured: no extraction, no greedy decoding, or no member long enough."""
    greedy = extraction.get("greedy")
    if not extraction:
        return "the report has no extraction: set audit.extraction"
    if not greedy:
        return "the audit's extraction ran without greedy decoding: set audit.extraction.greedy: true"
    read = f"{greedy.get('prefix_length', 'k')} + {greedy.get('suffix_length', 'm')}"
    return "greedy extraction ran, but " + TOO_SHORT.format(_members(greedy).get("n_texts", "?"), read,
                                                            "audit.extraction.greedy_prefix_length and suffix_length")


def _no_sampled_extraction(entries: list[Mapping[str, Any]], n: int) -> str:
    """Why no member's chance in `n` samples was measured: no extraction, n not asked for, or no member long enough."""
    if not entries:
        return "the report has no probabilistic extraction: set audit.extraction"
    if all(str(n) not in (_members(entry).get("at_least_once") or {}) for entry in entries):
        return f"n = {n} is not among audit.extraction.n_samples"
    lengths = " or ".join(f"{entry.get('prefix_length', 'k')} + {entry.get('suffix_length', 'm')}" for entry in entries)
    return "probabilistic extraction ran, but " + TOO_SHORT.format(
        _members(entries[0]).get("n_texts", "?"), lengths, "audit.extraction.prefix_lengths and suffix_length")


def _accountant_epsilon(data: Mapping[str, Any], dp: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """The ε a text is protected at (group ε for repeated texts), or ∞ when trained without DP; None if unknown."""
    if dp and dp.get("epsilon") is not None:
        epsilon, evidence = dp["epsilon"], (f"δ = {dp.get('delta', math.nan):.2g}, "
                                            f"{str(dp.get('accountant', '?')).upper()} accountant, per training "
                                            "sequence")
        copies, group = dp.get("max_multiplicity") or 1, dp.get("group_epsilon")
        if copies > 1 and group is not None and group > epsilon:
            epsilon, evidence = group, (f"group ε of a text present {copies} times (ε = {dp['epsilon']:.3g} per "
                                        f"sequence, δ = {dp.get('delta', math.nan):.2g})")
        return epsilon, evidence
    if isinstance(data.get("training"), Mapping):
        return math.inf, "trained without DP-SGD: no accountant guarantee"
    return None, "no dp.json beside the report and no training record: whether it was trained with DP is unknown"


def _delta_criterion(data: Mapping[str, Any], dp: Mapping[str, Any], policy: GatePolicy) -> Criterion:
    """A DP run's δ (a repeated text's group δ) below 1/N: at δ ≥ 1/N its guarantee means nothing, whatever ε."""
    n = dp.get("n_examples") or (data.get("training") or {}).get("n_training_texts")
    copies = dp.get("max_multiplicity") or 1
    grouped = copies > 1 and dp.get("group_delta") is not None
    which = (f"group δ of a text present {copies} times (δ = {dp['delta']:.2g} per sequence)" if grouped
             else "δ per training sequence")
    name = "DP accountant δ"
    if not n:
        return _judge(name, None, None, f"{which}; neither dp.json nor the training record gives N, the number of "
                                        "training sequences, to hold it below 1/N")
    return _judge(name, dp["group_delta"] if grouped else dp["delta"], policy.max_delta_times_n / n,
                  f"{which}, N = {n:,} training sequences: at δ ≥ 1/N publishing one random training sequence "
                  "verbatim meets the guarantee", strict=True)


def _one_run_bound(one_run: Mapping[str, Any]) -> tuple[float | None, str]:
    """The tighter of the one-run audit's lower bounds on ε, and which analysis gave it.

    Steinke et al.'s bound holds for any mechanism; the f-DP (Gaussian) bound of Mahloujifar et
    al. is tighter for DP-SGD, whose privacy is Gaussian-shaped, and is read at the run's δ, so it
    is used only for canaries of one copy (a canary of k copies is judged on its group guarantee).
    """
    steinke = one_run.get("epsilon_lower_bound")
    fdp = (one_run.get("fdp") or {}).get("epsilon_lower_bound") if (one_run.get("copies") or 1) == 1 else None
    if steinke is None or fdp is None:
        return steinke, "Steinke et al.'s analysis"
    if fdp > steinke:
        return fdp, f"the tighter analysis, f-DP (Gaussian; Steinke et al.'s, assumption-free: {steinke:.2f})"
    return steinke, f"the tighter analysis, Steinke et al.'s (f-DP: {fdp:.2f})"


def _epsilon_criteria(data: Mapping[str, Any], dp: Mapping[str, Any] | None, policy: GatePolicy) -> list[Criterion]:
    """δ below 1/N on a DP run, the accountant's ε against its limit, and the one-run lower bound against that ε."""
    found = [_delta_criterion(data, dp, policy)] if dp else []
    accountant, evidence = _accountant_epsilon(data, dp)
    if policy.max_epsilon is not None:
        found.append(_judge("DP accountant ε", accountant, policy.max_epsilon, evidence))
    one_run = data.get("epsilon_audit") or {}
    if one_run.get("accountant_epsilon") is not None:  # a canary fills `copies` sequences: its group guarantee
        against, evidence = one_run["accountant_epsilon"], (f"the accountant's ε for a canary of "
                                                            f"{one_run.get('copies', '?')} copies (group privacy)")
    elif one_run and accountant is None:
        against, evidence = math.inf, "no DP accountant in the training logs"
    else:
        against = accountant
    name = "empirical ε lower bound (one run) ≤ accountant ε"
    lower, analysis = _one_run_bound(one_run)
    if lower is not None:
        counts = (f"{one_run.get('n_correct', '?')}/{one_run.get('n_guesses', '?')} guesses right on "
                  f"{one_run.get('n_canaries', '?')} canaries; {analysis}")
        if math.isfinite(against):
            broken = ("; ABOVE THE ACCOUNTANT'S ε: the DP implementation or its accounting is broken"
                      if lower > against else "")
            found.append(_judge(name, lower, against, f"{counts}; against {evidence}{broken}"))
        else:
            found.append(Criterion(name, lower, None, NOT_APPLICABLE, f"{counts}; {evidence}: the bound is a floor "
                                                                       "on leakage with no ceiling to contradict"))
    elif policy.require_epsilon_lower_bound:
        if against is not None and math.isinf(against):
            found.append(Criterion(name, None, None, NOT_APPLICABLE, evidence))
        else:
            found.append(_judge(name, None, against, "the report has no one-run ε audit: plant canaries with "
                                                     "canaries.one_run set"))
    white_box = data.get("gradient_epsilon_audit") or {}
    lower, analysis = _one_run_bound(white_box)
    if lower is not None and white_box.get("accountant_epsilon") is not None:  # DP-LoRA's own gradient canaries
        limit = white_box["accountant_epsilon"]
        broken = ("; ABOVE THE ACCOUNTANT'S ε: the DP implementation or its accounting is broken"
                  if lower > limit else "")
        found.append(_judge("white-box ε lower bound (gradient canaries) ≤ accountant ε", lower, limit,
                            f"{white_box.get('n_correct', '?')}/{white_box.get('n_guesses', '?')} guesses right on "
                            f"{white_box.get('n_canaries', '?')} gradient canaries; {analysis}; against the "
                            f"accountant's per-sequence ε{broken}"))
    return found
