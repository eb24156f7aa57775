"""The duplicate-impact maths against the worked examples, brute force and simulation."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from pairsieve.report import impact

THREE = (0.8, 0.4, 0.0)  # positive first, a harder and an easier negative


@pytest.mark.parametrize(("tau", "loss"), [(0.1, 0.0185), (0.2, 0.1429), (0.5, 0.5015)])
def test_three_candidate_loss(tau, loss):
    assert impact.infonce_loss(THREE, 0, tau) == pytest.approx(loss, abs=5e-5)


@pytest.mark.parametrize(("tau", "share"), [(0.1, 0.9820), (0.5, 0.6900)])
def test_harder_negative_owns_the_negative_mass(tau, share):
    assert impact.negative_share(THREE, 0, 1, tau) == pytest.approx(share, abs=5e-4)


@pytest.mark.parametrize(("tau", "grad"), [(0.1, 0.1798), (0.2, 0.5866)])
def test_gradient_on_harder_negative(tau, grad):
    g = impact.infonce_grad(THREE, 0, tau)
    assert g[1] == pytest.approx(grad, abs=5e-5)
    assert g[0] < 0  # the positive is pulled up
    assert g.sum() == pytest.approx(0.0, abs=1e-12)  # softmax gradients sum to zero


def test_gradient_matches_finite_differences():
    scores = np.array([0.7, 0.8, 0.3, -0.2])
    eps = 1e-6
    for j in range(len(scores)):
        up, down = scores.copy(), scores.copy()
        up[j] += eps
        down[j] -= eps
        numeric = (impact.infonce_loss(up, 1, 0.05) - impact.infonce_loss(down, 1, 0.05)) / (
            2 * eps
        )
        assert impact.infonce_grad(scores, 1, 0.05)[j] == pytest.approx(numeric, rel=1e-5, abs=1e-7)


@pytest.mark.parametrize(
    ("tau", "row1", "row2", "mean", "duplicate"),
    [
        (1.0, 0.554, 0.644, 0.599, 1.066),
        (0.1, 0.049, 0.313, 0.181, 0.862),
        (0.02, 0.000, 0.007, 0.003, 0.697),
    ],
)
def test_worked_two_pair_example(tau, row1, row2, mean, duplicate):
    (row,) = impact.worked_example([tau])
    assert round(row["row1_loss"], 3) == row1
    assert round(row["row2_loss"], 3) == row2
    assert round(row["mean_loss"], 3) == mean
    assert round(row["row2_with_duplicate_loss"], 3) == duplicate


def test_loss_is_stable_at_tiny_temperature():
    assert np.isfinite(impact.infonce_loss([0.9, -0.9, 0.95], 0, 1e-4))
    assert impact.infonce_loss([0.9, 0.9], 0, 1e-4) == pytest.approx(np.log(2))


def test_loss_floors():
    assert impact.loss_floor(0.0, 0.02) == pytest.approx(np.log(2))
    # a same-product candidate 0.1 below the positive at τ=0.1 floors the loss at log(1+e^-1)
    assert impact.loss_floor(0.1, 0.1) == pytest.approx(np.log1p(np.exp(-1)))
    assert impact.copies_floor(3) == pytest.approx(np.log(4))
    # the floor is the loss of [positive, copy] alone
    assert impact.loss_floor(0.2, 0.05) == pytest.approx(impact.infonce_loss([0.9, 0.7], 0, 0.05))


def test_false_negative_share_rows():
    false = np.array([[0.8, -np.inf], [-np.inf, -np.inf]])
    true = np.array([[0.4, 0.0], [0.4, 0.0]])
    share = impact.false_negative_share(false, true, 0.1)
    assert share[0] == pytest.approx(impact.negative_share([1.0, 0.8, 0.4, 0.0], 0, 1, 0.1))
    assert share[1] == 0.0


def _brute_kappa(groups: np.ndarray) -> float:
    pairs = list(itertools.permutations(range(len(groups)), 2))
    return sum(groups[i] == groups[j] for i, j in pairs) / len(pairs)


@pytest.mark.parametrize("seed", range(5))
def test_kappa_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, rng.integers(2, 12), size=rng.integers(5, 30))
    sizes = np.unique(groups, return_counts=True)[1]
    assert impact.collision_rate(sizes) == pytest.approx(_brute_kappa(groups))


def test_kappa_edge_cases():
    assert impact.collision_rate([1, 1, 1]) == 0.0
    assert impact.collision_rate([4]) == 1.0
    assert impact.expected_false_negatives(33, 0.01) == pytest.approx(0.32)
    assert impact.expected_colliding_pairs(4, 0.5) == pytest.approx(3.0)


def _brute_clean(groups: np.ndarray, b: int) -> float:
    subsets = list(itertools.combinations(range(len(groups)), b))
    clean = sum(len(set(groups[list(s)])) == b for s in subsets)
    return clean / len(subsets)


@pytest.mark.parametrize("seed", range(4))
def test_p_batch_clean_exact_on_small_groupings(seed):
    rng = np.random.default_rng(100 + seed)
    groups = rng.integers(0, 7, size=11)
    sizes = np.unique(groups, return_counts=True)[1]
    for b in (2, 3, 5):
        assert impact.p_batch_clean(sizes, b) == pytest.approx(_brute_clean(groups, b), abs=1e-12)


def test_p_batch_clean_matches_exact_integer_counts_on_many_groups():
    """Thousands of groups and batches deep into the tail (P below 1e-30): the compiled
    recurrence against e_B(n_1..n_G) / C(N, B) in exact integers."""
    rng = np.random.default_rng(11)
    sizes = np.concatenate([np.ones(1500, int), rng.integers(2, 9, 600), [40, 120]]).tolist()
    batches = [2, 16, 64, 200, 450]
    e = [1] + [0] * max(batches)
    for n in sizes:
        for k in range(len(e) - 1, 0, -1):
            e[k] += n * e[k - 1]
    got = impact.clean_batch_probabilities(sizes, batches)
    for b in batches:
        exact = float(Fraction(e[b], math.comb(sum(sizes), b)))
        assert got[b] == pytest.approx(exact, rel=1e-9)
    assert got[450] < 1e-30  # the tail is reached


def test_p_batch_clean_against_simulation():
    rng = np.random.default_rng(7)
    sizes = np.concatenate([np.ones(300, int), rng.integers(2, 6, size=60)])
    groups = np.repeat(np.arange(len(sizes)), sizes)
    b, trials = 24, 20_000
    clean = sum(
        len(np.unique(rng.choice(groups, size=b, replace=False))) == b for _ in range(trials)
    )
    expected = impact.p_batch_clean(sizes, b)
    sigma = np.sqrt(expected * (1 - expected) / trials)
    assert 0.05 < expected < 0.95  # a regime where the check can fail
    assert abs(clean / trials - expected) < 4 * sigma


def test_p_batch_clean_limits():
    assert impact.p_batch_clean([1] * 50, 50) == pytest.approx(1.0)
    assert impact.p_batch_clean([2] * 10, 11) == 0.0
    assert impact.p_batch_clean([3, 3], 7) is None


def test_collision_table_and_realised_collisions():
    sizes = [3, 1, 1, 2]
    table = impact.collision_table(sizes, [2, 4, 32])
    kappa = (6 + 2) / (7 * 6)
    assert table[0]["false_negatives_per_anchor"] == pytest.approx(kappa)
    assert table[2]["p_batch_clean"] is None
    realised = impact.realised_collisions(np.array([5, 5, 1, 2, 5, 2, 3]), 3)
    # batches [5,5,1] [2,5,2] [3]: one pair each in the first two
    assert realised["colliding_pairs"] == 2
    assert realised["dirty_batches"] == 2
    assert realised["batches"] == 3


def test_temperature_table_from_scores():
    positive = np.array([0.9, 0.8, 0.7])
    false = np.array([[0.85], [-np.inf], [0.7]])
    true = np.array([[0.5, 0.2], [0.6, 0.1], [0.3, 0.3]])
    low, high = impact.temperature_table(positive, false, true, [0.02, 1.0])
    assert low["rows_with_false_negative"] == 2
    assert low["mean_gap"] == pytest.approx(0.025)
    floors = [impact.loss_floor(0.05, 0.02), impact.loss_floor(0.0, 0.02)]
    assert low["mean_loss_floor"] == pytest.approx(np.mean(floors))
    # smaller temperature hands more of the push on negatives to the false negatives
    assert low["false_negative_gradient_share"] > high["false_negative_gradient_share"]


def test_realised_collisions_count_hard_negatives_of_any_row():
    groups = np.array([1, 2, 3, 4])
    negatives = np.array([[2, -1], [9, 8], [4, 1], [7, -1]])
    realised = impact.realised_collisions(groups, 2, negatives)
    # batch [1,2]: row 1's negative 2 is row 2's product -> 1 hit for anchor 2
    # batch [3,4]: row 3's negative 4 -> 1 hit for anchor 4 (its negative 1 is out of the batch)
    assert realised["colliding_pairs"] == 0
    assert realised["hard_negative_false_negatives_per_anchor"] == pytest.approx(2 / 4)
    assert realised["dirty_batches"] == 2


def test_clean_probabilities_for_many_batch_sizes_match_single_runs():
    rng = np.random.default_rng(3)
    sizes = np.concatenate([np.ones(40, int), rng.integers(2, 9, size=30)])
    together = impact.clean_batch_probabilities(sizes, [2, 8, 30, 10_000])
    assert together[10_000] is None
    for b in (2, 8, 30):
        assert together[b] == pytest.approx(impact.p_batch_clean(sizes, b))
    # two rows: P(clean) = 1 - κ exactly
    assert together[2] == pytest.approx(1 - impact.collision_rate(sizes))
