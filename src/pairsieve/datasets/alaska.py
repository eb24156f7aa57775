"""Alaska camera benchmark (DI2KG, SIGMOD 2020 contest; the small version) as one labelled
catalog.

5,786 camera offers from 24 shops, 79% of them eBay: long, noisy titles full of specifications
and shop boilerplate ("... price comparison at buy.net"). ``matches.csv`` lists 11,444
same-product offer pairs, inside shops as well as across them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.datasets.files import find_file, with_match_products

FOLDER = "alaska-cameras"


def load_catalog(root: Path) -> pl.DataFrame:
    """``listing_id`` (the offer's ``_id``, "www.ebay.com//46771"), ``title`` (its description),
    ``brand``, ``seller_id`` (the shop, the id's prefix) and ``true_product_id`` (smallest
    listing id of the offer's match component).

    Raises:
        PairsieveError: ``missing_file`` when a file is absent.
    """
    raw = pl.read_csv(find_file(root, "offers.csv", FOLDER), infer_schema=False)
    matches = pl.read_csv(find_file(root, "matches.csv", FOLDER), infer_schema=False)
    catalog = raw.select(
        pl.col("_id").alias(S.LISTING_ID),
        pl.col("description").alias(S.TITLE),
        pl.col("brand").alias(S.BRAND),
        pl.col("_id").str.split("//").list.first().alias(S.SELLER_ID),
    )
    return with_match_products(catalog, matches["l_id"], matches["r_id"])
