"""A dataset's negatives judged as the build's miner judges candidates, on real titles."""

from __future__ import annotations

import polars as pl

from pairsieve import schemas as S
from pairsieve.cleaning.verdicts import judge
from pairsieve.config import MineConfig
from pairsieve.mine import stage as mine
from tests.unit.mine.test_stage import JUDGED_TITLES

# Another model code above the positive, a reworded copy the clusterer missed, a copy it found
# ("clustered": the positive's product id), two listings of one other product, one far below.
TITLES = {
    **JUDGED_TITLES,
    "clustered": "cda fw852 50/50 integrated fridge-freezer",
    "washer_a": "bosch wan28081gb serie 4 washing machine",
    "washer_b": "bosch wan28081gb washing machine white",
}
PRODUCT = {"clustered": "p"}  # every other listing is its own product


def _products() -> pl.DataFrame:
    listings = pl.DataFrame({S.LISTING_ID: list(TITLES), S.TITLE: list(TITLES.values())})
    ids = [PRODUCT.get(k, k) if k != "washer_b" else "washer_a" for k in TITLES]
    return mine.listing_products(
        listings, pl.DataFrame({S.LISTING_ID: list(TITLES), S.PRODUCT_ID: ids})
    )


def _table(negatives: dict[str, float]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            S.QUERY: "cda fw852 fridge freezer",
            S.POSITIVE_LISTING_ID: "p",
            S.NEGATIVE_LISTING_ID: list(negatives),
            S.SCORE: list(negatives.values()),
            S.POSITIVE_SCORE: 0.6,
        }
    )


def verdicts(negatives: dict[str, float], density: float) -> dict[str, str | None]:
    cfg = MineConfig(copy_density=density)
    judged = judge(_table(negatives), _products(), cfg)
    return dict(zip(judged[S.NEGATIVE_LISTING_ID], judged[S.REASON], strict=True))


def test_a_reworded_copy_is_unsafe_and_another_model_above_the_positive_is_kept():
    found = verdicts({"code": 0.9, "reworded": 0.85, "below": 0.3}, density=0.005)
    assert found == {"code": None, "reworded": "margin", "below": None}


def test_the_positives_own_product_and_its_own_text_are_unsafe_at_any_score():
    found = verdicts({"clustered": 0.1, "p": 0.95, "below": 0.3}, density=0.005)
    assert found == {"clustered": "same_product", "p": "same_listing", "below": None}


def test_two_listings_of_one_other_product_are_both_safe():
    """The miner keeps one negative per product by choice, not because the second is unsafe:
    a dataset that holds two keeps both."""
    found = verdicts({"washer_a": 0.3, "washer_b": 0.29}, density=0.005)
    assert found == {"washer_a": None, "washer_b": None}


def test_where_copies_are_many_the_same_variant_is_left_to_the_margin():
    found = verdicts({"code": 0.9, "reworded": 0.85}, density=0.5)
    assert found == {"code": "margin", "reworded": "judged_copy"}
