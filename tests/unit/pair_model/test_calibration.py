"""`p_same`: the calibration maps, their fit, and the calibration error against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.pair_model import calibration


def _brute_force_ece(p: list[float], y: list[int], bins: int) -> float:
    groups: dict[int, list[tuple[float, int]]] = {}
    for pi, yi in zip(p, y, strict=True):
        groups.setdefault(min(int(pi * bins), bins - 1), []).append((pi, yi))
    total = 0.0
    for members in groups.values():
        mean_p = sum(m[0] for m in members) / len(members)
        rate = sum(m[1] for m in members) / len(members)
        total += len(members) * abs(mean_p - rate)
    return total / len(p)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_calibration_error_equals_a_brute_force_count(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = np.concatenate([rng.random(300), [0.0, 1.0, 0.1, 0.9999]])
    y = (rng.random(len(p)) < p**2).astype(int)
    found = calibration.reliability(p, y, bins=10)
    assert found.ece == pytest.approx(_brute_force_ece(p.tolist(), y.tolist(), 10), abs=1e-12)
    assert found.count.sum() == len(p)
    assert found.count[-1] == sum(1 for v in p if v >= 0.9)  # p = 1 is in the last bin
    assert calibration.reliability(np.array([]), np.array([])).ece == 0.0


def test_calibrated_probabilities_have_no_calibration_error_in_expectation() -> None:
    rng = np.random.default_rng(3)
    p = rng.random(200_000)
    y = rng.random(len(p)) < p
    assert calibration.reliability(p, y).ece < 0.01
    assert calibration.reliability(p**3, y).ece > 0.1  # overconfident: caught


def test_platt_recovers_the_slope_and_intercept_it_was_drawn_from() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=50_000)
    y = rng.random(len(x)) < 1 / (1 + np.exp(-(1.7 * x - 0.8)))
    slope, intercept = calibration.platt(x, y)
    assert slope == pytest.approx(1.7, abs=0.05)
    assert intercept == pytest.approx(-0.8, abs=0.05)


def test_platt_weights_count_as_repeated_rows() -> None:
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 0.5])
    y = np.array([0, 0, 1, 1, 1, 0])
    weight = np.array([1.0, 3.0, 1.0, 2.0, 1.0, 1.0])
    repeated = np.repeat(np.arange(len(x)), weight.astype(int))
    assert calibration.platt(x, y, weight) == pytest.approx(
        calibration.platt(x[repeated], y[repeated]), abs=1e-6
    )


def test_separable_data_still_gives_finite_numbers() -> None:
    slope, intercept = calibration.platt(np.array([-1.0, 1.0]), np.array([0, 1]))
    assert np.isfinite(slope) and np.isfinite(intercept) and slope > 0


def test_p_same_follows_the_score_and_the_veto() -> None:
    fitted = calibration.Calibration(unvetoed=(1.2, -0.5), vetoed=(0.8, -3.0), exact=0.9)
    score = np.array([0.01, 0.2, 0.5, 0.9, 0.999, 0.5])
    vetoed = np.array([False, False, False, False, False, True])
    p = fitted.p_same(score, vetoed)
    assert np.all(np.diff(p[:5]) > 0) and np.all((p > 0) & (p < 1))
    assert p[5] < p[2]  # the same score counts for less once a veto fired
    assert p[2] == pytest.approx(1 / (1 + np.exp(0.5)))  # logit(0.5) = 0


def test_the_shipped_calibration_is_a_probability_map() -> None:
    shipped = calibration.load_calibration()
    assert 0 < shipped.exact <= 1
    assert shipped.unvetoed[0] > 0 and shipped.vetoed[0] > 0  # a higher score never lowers p
    score = np.linspace(0.001, 0.999, 50)
    for vetoed in (False, True):
        p = shipped.p_same(score, np.full(len(score), vetoed))
        assert np.all(np.diff(p) > 0)
