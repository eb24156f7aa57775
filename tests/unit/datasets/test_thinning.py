"""Thinning a synthetic marketplace to a share of copies: the share, determinism, nesting."""

from __future__ import annotations

import polars as pl
import pytest

from pairsieve.datasets.thinning import copy_share, thin_to_copy_share
from pairsieve.errors import PairsieveError
from pairsieve.schemas import TRUE_PRODUCT_ID
from tests.paths import SAMPLE_DIR


@pytest.fixture(scope="module")
def catalog() -> pl.DataFrame:
    return pl.read_parquet(SAMPLE_DIR / "catalog.parquet")


@pytest.mark.parametrize("share", [0.0, 0.25, 0.5])
def test_thinning_reaches_the_share_and_keeps_every_product(catalog, share):
    thinned = thin_to_copy_share(catalog, share, seed=1)
    assert copy_share(thinned) == pytest.approx(share, abs=0.03)
    assert thinned[TRUE_PRODUCT_ID].n_unique() == catalog[TRUE_PRODUCT_ID].n_unique()
    assert set(thinned["listing_id"]) <= set(catalog["listing_id"])


def test_thinning_ignores_row_order_and_nests(catalog):
    low = thin_to_copy_share(catalog, 0.25, seed=1)
    shuffled = thin_to_copy_share(catalog.sample(fraction=1.0, shuffle=True, seed=5), 0.25, seed=1)
    assert sorted(low["listing_id"]) == sorted(shuffled["listing_id"])
    high = thin_to_copy_share(catalog, 0.5, seed=1)
    assert set(low["listing_id"]) <= set(high["listing_id"])
    assert sorted(thin_to_copy_share(catalog, 0.25, seed=2)["listing_id"]) != sorted(
        low["listing_id"]
    )


def test_thinning_only_drops(catalog):
    with pytest.raises(PairsieveError, match="must lie in"):
        thin_to_copy_share(catalog, 0.99)
