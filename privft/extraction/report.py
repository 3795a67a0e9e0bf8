"""The extraction audit of one model: probabilistic and greedy extraction of the audited texts, and canaries.

Records (prompt–completion, messages) are read from their prompt: the trained reply is what is extracted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from privft.data.records import Record, record_format
from privft.extraction.canaries import CanaryExtraction
from privft.extraction.greedy import GreedyExtraction, greedy_extraction, greedy_from_prompts
from privft.extraction.probabilistic import GROUPS, ProbabilisticExtraction, probabilistic_extraction, reply_extraction
from privft.extraction.replies import record_replies
from privft.extraction.settings import ExtractionSettings
from privft.scoring import TokenStats

LOG_PREFIX = "privacy/extraction/"
MIN_MEASURED = 30  # fewer texts long enough make a share too coarse to compare members with non-members
GROUP_NAMES = {"members": "members", "non_members": "non-members"}


def _rate(count: int, total: int) -> str:
    return f"{count / total:.3f} ({count}/{total})" if total else "—"


@dataclass
class ExtractionReport:
    """Every extraction number of one audit, with the per-text values behind them and their counts."""

    settings: ExtractionSettings
    probabilistic: list[ProbabilisticExtraction]  # one per prefix length
    greedy: GreedyExtraction | None
    canaries: list[CanaryExtraction] | None = None  # filled in by the audit callback when canaries were planted
    from_prompt: bool = False  # records: read from each prompt, the suffix being the trained reply's first m tokens

    @property
    def notes(self) -> list[str]:
        """Warnings that change how the numbers read: too few texts long enough to be measured."""
        found = []
        for result in self.probabilistic:
            for group, summary in result.summary(self.settings.n_samples).items():
                if summary["n_long_enough"] < MIN_MEASURED:
                    length = (f"a scored reply of {result.suffix_length}" if self.from_prompt
                              else f"{result.prefix_length} + {result.suffix_length}")
                    found.append(f"Probabilistic extraction at prefix {self._prefix(result.prefix_length)}: only "
                                 f"{summary['n_long_enough']} of {summary['n_texts']} {GROUP_NAMES[group]} have "
                                 f"{length} tokens; its shares are coarse.")
        return found

    def to_dict(self) -> dict:
        """A JSON-ready dict: settings, summaries with counts, per-text log-probabilities (None: too short)."""
        def per_text(values: np.ndarray) -> list[float | None]:
            return [float(v) if np.isfinite(v) else None for v in values]

        greedy = None
        if self.greedy is not None:
            greedy = {"prefix_length": self.greedy.prefix_length, "suffix_length": self.greedy.suffix_length,
                      "max_distance": self.greedy.max_distance, "summary": self.greedy.summary(),
                      "decoded": self.greedy.decoded.tolist(), "distances": self.greedy.distances.tolist()}
        return {
            "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self.settings).items()},
            "probabilistic": [{"prefix_length": r.prefix_length, "suffix_length": r.suffix_length,
                               "summary": r.summary(self.settings.n_samples),
                               "log_probability": per_text(r.log_probability)} for r in self.probabilistic],
            "greedy": greedy,
            "canaries": [c.to_dict() for c in self.canaries] if self.canaries is not None else None,
            **({"from_prompt": True} if self.from_prompt else {}),  # a text audit's dict is as it was
        }

    def markdown_lines(self) -> list[str]:
        """The report's extraction section: one table per method, counts in every cell."""
        m, ns = self.settings.suffix_length, self.settings.n_samples
        source, target = (("a record's prompt", f"the first {m} tokens of its trained reply") if self.from_prompt
                          else ("a text's first k tokens", f"its next {m} tokens"))
        lines = ["### Extraction", "",
                 f"Probabilistic extraction (Hayes et al. 2024): the mean chance that at least one of n continuations "
                 f"sampled from {source} is {target}, 1 − (1 − p)^n with p = P(suffix | "
                 "prefix) from the audit's own pass. Non-members are the control: text the model predicts without "
                 "having seen it.", "",
                 "| Prefix k | Texts (long enough / all) | " + " | ".join(f"n = {n}" for n in ns)
                 + " | median log10 p |",
                 "|" + "---|" * (3 + len(ns))]
        for result in self.probabilistic:
            for group, s in result.summary(ns).items():
                shares = [f"{s['at_least_once'][str(n)]:.3g}" if s["n_long_enough"] else "—" for n in ns]
                median = f"{s['median_log10_p']:.1f}" if s["n_long_enough"] else "—"
                lines.append(f"| {self._prefix(result.prefix_length)} | {GROUP_NAMES[group]} "
                             f"{s['n_long_enough']}/{s['n_texts']} | "
                             + " | ".join(shares) + f" | {median} |")
        if self.greedy is not None:
            g = self.greedy
            start = ("each record's prompt with the chat template's generation prompt, against its trained reply"
                     if self.from_prompt else f"the first {g.prefix_length}")
            lines += ["", f"Greedy k-extractability (Carlini et al. 2023): greedy decoding of {g.suffix_length} tokens "
                          f"from {start}; exact = every token right, approximate = token edit "
                          f"distance ≤ {g.max_distance:g} × {g.suffix_length}.", "",
                      "| Texts | decoded / long enough / all | exact | approximate |", "|---|---|---|---|"]
            for group, s in g.summary().items():
                lines.append(f"| {GROUP_NAMES[group]} | {s['n_decoded']}/{s['n_long_enough']}/{s['n_texts']} | "
                             f"{_rate(s['exact'], s['n_decoded'])} | {_rate(s['approximate'], s['n_decoded'])} |")
        if self.canaries:
            beams = self.settings.canary_beams
            lines += ["", f"Canary extraction: decoding from each canary's template prefix (greedy, and beam search "
                          f"of width {beams}); rank among the plan's references of the same format, 1 = most likely. "
                          "Canaries of one template share its prefix, so greedy decoding and the best beam can yield "
                          f"at most one of them, the {beams} beams at most {beams}.",
                      "", f"| Secret | Format | Trained on | log10 P(secret \\| prefix) | greedy | best beam | "
                          f"any of {beams} beams | rank | exposure (bits) |", "|" + "---|" * 9]
            for c in self.canaries:
                rank = f"{c.rank}/{c.n_alternatives + 1}" if c.rank is not None else "not measured"
                exposure = f"{c.exposure:.2f}" if c.exposure is not None else "—"
                lines.append(f"| {c.secret} | {c.secret_format} | {'yes' if c.inserted else 'no (control)'} | "
                             f"{c.log_probability / np.log(10):.1f} | "
                             f"{'yes' if c.greedy else 'no'} | {'yes' if c.beam else 'no'} | "
                             f"{'yes' if c.in_beams else 'no'} | {rank} | {exposure} |")
            for label, rows in (("Trained-on canaries", self._canaries(True)), ("Controls", self._canaries(False))):
                if rows:
                    lines += ["", f"{label} extracted: greedy {_rate(sum(c.greedy for c in rows), len(rows))}, "
                                  f"beam search {_rate(sum(c.beam for c in rows), len(rows))}."]
        lines += ["", "An extraction rate is a lower bound: a text not reproduced here may still come out under "
                      "another prompt or decoding."]
        return lines

    def headline(self) -> dict[str, float]:
        """Flat `privacy/extraction/...` numbers for the Trainer's logs, each group's count beside its rate."""
        logs: dict[str, float] = {}
        for result in self.probabilistic:
            for group, s in result.summary(self.settings.n_samples).items():
                key = LOG_PREFIX + ("prompt" if self.from_prompt else f"prefix{result.prefix_length}") + f"/{group}"
                logs[f"{key}/n_long_enough"] = s["n_long_enough"]
                logs |= {f"{key}/at_least_once@{n}": v for n, v in s["at_least_once"].items() if v is not None}
        if self.greedy is not None:
            for group, s in self.greedy.summary().items():
                logs[f"{LOG_PREFIX}greedy/{group}/n_decoded"] = s["n_decoded"]
                logs |= {f"{LOG_PREFIX}greedy/{group}/{kind}": s[kind] for kind in ("exact_rate", "approximate_rate")
                         if s[kind] is not None}
        if inserted := self._canaries(True):
            logs[f"{LOG_PREFIX}canaries/n_canaries"] = len(inserted)
            logs[f"{LOG_PREFIX}canaries/greedy_rate"] = float(np.mean([c.greedy for c in inserted]))
            logs[f"{LOG_PREFIX}canaries/beam_rate"] = float(np.mean([c.beam for c in inserted]))
        return logs

    def _prefix(self, prefix_length: int) -> str:
        """How the report names a prefix: its length k, or "prompt" for records."""
        return "prompt" if self.from_prompt else str(prefix_length)

    def _canaries(self, inserted: bool) -> list[CanaryExtraction]:
        """The canaries trained on (`inserted`), or the never-trained controls of a one-run audit."""
        return [c for c in self.canaries or () if c.inserted == inserted]


