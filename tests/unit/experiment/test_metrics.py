"""Held-out retrieval metrics against a count by hand, and the paired bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pairsieve.experiment.compare import paired_difference
from pairsieve.experiment.retrieval import score, top_k


def brute_force(hit_row: list[bool], relevant: int) -> dict[str, float]:
    """The textbook definitions, one query at a time."""
    hits = sum(hit_row)
    dcg = sum(1 / math.log2(rank + 2) for rank, h in enumerate(hit_row) if h)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(relevant, len(hit_row))))
    first = next((rank + 1 for rank, h in enumerate(hit_row) if h), None)
    return {
        "recall@10": hits / relevant if relevant else 0.0,
        "ndcg@10": dcg / ideal if relevant else 0.0,
        "mrr@10": 1 / first if first else 0.0,
    }


def test_scores_equal_the_textbook_definitions():
    rng = np.random.default_rng(3)
    hit = rng.random((200, 10)) < 0.2
    relevant = np.maximum(hit.sum(axis=1), rng.integers(0, 40, 200))  # 0 where no hit possible
    got = score(np.zeros((200, 10), dtype=np.int64), hit, relevant)
    for i in range(200):
        expected = brute_force(hit[i].tolist(), int(relevant[i]))
        for metric, value in expected.items():
            assert got[metric][i] == pytest.approx(value), (metric, i)


def test_a_perfect_ranking_scores_one_and_thirty_copies_cap_recall():
    hit = np.ones((2, 10), dtype=bool)
    got = score(np.zeros((2, 10), dtype=np.int64), hit, np.array([10, 30]))
    assert got["ndcg@10"].tolist() == pytest.approx([1.0, 1.0])
    assert got["recall@10"].tolist() == pytest.approx([1.0, 1 / 3])
    assert got["mrr@10"].tolist() == [1.0, 1.0]


def test_top_k_is_exact_inner_product_search():
    rng = np.random.default_rng(0)
    corpus = rng.normal(size=(300, 16)).astype(np.float32)
    queries = rng.normal(size=(20, 16)).astype(np.float32)
    expected = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :10]
    assert (top_k(queries, corpus) == expected).all()


def test_paired_difference_of_a_constant_shift_is_that_shift_with_a_tight_interval():
    rng = np.random.default_rng(1)
    baseline = rng.random((3, 400))
    difference, (lo, hi) = paired_difference(baseline + 0.02, baseline)
    assert difference == pytest.approx(0.02)
    assert lo == pytest.approx(0.02) and hi == pytest.approx(0.02)


def test_paired_interval_covers_noise_and_excludes_zero_for_a_real_gap():
    rng = np.random.default_rng(2)
    baseline = rng.random((3, 500))
    noisy = baseline + rng.normal(0, 0.1, size=baseline.shape)
    difference, (lo, hi) = paired_difference(noisy, baseline)
    assert lo < 0 < hi and lo <= difference <= hi
    _, (lo, hi) = paired_difference(noisy + 0.05, baseline)
    assert lo > 0


def test_a_one_row_baseline_pairs_with_every_seed_and_shapes_must_agree():
    arm = np.array([[0.5, 0.7], [0.6, 0.8]])
    difference, _ = paired_difference(arm, np.array([0.5, 0.5]))
    assert difference == pytest.approx(0.15)
    with pytest.raises(ValueError, match="different queries"):
        paired_difference(arm, np.zeros((1, 3)))
