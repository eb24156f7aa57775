"""Altosight benchmark (SIGMOD 2021 programming contest) as one labelled catalog.

13,958 offers for USB sticks and memory cards from many shops, titles in several languages,
about 30 offers per product: the most duplicate-heavy catalog of the five. The file's ``id`` is
the product; offers have no id of their own, so they are numbered in file order.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.datasets.files import find_file

FOLDER = "altosight"


def load_catalog(root: Path) -> pl.DataFrame:
    """``listing_id`` ("alto:0" ... in file order), ``title`` (the offer's name), ``brand``,
    ``price`` (in the shop's currency) and ``true_product_id`` (the file's ``id``).

    Raises:
        PairsieveError: ``missing_file`` when the file is absent.
    """
    raw = pl.read_csv(find_file(root, "altosight.csv", FOLDER), infer_schema=False)
    return raw.with_row_index("_row").select(
        (pl.lit("alto:") + pl.col("_row").cast(pl.String)).alias(S.LISTING_ID),
        pl.col("name").alias(S.TITLE),
        pl.col("brand").alias(S.BRAND),
        pl.col("price").cast(pl.Float64, strict=False).alias(S.PRICE),
        pl.col("id").alias(S.TRUE_PRODUCT_ID),
    )
