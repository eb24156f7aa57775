"""core.logistic: the penalised, weighted, offset logistic regression every shipped fit uses."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.core import logistic


def _data(n: int = 4000, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    truth = np.array([-0.5, 2.0, -1.0, 0.0])
    p = 1.0 / (1.0 + np.exp(-(truth[0] + x @ truth[1:])))
    return x, (rng.random(n) < p).astype(float), truth


def test_a_weak_ridge_recovers_the_generating_coefficients():
    x, y, truth = _data()
    beta = logistic.fit(x, y, np.ones(len(y)), logistic.Penalty.ridge(3, 1e-6))
    assert np.abs(beta - truth).max() < 0.15


def test_a_strong_prior_holds_the_coefficients_at_its_centre():
    x, y, _ = _data()
    centre = np.array([0.1, 0.2, 0.3, 0.4])
    strong = logistic.Penalty(centre, np.full(4, 1e7))
    assert np.allclose(logistic.fit(x, y, np.ones(len(y)), strong), centre, atol=1e-3)


def test_an_offset_is_taken_out_of_the_intercept():
    x, y, _ = _data()
    free = logistic.fit(x, y, np.ones(len(y)), logistic.Penalty.ridge(3, 1e-6))
    shifted = logistic.fit(x, y, np.ones(len(y)), logistic.Penalty.ridge(3, 1e-6), offset=1.5)
    assert shifted[0] == pytest.approx(free[0] - 1.5, abs=1e-3)
    assert np.allclose(shifted[1:], free[1:], atol=1e-3)


def test_integer_weights_equal_repeated_rows():
    x, y, _ = _data(n=600)
    counts = np.random.default_rng(1).integers(1, 4, size=len(y))
    weighted = logistic.fit(x, y, counts.astype(float), logistic.Penalty.ridge(3, 1.0))
    repeated = logistic.fit(
        np.repeat(x, counts, axis=0), np.repeat(y, counts), np.ones(counts.sum()),
        logistic.Penalty.ridge(3, 1.0),
    )  # fmt: skip
    assert np.allclose(weighted, repeated, atol=1e-4)


def test_standardising_and_back_is_the_identity_on_predictions():
    x, y, _ = _data(n=500)
    raw = x * np.array([100.0, 0.01, 1.0]) + np.array([5.0, -3.0, 0.0])
    w = np.ones(len(y))
    scaled, mean, scale = logistic.standardised(raw, w)
    assert np.allclose(scaled.mean(axis=0), 0.0, atol=1e-9)
    assert np.allclose(scaled.std(axis=0), 1.0, atol=1e-9)
    beta = logistic.fit(scaled, y, w, logistic.Penalty.ridge(3, 1.0))
    coef, intercept = logistic.on_raw_scale(beta, mean, scale)
    assert np.allclose(intercept + raw @ coef, beta[0] + scaled @ beta[1:])


def test_a_constant_column_keeps_scale_one():
    raw = np.column_stack([np.arange(5.0), np.full(5, 7.0)])
    _, _, scale = logistic.standardised(raw, np.ones(5))
    assert scale[1] == 1.0
