"""The truth-gaps benchmark sorts each predicted cross-shop pair by what a match list knows."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from tests.unit.benchmarks.scripts import benchmark_module


@pytest.fixture(scope="module")
def truth_gaps():
    with benchmark_module("truth_gaps") as module:
        yield module


def test_every_kind_of_pair_is_told_apart(truth_gaps) -> None:
    # w1-a1 are a listed match, and a2 is the same shop's second copy of a1's product; w2 and
    # a3 have no match listed; w3's match a4 sits in another cluster than w3. Shop "a" sorts
    # first, so its listing is each pair's left.
    catalog = pl.DataFrame(
        {
            S.LISTING_ID: ["w1", "a1", "a2", "w2", "a3", "w3", "a4", "a5"],
            S.TITLE: ["t"] * 8,
            S.SELLER_ID: ["w", "a", "a", "w", "a", "w", "a", "a"],
            S.TRUE_PRODUCT_ID: ["p1", "p1", "p2", "p3", "p4", "p5", "p5", "p6"],
        }
    )
    predicted = np.array([0, 0, 0, 1, 1, 2, 3, 2])
    pairs = truth_gaps.kind_of(truth_gaps.cross_shop_pairs(catalog, predicted))
    ends = pairs.select(S.LISTING_ID, f"{S.LISTING_ID}_right").rows()
    kinds = dict(zip(ends, pairs["kind"], strict=True))
    assert kinds == {
        ("a1", "w1"): "true",
        ("a2", "w1"): "a match of one record is in the cluster",
        ("a3", "w2"): "neither record has a match",
        ("a5", "w3"): "one record has no match",
    }
