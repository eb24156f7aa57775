"""Clustering metrics against brute-force pair and per-item counts."""

from __future__ import annotations

import itertools
import random

import pytest

from pairsieve.datasets import scoring


def _b_cubed(pred: list[int], true: list[int], own: list[int]) -> float:
    """Per item, the share of the items in its ``own`` cluster (predicted: precision; true:
    recall) that share both its predicted and true cluster; averaged over items."""
    n = len(pred)
    return (
        sum(
            sum(pred[j] == pred[i] and true[j] == true[i] for j in range(n))
            / sum(own[j] == own[i] for j in range(n))
            for i in range(n)
        )
        / n
    )


def _brute(pred: list[int], true: list[int], source: list[int] | None = None) -> dict[str, float]:
    n = len(pred)
    pairs = list(itertools.combinations(range(n), 2))
    if source is not None:  # pairwise figures over cross-source pairs only
        pairs = [(i, j) for i, j in pairs if source[i] != source[j]]
    same_pred = {p for p in pairs if pred[p[0]] == pred[p[1]]}
    same_true = {p for p in pairs if true[p[0]] == true[p[1]]}
    correct = len(same_pred & same_true)
    p = correct / len(same_pred) if same_pred else 1.0
    r = correct / len(same_true) if same_true else 1.0
    return {"p": p, "r": r, "b3p": _b_cubed(pred, true, pred), "b3r": _b_cubed(pred, true, true)}


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("shops", [0, 3], ids=["all pairs", "cross-shop pairs"])
def test_metrics_match_brute_force(seed: int, shops: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    pred = [rng.randint(0, rng.randint(1, 12)) for _ in range(n)]
    true = [rng.randint(0, rng.randint(1, 12)) for _ in range(n)]
    source = [rng.randint(0, shops - 1) for _ in range(n)] if shops else None
    got = scoring.score(pred, true, source)
    want = _brute(pred, true, source)
    assert got.pairwise_precision == pytest.approx(want["p"], abs=1e-4)
    assert got.pairwise_recall == pytest.approx(want["r"], abs=1e-4)
    assert got.bcubed_precision == pytest.approx(want["b3p"], abs=1e-4)  # over every listing
    assert got.bcubed_recall == pytest.approx(want["b3r"], abs=1e-4)
    assert got.clusters == len(set(pred))
    assert got.largest_cluster == max(pred.count(x) for x in set(pred))


def test_a_merge_inside_one_shop_is_not_counted_across_shops() -> None:
    # two shops; the truth links a1-b1 only; the clustering also merges a1 with a2 (same shop)
    pred, true, shop = ["x", "x", "x"], ["p", "p", "q"], ["a", "b", "a"]
    across = scoring.score(pred, true, shop)
    assert (across.predicted_pairs, across.true_pairs) == (2, 1)
    assert across.pairwise_precision == 0.5 and across.pairwise_recall == 1.0
    assert scoring.score(pred, true).predicted_pairs == 3


def test_perfect_and_all_in_one() -> None:
    true = ["a", "a", "b", "c", "c", "c"]
    perfect = scoring.score(["x", "x", "y", "z", "z", "z"], true)
    assert (perfect.pairwise_f1, perfect.bcubed_f1) == (1.0, 1.0)
    lumped = scoring.score([0] * 6, true)
    assert lumped.pairwise_recall == 1.0
    assert lumped.pairwise_precision == pytest.approx(4 / 15, abs=1e-4)
    assert lumped.largest_cluster == 6


def test_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="equally long"):
        scoring.score([1, 2], [1])
