"""Audit metrics: AUC with bootstrap CI, TPR at low FPR, perplexity with bootstrap CI, accuracy with Wilson CI.

Conventions: labels are 1 = member, 0 = non-member; a higher score means "more likely a member".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import beta, norm
from sklearn.metrics import roc_auc_score, roc_curve

DEFAULT_MAX_FPRS: tuple[float, ...] = (0.01, 0.001, 0.0001)
"""FPR ceilings reported by default: 1 %, 0.1 %, 0.01 %."""

PERPLEXITY_CONVENTION = (
    "Perplexity is exp(total NLL / total tokens) over all held-out texts "
    "(token-weighted mean NLL), not a mean of per-text perplexities."
)
"""One-sentence statement of the perplexity convention, for reports."""

MIN_RESOLVING_FALSE_POSITIVES = 10
"""Below this many allowed false positives a TPR-at-FPR estimate gets a resolution warning."""

MIN_SAMPLE_PER_CLASS = 20
"""Below this many members or non-members an AUC gets a small-sample warning, and the blind baseline no verdict."""

_BOOTSTRAP_CHUNK = 64  # resamples processed at once; bounds memory to ~chunk x n_scores


@dataclass(frozen=True)
class AUCResult:
    """ROC AUC with a stratified bootstrap percentile confidence interval."""

    auc: float
    ci_low: float
    ci_high: float
    n_members: int
    n_non_members: int
    n_bootstrap: int
    warning: str | None = None  # set below MIN_SAMPLE_PER_CLASS members or non-members

    def to_dict(self) -> dict:
        """Return the fields as a plain dict."""
        return asdict(self)


@dataclass(frozen=True)
class TPRAtFPR:
    """Best TPR at FPR <= max_fpr, with a Clopper-Pearson 95 % interval and resolution warning."""

    max_fpr: float
    tpr: float | None
    fpr_achieved: float | None
    threshold: float | None  # predict member iff score >= threshold; inf = predict none
    true_positives: int | None
    false_positives: int | None
    n_members: int
    n_non_members: int
    ci_low: float | None
    ci_high: float | None
    warning: str | None
    fpr_upper: float | None = None  # 95 % upper bound on the threshold's FPR for new non-members

    def to_dict(self) -> dict:
        """Return the fields as a plain dict."""
        return asdict(self)

    def format(self) -> str:
        """Render e.g. '0.086 [0.07, 0.10] (34/400 members, FPR ≤ 1 % on 1,000 non-members)'."""
        context = f"FPR ≤ {_percent(self.max_fpr)} on {self.n_non_members:,} non-members"
        if self.tpr is None:
            return f"n/a ({context}) — {self.warning}"
        text = (
            f"{self.tpr:.3f} [{self.ci_low:.2f}, {self.ci_high:.2f}] "
            f"({self.true_positives:,}/{self.n_members:,} members, {context})"
        )
        return f"{text} — {self.warning}" if self.warning else text

    def __str__(self) -> str:
        """Same as format()."""
        return self.format()


@dataclass(frozen=True)
class AttackMetrics:
    """All headline metrics of one membership-inference attack."""

    auc: AUCResult
    tpr_at_fpr: tuple[TPRAtFPR, ...]

    def to_dict(self) -> dict:
        """Return a nested plain dict."""
        return {"auc": self.auc.to_dict(), "tpr_at_fpr": [t.to_dict() for t in self.tpr_at_fpr]}


def _percent(fraction: float) -> str:
    return f"{fraction * 100:g} %"


def _validate(y_true: ArrayLike, y_score: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Check labels/scores and return them as (int 0/1 array, float array)."""
    y = np.asarray(y_true)
    s = np.asarray(y_score, dtype=float)
    if y.ndim != 1 or s.ndim != 1:
        raise ValueError(f"y_true and y_score must be 1-D, got shapes {y.shape} and {s.shape}")
    if len(y) != len(s):
        raise ValueError(f"y_true and y_score lengths differ: {len(y)} labels vs {len(s)} scores")
    bad = ~np.isin(y, (0, 1))
    if bad.any():
        found = np.unique(y[bad])[:5]
        raise ValueError(f"labels must be 1 (member) or 0 (non-member); found {found}")
    y = y.astype(np.int8)
    n_members = int(y.sum())
    if n_members == 0 or n_members == len(y):
        missing = "members (label 1)" if n_members == 0 else "non-members (label 0)"
        raise ValueError(f"need both classes; there are no {missing} among {len(y)} labels")
    nonfinite = ~np.isfinite(s)
    if nonfinite.any():
        in_members = int(nonfinite[y == 1].sum())
        raise ValueError(
            f"{int(nonfinite.sum())} non-finite (NaN/inf) scores: "
            f"{in_members} among members, {int(nonfinite.sum()) - in_members} among non-members"
        )
    return y, s


