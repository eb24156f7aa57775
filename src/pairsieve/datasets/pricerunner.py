"""PriceRunner product-clustering benchmark as a labelled catalog.

35,311 offers from 306 merchants, 13,233 products (``cluster_id``); see the README beside
the data files. Titles are kept verbatim: they are the text a matcher sees.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.datasets.files import find_file
from pairsieve.errors import PairsieveError

FILE_NAME = "pricerunner_aggregate.csv"
_SOURCE_COLUMNS = {
    "product_id": pl.Int64,
    "product_title": pl.String,
    "vendor_id": pl.Int64,
    "cluster_id": pl.Int64,
    "cluster_label": pl.String,
    "category_label": pl.String,
}


def load_catalog(root: Path) -> pl.DataFrame:
    """Read PriceRunner into the catalog contract with its ground truth.

    Columns: ``listing_id`` (offer id), ``title``, ``seller_id`` (vendor), ``category``,
    ``true_product_id`` (cluster id) and ``true_product_name`` (PriceRunner's cluster label,
    the product's canonical name), all strings, in file order.

    Raises:
        PairsieveError: ``missing_file`` / ``missing_column`` when the file is absent or altered.
    """
    path = find_file(root, FILE_NAME, "pricerunner")
    header = pl.read_csv(path, n_rows=0).columns
    missing = [c for c in _SOURCE_COLUMNS if c not in header]
    if missing:
        raise PairsieveError(
            "missing_column", "PriceRunner file lacks a column", file=str(path), column=missing[0]
        )
    raw = pl.read_csv(path, schema_overrides=_SOURCE_COLUMNS)
    return raw.select(
        pl.col("product_id").cast(pl.String).alias(S.LISTING_ID),
        pl.col("product_title").alias(S.TITLE),
        pl.col("vendor_id").cast(pl.String).alias(S.SELLER_ID),
        pl.col("category_label").alias(S.CATEGORY),
        pl.col("cluster_id").cast(pl.String).alias(S.TRUE_PRODUCT_ID),
        pl.col("cluster_label").alias(S.TRUE_PRODUCT_NAME),
    )
