"""Token statistics from one forward pass per text: the statistics type, the start token, the cache, the pass.

- `stats`: `TokenStats`, what one pass leaves per text, and `ScoringError`;
- `start`: the token every text starts from (`start_token`, `start_token_rule`);
- `cache`: `StatsCache` and the model and tokenizer fingerprints that key it;
- `forward`: `score_texts`, the batched, windowed, chunked-head forward pass (`whole_records_cached`: one pass
  serves a record's every side).
"""

from privft.scoring.cache import StatsCache, model_fingerprint, tokenizer_fingerprint
from privft.scoring.forward import DEFAULT_MAX_LENGTH, score_losses, score_texts, whole_records_cached
from privft.scoring.start import (
    DOCUMENT_SEPARATOR,
    START_RULES,
    check_start_rule,
    start_token,
    start_token_record,
    start_token_rule,
)
from privft.scoring.stats import ScoringError, TokenStats, single_token_warning

__all__ = [
    "DEFAULT_MAX_LENGTH", "DOCUMENT_SEPARATOR", "START_RULES", "ScoringError", "StatsCache", "TokenStats",
    "check_start_rule", "model_fingerprint", "score_losses", "score_texts", "single_token_warning", "start_token",
    "start_token_record", "start_token_rule", "tokenizer_fingerprint", "whole_records_cached",
]