def _bootstrap_aucs(value_idx: np.ndarray, y: np.ndarray, n_values: int,
                    n_bootstrap: int, rng: np.random.Generator) -> np.ndarray:
    """Exact AUCs (ties count 0.5) of stratified resamples, via per-resample score histograms."""
    members, non_members = value_idx[y == 1], value_idx[y == 0]
    n1, n0 = len(members), len(non_members)
    aucs = np.empty(n_bootstrap)
    for start in range(0, n_bootstrap, _BOOTSTRAP_CHUNK):
        rows = min(_BOOTSTRAP_CHUNK, n_bootstrap - start)
        mem = members[rng.integers(0, n1, size=(rows, n1), dtype=np.int32)]
        non = non_members[rng.integers(0, n0, size=(rows, n0), dtype=np.int32)]
        offsets = np.arange(rows)[:, None] * n_values
        non_hist = np.bincount((non + offsets).ravel(), minlength=rows * n_values)
        non_hist = non_hist.reshape(rows, n_values).astype(np.int32)
        # Twice the credit per distinct score: 2 x (non-members below) + (non-members equal).
        credit2 = 2 * np.cumsum(non_hist, axis=1, dtype=np.int32) - non_hist
        wins2 = np.take_along_axis(credit2, mem, axis=1).sum(axis=1, dtype=np.int64)
        aucs[start:start + rows] = wins2 / (2 * n1 * n0)
    return aucs


def auc_with_ci(y_true: ArrayLike, y_score: ArrayLike, *, n_bootstrap: int = 1000,
                confidence: float = 0.95, seed: int = 0) -> AUCResult:
    """ROC AUC (sklearn) with a seeded stratified bootstrap percentile confidence interval."""
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be positive, got {n_bootstrap}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    y, s = _validate(y_true, y_score)
    values, value_idx = np.unique(s, return_inverse=True)
    aucs = _bootstrap_aucs(value_idx, y, len(values), n_bootstrap, np.random.default_rng(seed))
    tail = (1 - confidence) / 2
    low, high = np.quantile(aucs, [tail, 1 - tail])
    n_members = int(y.sum())
    return AUCResult(float(roc_auc_score(y, s)), float(low), float(high),
                     n_members, len(y) - n_members, n_bootstrap, small_sample_warning(n_members, len(y) - n_members))


def small_sample_warning(n_members: int, n_non_members: int) -> str | None:
    """The warning an AUC on so few members or non-members carries, or None from MIN_SAMPLE_PER_CLASS each on."""
    if min(n_members, n_non_members) >= MIN_SAMPLE_PER_CLASS:
        return None
    return (f"SMALL SAMPLE: {n_members} members vs {n_non_members} non-members (fewer than {MIN_SAMPLE_PER_CLASS} "
            "on a side). Every AUC and interval here rests on a handful of texts and can read 1.000 by chance; "
            "audit at least 20 members and 20 non-members (hundreds for TPR at low FPR).")