def run_extraction(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, texts: Sequence[Record],
                   labels: np.ndarray, target: Sequence[TokenStats], settings: ExtractionSettings, *,
                   seed: int = 0, batch_size: int = 8) -> ExtractionReport:
    """Probabilistic extraction from the target pass's statistics `target` (no forward pass), then greedy decoding.

    Records (under the rendering in force) are read from their prompt: P(first m tokens of the trained reply |
    prompt), measured when the pass scored the reply, and greedy decoding of the reply from the prompt.
    """
    labels = np.asarray(labels)
    if set(np.unique(labels)) - set(GROUPS.values()):
        raise ValueError(f"labels must be 1 (member) or 0 (non-member), got {sorted(set(np.unique(labels)))}.")
    replies = record_replies(texts, tokenizer) if texts and record_format(texts[0]) != "text" else None
    if replies is None:
        probabilistic = [probabilistic_extraction(target, labels, k, settings.suffix_length)
                         for k in settings.prefix_lengths]
    else:
        probabilistic = [reply_extraction(target, [r.scored_offset for r in replies], labels, settings.suffix_length)]
    greedy = None
    if settings.greedy:
        common = dict(suffix_length=settings.suffix_length, max_distance=settings.approximate_distance,
                      max_texts=settings.greedy_max_texts, seed=seed, batch_size=batch_size)
        greedy = (greedy_extraction(model, tokenizer, texts, labels, prefix_length=settings.greedy_prefix_length,
                                    **common) if replies is None else
                  greedy_from_prompts(model, tokenizer, [(r.prompt, r.reply) for r in replies], labels,
                                      prefix_length=0, **common))
    return ExtractionReport(settings, probabilistic, greedy, from_prompt=replies is not None)
