"""A labelled catalog thinned to a chosen share of duplicate listings.

The dose-response of the training experiment needs one marketplace at several duplicate levels.
A listing is a *copy* when another listing of its product comes before it; the share of copies
among listings is what thinning sets. Every product keeps one listing (its first by a seeded
hash of the listing id), and each other listing stays with the one probability that brings the
expected share to the target. Draws are hashes of (seed, listing id), so the result does not
depend on row order and a listing kept at a share stays kept at any higher share.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.core.hashing import seeded_keys
from pairsieve.errors import PairsieveError


def copy_share(catalog: pl.DataFrame, truth_column: str = S.TRUE_PRODUCT_ID) -> float:
    """Share of listings that are a copy: 1 - products / listings."""
    return 1 - catalog[truth_column].n_unique() / max(catalog.height, 1)


def thin_to_copy_share(
    catalog: pl.DataFrame, share: float, seed: int = 0, truth_column: str = S.TRUE_PRODUCT_ID
) -> pl.DataFrame:
    """`catalog` with copies dropped until about `share` of its listings are copies.

    Raises:
        PairsieveError: a share outside [0, 1) or above the catalog's own (thinning only drops).
    """
    current = copy_share(catalog, truth_column)
    if not 0 <= share < 1 or share > current + 1e-9:
        raise PairsieveError(
            "bad_argument",
            f"copy share {share} must lie in [0, {current:.3f}], the catalog's own share",
        )
    ids = catalog[S.LISTING_ID].to_list()
    ranked = catalog.with_columns(
        pl.Series("_order", seeded_keys(ids, seed)),
        pl.Series("_u", _uniform(seeded_keys(ids, seed + 1))),  # independent of the order
    ).with_columns(pl.col("_order").rank("ordinal").over(truth_column).alias("_rank"))
    products = catalog[truth_column].n_unique()
    extras = catalog.height - products
    wanted = products * share / (1 - share)  # copies that make copies / listings = share
    keep = 1.0 if extras == 0 else min(1.0, wanted / extras)
    kept = ranked.filter((pl.col("_rank") == 1) | (pl.col("_u") < keep))
    return kept.drop("_order", "_u", "_rank")


def _uniform(keys: np.ndarray) -> np.ndarray:
    """A float64 in [0, 1) per uint64 key."""
    return (keys >> np.uint64(11)).astype(np.float64) / float(1 << 53)
