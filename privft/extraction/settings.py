"""The extraction audit's settings: one dataclass, shared by YAML (`audit.extraction`), Python and the callback."""

from __future__ import annotations

from dataclasses import dataclass

from privft.config import require


@dataclass
class ExtractionSettings:
    """What `run_audit` measures when `AuditConfig.extraction` is set (None leaves extraction off).

    Prefixes and suffixes count the text's own tokens; every text is read after BOS, as it is
    scored and trained. A text shorter than prefix + suffix is counted, never measured.
    """

    prefix_lengths: tuple[int, ...] = (32, 50)  # probabilistic extraction: k tokens of prefix (Hayes et al. 2024)
    suffix_length: int = 32  # m: the suffix tokens both methods read
    n_samples: tuple[int, ...] = (1, 10, 100)  # sampled continuations n in 1 − (1 − p)^n
    greedy: bool = True  # greedy k-extractability (one generate call per batch; off: no forward pass is added)
    greedy_prefix_length: int = 32  # k of greedy decoding (Carlini et al. 2023)
    greedy_max_texts: int | None = None  # decode at most this many members and as many non-members (seeded); None: all
    approximate_distance: float = 0.1  # an approximate match: token edit distance ≤ this share of m
    canary_beams: int = 5  # beam width of canary extraction (greedy decoding is always tried too)

    def __post_init__(self) -> None:
        """Refuse settings the extraction would only trip over after training and scoring."""
        require(bool(self.prefix_lengths) and min(self.prefix_lengths) >= 1, "prefix_lengths", self.prefix_lengths,
                "must hold at least one length, each at least 1 token, e.g. (32, 50).")
        require(bool(self.n_samples) and min(self.n_samples) >= 1, "n_samples", self.n_samples,
                "must hold at least one count of samples, each at least 1, e.g. (1, 10, 100).")
        for name in ("suffix_length", "greedy_prefix_length", "canary_beams"):
            require(getattr(self, name) >= 1, name, getattr(self, name), "must be at least 1.")
        require(self.greedy_max_texts is None or self.greedy_max_texts >= 1, "greedy_max_texts",
                self.greedy_max_texts, "must be at least 1, or None to decode every text long enough.")
        require(0 <= self.approximate_distance < 1, "approximate_distance", self.approximate_distance,
                "must be in [0, 1).")

    @property
    def longest_read(self) -> int:
        """The most tokens of a text any measurement reads: the longest prefix plus the suffix."""
        return max(*self.prefix_lengths, self.greedy_prefix_length) + self.suffix_length
