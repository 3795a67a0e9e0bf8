"""Extraction audits: can the model reproduce its training text, or a planted secret?

- `probabilistic`: P(suffix | prefix) from the audit's own per-token log-probs (Hayes et al. 2024);
- `greedy`: greedy k-extractability with exact and approximate matches (Carlini et al. 2023);
- `canaries`: greedy and beam-search extraction of canary secrets from their template prefix.
`run_audit` runs the first two when `AuditConfig.extraction` is set; the audit callback adds canaries.
"""

from privft.extraction.canaries import CanaryExtraction, canary_extraction, template_prefix_length
from privft.extraction.greedy import GreedyExtraction, greedy_extraction, normalised_edit_distance
from privft.extraction.probabilistic import ProbabilisticExtraction, probabilistic_extraction
from privft.extraction.report import ExtractionReport, run_extraction
from privft.extraction.settings import ExtractionSettings

__all__ = [
    "CanaryExtraction", "ExtractionReport", "ExtractionSettings", "GreedyExtraction", "ProbabilisticExtraction",
    "canary_extraction", "greedy_extraction", "normalised_edit_distance", "probabilistic_extraction",
    "run_extraction", "template_prefix_length",
]