@dataclass(frozen=True)
class AUCDifference:
    """AUC(b) − AUC(a) on the same texts, with a paired bootstrap confidence interval."""

    difference: float
    ci_low: float
    ci_high: float
    n_members: int
    n_non_members: int

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 0."""
        return self.ci_low > 0 or self.ci_high < 0


def paired_auc_difference(y_true: ArrayLike, score_a: ArrayLike, score_b: ArrayLike, *, n_bootstrap: int = 1000,
                          confidence: float = 0.95, seed: int = 0) -> AUCDifference:
    """AUC(b) − AUC(a) for two score vectors on the same texts (two models, or two attacks), paired.

    Both vectors are resampled with the same stratified draws (one seed), so the interval covers
    the difference's own noise: far narrower than two separate intervals suggest when the two
    scores are correlated, as two defences audited on one split are.
    """
    y, a = _validate(y_true, score_a)
    _, b = _validate(y_true, score_b)
    draws = []
    for s in (a, b):
        values, value_idx = np.unique(s, return_inverse=True)
        draws.append(_bootstrap_aucs(value_idx, y, len(values), n_bootstrap, np.random.default_rng(seed)))
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws[1] - draws[0], [tail, 1 - tail])
    n_members = int(y.sum())
    return AUCDifference(float(roc_auc_score(y, b) - roc_auc_score(y, a)), float(low), float(high),
                         n_members, len(y) - n_members)


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) binomial confidence interval for successes / trials."""
    alpha = 1 - confidence
    low = 0.0 if successes == 0 else beta.ppf(alpha / 2, successes, trials - successes + 1)
    if successes == trials:
        high = 1.0
    else:
        high = beta.ppf(1 - alpha / 2, successes + 1, trials - successes)
    return float(low), float(high)


@dataclass(frozen=True)
class AccuracyResult:
    """A share of correct outcomes with its Wilson score interval and the counts behind it."""

    accuracy: float
    ci_low: float
    ci_high: float
    n_correct: int
    n_total: int
    confidence: float = 0.95

    def to_dict(self) -> dict:
        """Return the fields as a plain dict."""
        return asdict(self)

    def format(self) -> str:
        """Render e.g. '0.625 [0.31, 0.86] (5/8)'."""
        return f"{self.accuracy:.3f} [{self.ci_low:.2f}, {self.ci_high:.2f}] ({self.n_correct}/{self.n_total})"


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for the proportion successes / trials (Wilson 1927): fair at 0 and n, unlike Wald's."""
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"wilson_interval needs 0 <= successes <= trials and trials >= 1, got {successes}/{trials}; "
                         "measure at least one example")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p, spread = successes / trials, z * z / trials
    centre = (p + spread / 2) / (1 + spread)
    half = z * math.sqrt(p * (1 - p) / trials + spread / (4 * trials)) / (1 + spread)
    return (0.0 if successes == 0 else centre - half), (1.0 if successes == trials else centre + half)


def accuracy_with_ci(correct: ArrayLike, *, confidence: float = 0.95) -> AccuracyResult:
    """The share of true entries of `correct` (one bool per example), with its Wilson score interval."""
    flags = np.asarray(correct)
    if flags.ndim != 1 or flags.dtype != bool:
        raise ValueError(f"correct must be a 1-D array of bools (one per example), got dtype {flags.dtype} and shape "
                         f"{flags.shape}")
    n_correct, n_total = int(flags.sum()), len(flags)
    low, high = wilson_interval(n_correct, n_total, confidence)
    return AccuracyResult(n_correct / n_total, low, high, n_correct, n_total, confidence)


