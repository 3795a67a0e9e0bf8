"""LiRA, sequence-aware LiRA and RMIA on synthetic shadow losses with known structure and known answers."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm
from sklearn.covariance import oas
from sklearn.metrics import roc_auc_score

from privft.lira import RMIA, LiRA, leave_one_out
from privft.lira.audit import default_variants, run_lira_audit
from privft.lira.gaussian import jittered_cholesky, log_density, oas_shrink
from privft.lira.inputs import confidence
from privft.metrics import evaluate_attack, tpr_at_fpr
from privft.shadows.plan import balanced_keep


def synthetic(seed: int = 0, *, n_models: int = 16, n_examples: int = 1000, n_positions: int = 16,
              common: float = 0.15, noise: float = 0.1, shift: float = 0.4, memorised: float = 0.2):
    """Losses (models, examples, positions): a per-model loss level shared by a text's tokens (correlation),
    token noise, and members' losses lowered by `shift` on a random `memorised` share of each text's tokens."""
    rng = np.random.default_rng(seed)
    keep = rng.random((n_models, n_examples)).argsort(axis=0) < n_models // 2
    base = rng.gamma(2.0, 1.0, (n_examples, n_positions))
    tokens = rng.random((n_examples, n_positions)) < memorised
    losses = (base + rng.normal(0, common, (n_models, n_examples, 1))
              + rng.normal(0, noise, (n_models, n_examples, n_positions)) - shift * tokens * keep[:, :, None])
    return losses, keep


def pooled_tpr(attack, losses, keep, max_fpr):
    """TPR at `max_fpr` of leave-one-out scores pooled over targets."""
    scores, _ = leave_one_out(attack, losses, keep)
    return tpr_at_fpr(keep.ravel().astype(int), scores.ravel(), max_fpr)


def test_batched_oas_matches_scikit_learn_including_masked_positions():
    rng = np.random.default_rng(1)
    residuals = rng.normal(size=(3, 12, 6)) @ rng.normal(size=(6, 6))
    valid = np.ones((3, 6), bool)
    valid[2, 4:] = False
    residuals[2, :, 4:] = 0
    shrunk = oas_shrink(np.matmul(residuals.transpose(0, 2, 1), residuals) / 12, np.full(3, 12), valid)
    for b in range(3):
        expected, _ = oas(residuals[b][:, valid[b]], assume_centered=True)
        np.testing.assert_allclose(shrunk[b][np.ix_(valid[b], valid[b])], expected, rtol=1e-10)


def test_log_density_through_cholesky_matches_scipy():
    rng = np.random.default_rng(2)
    factor = rng.normal(size=(4, 5, 5))
    covariance = factor @ factor.transpose(0, 2, 1) + np.eye(5)
    x, mean = rng.normal(size=(4, 5)), rng.normal(size=(4, 5))
    expected = [multivariate_normal(mean[b], covariance[b]).logpdf(x[b]) for b in range(4)]
    chol = jittered_cholesky(covariance, np.ones((4, 5), bool))
    np.testing.assert_allclose(log_density(x, mean, chol), expected, rtol=1e-5)


def test_sequence_aware_lira_beats_univariate_at_low_fpr_on_correlated_token_losses():
    losses, keep = synthetic(n_examples=1250)
    univariate = pooled_tpr(LiRA(estimator="univariate"), losses, keep, 1e-3)
    independent = pooled_tpr(LiRA(estimator="independent"), losses, keep, 1e-3)
    full = pooled_tpr(LiRA(estimator="oas"), losses, keep, 1e-3)
    assert univariate.n_non_members == 10_000 and univariate.warning is None  # 10 false positives allowed
    assert independent.true_positives > 3 * univariate.true_positives
    assert full.true_positives > 3 * independent.true_positives  # the shared level is a correlation only OAS sees


@pytest.mark.parametrize(("location", "efficiency"), [("mean", 1.0), ("median", np.pi / 2)])
def test_offline_lira_on_shifted_members_reaches_the_analytic_tpr(location, efficiency):
    rng = np.random.default_rng(3)
    n_models, n_examples, sigma, delta, fpr = 64, 500, 0.2, 0.4, 0.01
    keep = rng.random((n_models, n_examples)).argsort(axis=0) < n_models // 2
    noise = rng.normal(0, sigma, (n_models, n_examples, 1))
    losses = rng.gamma(2.0, 1.0, (n_examples, 1)) + noise - delta * keep[..., None]
    attack = LiRA(estimator="univariate", online=False, variance="global", location=location)
    result = pooled_tpr(attack, losses, keep, fpr)
    # z = (s − μ̂_out) / σ: OUT ~ N(0, c²), IN ~ N(δ/σ, c²) with c² = 1 + efficiency / n_out from the
    # estimated location (the median's variance is π/2 times the mean's).
    c = np.sqrt(1 + efficiency / (n_models / 2 - 0.5))
    expected = norm.cdf(delta / (sigma * c) - norm.ppf(1 - fpr))
    assert abs(result.tpr - expected) < 0.03, (result.tpr, expected)


def test_logit_statistic_is_the_log_odds_of_the_token_probability():
    losses = np.array([0.05, 0.7, 3.0, np.nan])
    p = np.exp(-losses)
    np.testing.assert_allclose(confidence(losses, "logit"), np.log(p / (1 - p)))
    assert np.isfinite(confidence(np.array([0.0]), "logit")).all()


@pytest.mark.parametrize("attack", [LiRA(estimator="oas"), LiRA(estimator="independent", covariance="classwise"),
                                    LiRA(estimator="oas", online=False), LiRA(estimator="univariate")],
                         ids=["oas", "independent-classwise", "oas-offline", "univariate"])
def test_nan_padded_texts_score_as_if_truncated(attack):
    losses, keep = synthetic(4, n_examples=40, n_positions=8)
    padded = losses.copy()
    padded[:, :10, 5:] = np.nan  # the first 10 texts have only 5 tokens
    fitted = LiRA(**{f: getattr(attack, f) for f in ("estimator", "covariance", "online")})
    together = fitted.fit(padded[1:], keep[1:]).score_samples(padded[0])[:10]
    alone = fitted.fit(losses[1:, :10, :5], keep[1:, :10]).score_samples(losses[0, :10, :5])
    np.testing.assert_allclose(together, alone, rtol=1e-4, atol=1e-6)


def test_nan_patterns_that_differ_between_models_are_refused():
    losses, keep = synthetic(5, n_examples=20, n_positions=4)
    losses[3, 7, 2] = np.nan
    with pytest.raises(ValueError, match="Example 7 has NaN positions in model 3"):
        LiRA().fit(losses, keep)
    with pytest.raises(ValueError, match="NaN where the shadows are not"):
        LiRA().fit(losses[4:], keep[4:]).score_samples(losses[3])


def test_too_few_shadows_is_an_error_or_a_reported_fallback_to_fixed_variance():
    losses, keep = synthetic(6, n_models=6, n_examples=50, n_positions=4)  # each fold: 2 IN, 2 OUT per example
    with pytest.raises(ValueError, match="only 2 shadow model.*variance='global'"):
        leave_one_out(LiRA(estimator="oas", min_models=3), losses, keep)
    with pytest.raises(ValueError, match="pooled .global. variance is zero.*at least 6"):
        leave_one_out(LiRA(estimator="oas", variance="auto"), *synthetic(6, n_models=4, n_examples=50, n_positions=4))
    auto = LiRA(estimator="oas", variance="auto", min_models=3)
    report = run_lira_audit(losses, keep, ["candidate"] * 50, {"oas auto": auto}, n_bootstrap=10)
    assert any("fell back to a global (fixed) variance" in note for note in report.notes)
    assert "fell back" in report.to_markdown()


@pytest.mark.parametrize("attack", [LiRA(estimator="independent", covariance="classwise"),
                                    LiRA(estimator="oas", covariance="classwise"), LiRA(estimator="univariate"),
                                    LiRA(estimator="independent", online=False)], ids=repr)
def test_leave_one_out_scores_chance_when_training_leaves_no_trace(attack):
    # In a plan where each text is IN for exactly half the models, the other models' IN/OUT counts follow
    # the target's label; fits that depend on those counts separated members by the counts alone
    # (independent classwise: AUC 0.26 at 8 models) until folds dropped one shadow of the other class.
    rng = np.random.default_rng(11)
    losses = rng.gamma(2.0, 1.0, (1, 600, 4)) * np.exp(rng.normal(0, 0.3, (8, 600, 4)))  # no membership effect
    keep = balanced_keep(8, 600, rng)
    scores, _ = leave_one_out(attack, losses, keep)
    assert abs(roc_auc_score(keep.ravel(), scores.ravel()) - 0.5) < 0.03


def test_a_text_scored_identically_by_every_shadow_is_refused_by_name():
    losses, keep = synthetic(9, n_models=8, n_examples=20, n_positions=3)
    losses[:, 4] = 1.5
    with pytest.raises(ValueError, match="Example 4 has the same scores in every shadow model"):
        LiRA(estimator="independent").fit(losses, keep)


def test_rmia_calibrates_text_difficulty_that_the_plain_loss_attack_cannot():
    losses, keep = synthetic(7, n_examples=300, memorised=1.0)
    losses += np.random.default_rng(7).uniform(0, 2, (300, 1))  # texts differ in difficulty
    population = np.arange(250, 300)
    keep[:, population] = False
    scores, _ = leave_one_out(RMIA(population), losses, keep)
    labels = keep[:, :250].ravel().astype(int)
    rmia = evaluate_attack(labels, scores[:, :250].ravel(), n_bootstrap=10).auc.auc
    loss = evaluate_attack(labels, -losses[:, :250].mean(axis=2).ravel(), n_bootstrap=10).auc.auc
    assert rmia > 0.75 and rmia > loss + 0.15, (rmia, loss)
    with pytest.raises(ValueError, match="population example is IN"):
        RMIA(np.arange(10)).fit(losses, keep)


def test_bad_settings_name_the_parameter_and_the_choices():
    with pytest.raises(ValueError, match="'estimator' parameter of LiRA must be one of"):
        LiRA(estimator="full")
    with pytest.raises(ValueError, match="'offline_a' parameter of RMIA"):
        RMIA(np.arange(3), offline_a=2.0)


def test_audit_reports_every_default_variant_with_counts(tmp_path):
    losses, keep = synthetic(8, n_models=8, n_examples=60, n_positions=6)
    kinds = ["candidate"] * 40 + ["canary"] * 10 + ["population"] * 10
    keep[:, 50:] = False
    report = run_lira_audit(losses, keep, kinds, default_variants(np.arange(50, 60)), n_bootstrap=10)
    assert set(report.metrics) == {"candidate", "canary"}
    assert report.metrics["candidate"]["oas shared"].auc.n_members == int(keep[:, :40].sum())
    paths = report.save(tmp_path)
    assert {p.name for p in paths.values()} == {"lira.json", "lira.md", "roc_candidate.png", "roc_canary.png"}
    assert "rmia offline" in paths["markdown"].read_text()
