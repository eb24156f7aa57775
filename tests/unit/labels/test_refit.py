"""The pair model refitted to labels with the shipped model as its prior: it moves as far as the
labels carry it, no further, and weighs each label by what it stands for."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.labels import refit
from pairsieve.pair_model.model import PairModel

PRIOR = PairModel(("overlap", "numbers"), np.array([4.0, 0.0]), -2.0)


def _labelled(n: int, seed: int = 0) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Pairs whose truth depends on shared numbers, which the prior ignores, and not on word
    overlap, which the prior trusts."""
    rng = np.random.default_rng(seed)
    features = {"overlap": rng.random(n), "numbers": rng.random(n)}
    p = 1.0 / (1.0 + np.exp(-(6.0 * features["numbers"] - 3.0)))
    return features, (rng.random(n) < p).astype(np.float64)


def test_many_labels_move_the_model_to_what_they_say() -> None:
    features, label = _labelled(5_000)
    found = refit.refit(PRIOR, features, label, np.ones(len(label)))
    assert found is not None and found.features == PRIOR.features
    overlap, numbers = found.coef
    assert abs(overlap) < 0.5 < 4.0  # the prior's trust in overlap is gone
    assert numbers == pytest.approx(6.0, abs=1.0)
    assert found.intercept == pytest.approx(-3.0, abs=0.6)


def test_a_strong_prior_keeps_the_shipped_model() -> None:
    features, label = _labelled(300)
    found = refit.refit(PRIOR, features, label, np.ones(len(label)), strength=1e9)
    assert found is not None
    np.testing.assert_allclose(found.coef, PRIOR.coef, atol=1e-4)
    assert found.intercept == pytest.approx(PRIOR.intercept, abs=1e-4)


def test_a_few_hundred_labels_move_it_part_of_the_way() -> None:
    features, label = _labelled(300)
    few = refit.refit(PRIOR, features, label, np.ones(len(label)))
    many = refit.refit(PRIOR, *_labelled(5_000), np.ones(5_000))
    assert few is not None and many is not None
    assert many.coef[1] > few.coef[1] > PRIOR.coef[1]
    assert PRIOR.coef[0] > few.coef[0] > many.coef[0]


def test_a_weight_counts_a_label_as_that_many_copies() -> None:
    features, label = _labelled(400, seed=3)
    weight = np.where(np.arange(400) % 2 == 0, 3.0, 1.0)
    weighted = refit.refit(PRIOR, features, label, weight, strength=1e-6)
    copies = np.repeat(np.arange(400), weight.astype(int))
    repeated = refit.refit(
        PRIOR,
        {k: v[copies] for k, v in features.items()},
        label[copies],
        np.ones(len(copies)),
        strength=1e-6,
    )
    assert weighted is not None and repeated is not None
    np.testing.assert_allclose(weighted.coef, repeated.coef, rtol=1e-3, atol=1e-3)


def test_too_few_labels_or_one_answer_refit_nothing() -> None:
    features, label = _labelled(refit.MIN_LABELS - 1)
    assert refit.refit(PRIOR, features, label, np.ones(len(label))) is None
    features, _ = _labelled(100)
    assert refit.refit(PRIOR, features, np.ones(100), np.ones(100)) is None


def test_a_refit_is_offered_only_where_it_predicts_held_out_labels_better() -> None:
    """Labels that another model made get a refit in every draw; labels the prior itself made
    mostly do not (a refit can still fit one draw's noise: 7 of these 10 are refused)."""
    features, _ = _labelled(300)
    weight = np.ones(300)
    other = [refit.refit_if_better(PRIOR, *_labelled(300, seed), weight) for seed in range(10)]
    assert all(model is not None for model in other)
    p = PRIOR.probability(features)
    refused = 0
    for seed in range(10):
        from_prior = (np.random.default_rng(seed).random(300) < p).astype(np.float64)
        refused += refit.refit_if_better(PRIOR, features, from_prior, weight) is None
    assert refused >= 6