def threshold_fpr_upper_bound(false_positives: int, n_non_members: int, confidence: float = 0.95) -> float:
    """Upper confidence bound on the FPR, for new non-members, of a threshold set on these non-members.

    A threshold with `false_positives` of `n_non_members` scores at or above it lies above the
    (false_positives + 1)-th highest non-member score, whose exceedance probability follows
    Beta(false_positives + 1, n_non_members − false_positives) for continuous scores, however
    the threshold was chosen from them; this is that law's `confidence` quantile.
    """
    return float(beta.ppf(confidence, false_positives + 1, n_non_members - false_positives))


def _allowed_false_positives(n_non_members: int, max_fpr: float) -> int:
    """Most false positives an FPR of max_fpr permits on n_non_members."""
    # Tolerance guards products like 0.001 * 3000 against rounding just below an integer.
    return math.floor(n_non_members * max_fpr + 1e-9)


def _resolution_warning(n_non_members: int, max_fpr: float, allowed: int) -> str | None:
    """Explain when n_non_members is too few to resolve max_fpr; None when it is enough."""
    if allowed >= MIN_RESOLVING_FALSE_POSITIVES:
        return None
    if allowed < 1:
        need = math.ceil(1 / max_fpr - 1e-9)
        return (f"not estimable: {n_non_members:,} non-members cannot resolve "
                f"FPR {_percent(max_fpr)} (need ≥ {need:,})")
    need = math.ceil(MIN_RESOLVING_FALSE_POSITIVES / max_fpr - 1e-9)
    return (f"low resolution: FPR ≤ {_percent(max_fpr)} on {n_non_members:,} non-members allows "
            f"only {allowed} false positive{'s' if allowed > 1 else ''}, so the threshold rests on "
            f"fewer than {MIN_RESOLVING_FALSE_POSITIVES} non-members (need ≥ {need:,})")


def tpr_at_fpr(y_true: ArrayLike, y_score: ArrayLike, max_fpr: float) -> TPRAtFPR:
    """Best TPR among ROC points with FPR <= max_fpr (no interpolation), with an exact 95 % CI."""
    if not 0 < max_fpr <= 1:
        raise ValueError(f"max_fpr must be in (0, 1], got {max_fpr}")
    y, s = _validate(y_true, y_score)
    n_members = int(y.sum())
    n_non_members = len(y) - n_members
    allowed_fp = _allowed_false_positives(n_non_members, max_fpr)
    warning = _resolution_warning(n_non_members, max_fpr, allowed_fp)
    if allowed_fp < 1:
        return TPRAtFPR(max_fpr, None, None, None, None, None, n_members, n_non_members,
                        None, None, warning)
    fpr, tpr, thresholds = roc_curve(y, s, drop_intermediate=False)
    allowed = np.flatnonzero(fpr <= max_fpr)
    best = allowed[np.argmax(tpr[allowed])]  # first maximum: lowest FPR for the best TPR
    true_positives = int(round(tpr[best] * n_members))
    false_positives = int(round(fpr[best] * n_non_members))
    ci_low, ci_high = clopper_pearson(true_positives, n_members)
    return TPRAtFPR(max_fpr, float(tpr[best]), float(fpr[best]), float(thresholds[best]),
                    true_positives, false_positives, n_members, n_non_members, ci_low, ci_high, warning,
                    threshold_fpr_upper_bound(false_positives, n_non_members))


def evaluate_attack(y_true: ArrayLike, y_score: ArrayLike, *,
                    max_fprs: tuple[float, ...] = DEFAULT_MAX_FPRS,
                    n_bootstrap: int = 1000, seed: int = 0) -> AttackMetrics:
    """AUC with bootstrap CI plus TPR at each FPR ceiling in max_fprs."""
    y, s = _validate(y_true, y_score)
    return AttackMetrics(
        auc=auc_with_ci(y, s, n_bootstrap=n_bootstrap, seed=seed),
        tpr_at_fpr=tuple(tpr_at_fpr(y, s, m) for m in max_fprs),
    )


