"""Walmart-Amazon entity-resolution benchmark (Magellan / DeepMatcher) as one labelled catalog.

Two shops' electronics catalogs, pipe-separated: Walmart 2,554 and Amazon 22,069 records. The
truth, ``gt.csv``, lists the 853 Walmart-Amazon matches, so it only links listings across the
two shops: a merge inside one shop is unlabelled, and the catalog is scored on cross-shop pairs
(`pairsieve.datasets.scoring.score` with ``source``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.datasets.files import find_file, with_match_products

FOLDER = "walmart-amazon"


def _shop(path: Path, shop: str) -> pl.DataFrame:
    raw = pl.read_csv(path, separator="|", infer_schema=False, quote_char=None)
    return raw.select(
        (pl.lit(f"{shop}:") + pl.col("id")).alias(S.LISTING_ID),
        pl.col("title").alias(S.TITLE),
        pl.col("brand").alias(S.BRAND),
        pl.col("price").cast(pl.Float64, strict=False).alias(S.PRICE),
        pl.lit(shop).alias(S.SELLER_ID),
    )


def load_catalog(root: Path) -> pl.DataFrame:
    """Walmart + Amazon as one catalog: ``listing_id`` ("walmart:1190", "amazon:10706"),
    ``title``, ``brand``, ``price``, ``seller_id`` (the shop) and ``true_product_id`` (smallest
    listing id of the record's match component; unmatched records are their own product).

    Raises:
        PairsieveError: ``missing_file`` when a file is absent.
    """
    walmart = _shop(find_file(root, "walmart.csv", FOLDER), "walmart")
    amazon = _shop(find_file(root, "amazon.csv", FOLDER), "amazon")
    matches = pl.read_csv(find_file(root, "gt.csv", FOLDER), separator="|", infer_schema=False)
    catalog = pl.concat([walmart, amazon])
    return with_match_products(catalog, "walmart:" + matches["D1"], "amazon:" + matches["D2"])
