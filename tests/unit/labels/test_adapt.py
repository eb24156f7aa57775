"""Adapting the clustering's knobs to labels: the F1 estimate, which vetoes labels lift, and
when the default stays."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.labels import adapt

DEFAULT = adapt.Setting(0.3, 0.3, 1.0)


def _population(
    seed: int = 0, n: int = 2_000, code_share: float = 0.02
) -> tuple[adapt.Population, np.ndarray]:
    """Pairs with a score, a veto reason and a p_same, and their truth: pixel-conflict pairs
    that score high are mostly one product (a catalog that counts a camera's kits as one),
    model-code conflicts are one product at ``code_share``."""
    rng = np.random.default_rng(seed)
    score = rng.random(n)
    reason = rng.choice(["", "", "", "pixels_conflict", "model_code_conflict"], n)
    truth = rng.random(n) < np.where(reason == "model_code_conflict", code_share, score**2)
    truth |= (reason == "pixels_conflict") & (score >= 0.3) & (rng.random(n) < 0.9)
    p_same = np.clip(np.where(reason == "", score**2, 0.1 * score), 0.01, 0.99)
    return adapt.Population(p_same, score, reason), truth


def _merged_by(population: adapt.Population):
    """A clustering without linkage: a pair merges when its score reaches the accept threshold
    and no unlifted veto blocks it (enough to tell settings apart)."""

    def merged(setting: adapt.Setting) -> np.ndarray:
        blocked = (population.veto_reason != "") & ~np.isin(
            population.veto_reason, list(setting.lifted_vetoes)
        )
        return (population.score >= setting.accept_probability) & ~blocked

    return merged


def _everything(truth: np.ndarray) -> adapt.Labelled:
    rows = np.arange(len(truth))
    return adapt.Labelled(rows, truth.astype(np.float64), np.ones(len(truth)))


def test_with_every_pair_labelled_the_estimate_is_the_exact_pairwise_f1() -> None:
    population, truth = _population()
    merged = _merged_by(population)(DEFAULT)
    true_merged = int((merged & truth).sum())
    precision, recall = true_merged / merged.sum(), true_merged / truth.sum()
    exact = 2 * precision * recall / (precision + recall)
    found = adapt.estimated_f1(population, _everything(truth), merged)
    assert found == pytest.approx(exact, abs=1e-12)


def test_labels_lift_the_veto_they_contradict_and_keep_the_one_they_confirm() -> None:
    population, truth = _population()
    assert adapt.proposed_lifts(population, _everything(truth), 0.3, 0.25) == ("pixels_conflict",)


def test_a_badly_clustered_catalog_proposes_what_a_well_clustered_one_would_not() -> None:
    """A reason is proposed above the break-even share (half the F1 a merge must beat), most
    one-product first: at a quarter of its pairs one product, model-code conflicts are worth
    lifting only where the clustering scores below F1 0.5."""
    population, truth = _population(code_share=0.27)
    labelled = _everything(truth)
    assert adapt.proposed_lifts(population, labelled, 0.3, 0.3) == ("pixels_conflict",)
    both = ("pixels_conflict", "model_code_conflict")
    assert adapt.proposed_lifts(population, labelled, 0.3, 0.2) == both


def test_a_reason_with_too_few_labels_is_not_judged() -> None:
    population, truth = _population()
    pixels = np.flatnonzero(
        (population.veto_reason == "pixels_conflict") & (population.score > 0.3)
    )
    few = adapt.Labelled(pixels[:2], truth[pixels[:2]].astype(float), np.ones(2))
    assert adapt.proposed_lifts(population, few, 0.3, 0.0) == ()


def test_choose_lifts_the_contradicted_veto_and_beats_the_default_estimate() -> None:
    population, truth = _population()
    found = adapt.choose(population, _everything(truth), _merged_by(population), DEFAULT)
    assert found.chosen.lifted_vetoes == ("pixels_conflict",)
    assert found.chosen_f1 >= found.default_f1 + adapt.MIN_GAIN
    assert found.as_json()["chosen"]["lifted_vetoes"] == ("pixels_conflict",)


def test_a_proposed_reason_that_does_not_pay_beside_a_better_one_stays_a_veto() -> None:
    """Model-code conflicts one product at 27% are above the default's break-even (F1 0.49)
    but below the one reached once pixel conflicts are lifted (0.68): lifted together, they
    would cost what the pixels pay."""
    population, truth = _population(code_share=0.27)
    found = adapt.choose(population, _everything(truth), _merged_by(population), DEFAULT)
    assert found.proposed_lifts == ("pixels_conflict", "model_code_conflict")
    assert found.chosen.lifted_vetoes == ("pixels_conflict",)


def test_the_default_stays_when_no_setting_gains_enough() -> None:
    population, truth = _population()
    found = adapt.choose(
        population, _everything(truth), _merged_by(population), DEFAULT, min_gain=1.0
    )
    assert found.chosen == DEFAULT and found.chosen_f1 == found.default_f1


def test_a_sample_estimates_what_every_label_would() -> None:
    """Labels drawn at random with inverse-probability weights estimate the full-label F1
    closely on average over many draws (a ratio: unbiased to first order)."""
    population, truth = _population(n=4_000)
    merged = _merged_by(population)(DEFAULT)
    exact = adapt.estimated_f1(population, _everything(truth), merged)
    rng = np.random.default_rng(1)
    found = []
    for _ in range(300):
        rows = rng.choice(len(truth), 300, replace=False)
        weights = np.full(300, len(truth) / 300)
        found.append(
            adapt.estimated_f1(population, adapt.Labelled(rows, truth[rows], weights), merged)
        )
    assert np.mean(found) == pytest.approx(exact, abs=0.01)


def _with_a_model_that_knows(population: adapt.Population, truth: np.ndarray, flips: int):
    """`_merged_by`, where the `adapt.REFIT` pair model scores the truth itself except for
    ``flips`` pairs (a refit that learned the catalog), and each model's scores."""
    shipped = _merged_by(population)
    knows = truth.astype(np.float64)
    knows[:flips] = 1.0 - knows[:flips]
    refitted = _merged_by(adapt.Population(population.p_same, knows, population.veto_reason))

    def merged(setting: adapt.Setting) -> np.ndarray:
        return (refitted if setting.pair_model == adapt.REFIT else shipped)(setting)

    return merged, {adapt.SHIPPED: population.score, adapt.REFIT: knows}


def test_a_refitted_model_that_beats_the_shipped_one_is_chosen() -> None:
    population, truth = _population()
    merged_by, scores = _with_a_model_that_knows(population, truth, flips=50)
    found = adapt.choose(population, _everything(truth), merged_by, DEFAULT, scores=scores)
    assert found.chosen.pair_model == adapt.REFIT
    assert found.as_json()["chosen"]["pair_model"] == adapt.REFIT
    shipped = adapt.choose(population, _everything(truth), merged_by, DEFAULT)
    assert found.chosen_f1 >= shipped.chosen_f1 + adapt.MIN_GAIN


def test_a_refit_must_beat_the_best_shipped_setting_by_the_margin() -> None:
    """A refit scores the labels it was fitted to too well: it has to win by ``min_gain`` over
    the shipped model's best setting, not over the default."""
    population, truth = _population()
    merged_by, scores = _with_a_model_that_knows(population, truth, flips=400)  # a weaker refit
    labelled = _everything(truth)
    refit_alone = {adapt.REFIT: scores[adapt.REFIT]}
    alone = adapt.choose(population, labelled, merged_by, DEFAULT, 0.1, scores=refit_alone)
    assert alone.chosen.pair_model == adapt.REFIT  # it beats the default by the margin
    shipped = adapt.choose(population, labelled, merged_by, DEFAULT, 0.1)
    assert shipped.chosen_f1 < alone.chosen_f1 < shipped.chosen_f1 + 0.1
    found = adapt.choose(population, labelled, merged_by, DEFAULT, 0.1, scores=scores)
    assert found.chosen == shipped.chosen


def test_a_veto_is_proposed_by_what_the_judging_model_would_merge() -> None:
    """Pixel-conflict pairs that are one product score low by the shipped model, so the pairs
    it would merge say the veto holds; a refit that accepts the true ones says it does not."""
    rng = np.random.default_rng(0)
    score = rng.random(2_000)
    reason = rng.choice(["", "", "pixels_conflict"], 2_000)
    truth = np.where(reason == "", rng.random(2_000) < score**2, score < 0.3)
    p_same = np.clip(np.where(reason == "", score**2, 0.1 * score), 0.01, 0.99)
    population = adapt.Population(p_same, score, reason)
    merged_by, scores = _with_a_model_that_knows(population, truth, flips=0)
    labelled = _everything(truth)
    shipped = adapt.choose(population, labelled, merged_by, DEFAULT)
    assert shipped.proposed_lifts == ()
    found = adapt.choose(population, labelled, merged_by, DEFAULT, scores=scores)
    assert found.proposed_lifts == ("pixels_conflict",)
    assert found.chosen.lifted_vetoes == ("pixels_conflict",)
    assert found.chosen.pair_model == adapt.REFIT


def test_the_coordinate_search_finds_a_separable_optimum_without_the_whole_grid() -> None:
    """An estimate that adds one term per knob peaks where each knob peaks: the search reaches
    that setting, asking for far fewer clusterings than the grid holds."""
    peak = adapt.Setting(
        adapt.ACCEPT_PROBABILITIES[-1], adapt.LINK_THRESHOLDS[0], adapt.UNJUDGED_WEIGHTS[-1]
    )
    asked = []

    def f1_of(setting: adapt.Setting) -> float:
        asked.append(setting)
        return -(
            abs(setting.accept_probability - peak.accept_probability)
            + abs(setting.link_threshold - peak.link_threshold)
            + abs(setting.unjudged_weight - peak.unjudged_weight)
        )

    found, f1 = adapt.climb(DEFAULT, f1_of)
    assert found == peak and f1 == 0.0
    grid = (
        len(adapt.ACCEPT_PROBABILITIES) * len(adapt.LINK_THRESHOLDS) * len(adapt.UNJUDGED_WEIGHTS)
    )
    assert len(set(asked)) < grid / 2