@dataclass(frozen=True)
class PerplexityRatio:
    """Perplexity of model a over model b on the same texts, with a paired bootstrap interval over texts."""

    ratio: float
    ci_low: float
    ci_high: float
    n_texts: int

    @property
    def significant(self) -> bool:
        """Whether the interval excludes 1."""
        return self.ci_low > 1 or self.ci_high < 1


def _per_text_losses(nll_sums: ArrayLike, token_counts: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Check per-text NLL sums and token counts; return them as float arrays."""
    nll = np.asarray(nll_sums, dtype=float)
    tokens = np.asarray(token_counts, dtype=float)
    if nll.ndim != 1 or nll.shape != tokens.shape:
        raise ValueError(f"nll_sums and token_counts shapes differ or are not 1-D: {nll.shape} vs {tokens.shape}; "
                         "give one NLL sum and one token count per text")
    if not np.all(np.isfinite(nll)):
        raise ValueError(f"{int((~np.isfinite(nll)).sum())} non-finite values in nll_sums")
    if np.any(tokens < 0) or tokens.sum() <= 0:
        raise ValueError("token_counts must be non-negative with a positive total")
    return nll, tokens


def _bootstrap_log_perplexity(nll: np.ndarray, tokens: np.ndarray, n_bootstrap: int, confidence: float,
                              seed: int) -> tuple[float, float]:
    """Percentile interval of Σ nll / Σ tokens over texts resampled with replacement (a resample that drew only
    texts without tokens is left out)."""
    if n_bootstrap < 1:
        raise ValueError(f"n_bootstrap must be positive, got {n_bootstrap}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    means = []
    for start in range(0, n_bootstrap, _BOOTSTRAP_CHUNK):
        rows = rng.integers(0, len(nll), size=(min(_BOOTSTRAP_CHUNK, n_bootstrap - start), len(nll)))
        counted = tokens[rows].sum(axis=1)
        means.append(nll[rows].sum(axis=1)[counted > 0] / counted[counted > 0])
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.concatenate(means), [tail, 1 - tail])
    return float(low), float(high)


def perplexity_interval(nll_sums: ArrayLike, token_counts: ArrayLike, *, n_bootstrap: int = 1000,
                        confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Bootstrap percentile interval of the corpus perplexity, resampling whole texts (seeded)."""
    nll, tokens = _per_text_losses(nll_sums, token_counts)
    low, high = _bootstrap_log_perplexity(nll, tokens, n_bootstrap, confidence, seed)
    return math.exp(low), math.exp(high)


def paired_perplexity_ratio(nll_a: ArrayLike, nll_b: ArrayLike, token_counts: ArrayLike, *,
                            n_bootstrap: int = 1000, confidence: float = 0.95, seed: int = 0) -> PerplexityRatio:
    """Perplexity(a) / perplexity(b) on the same texts, tokenised alike, with a paired bootstrap interval.

    The ratio is exp(Σ (nll_a − nll_b) / Σ tokens); resampling the texts once for both models keeps
    the difference's own noise only, far narrower than two separate intervals when, as for two
    fine-tunes of one base model, the same texts are hard for both.
    """
    a, tokens = _per_text_losses(nll_a, token_counts)
    b, _ = _per_text_losses(nll_b, token_counts)
    low, high = _bootstrap_log_perplexity(a - b, tokens, n_bootstrap, confidence, seed)
    return PerplexityRatio(math.exp((a.sum() - b.sum()) / tokens.sum()), math.exp(low), math.exp(high), len(a))


def perplexity(nll_sums: ArrayLike, token_counts: ArrayLike) -> float:
    """Corpus perplexity exp(Σ nll / Σ tokens), not a mean of per-text perplexities.

    Parameters
    ----------
    nll_sums : per-text summed negative log-likelihood, in nats.
    token_counts : per-text number of scored tokens.
    """
    nll, tokens = _per_text_losses(nll_sums, token_counts)
    return float(np.exp(nll.sum() / tokens.sum()))
