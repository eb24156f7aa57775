"""Abt-Buy entity-resolution benchmark (Köpcke, Thor, Rahm 2010) as one labelled catalog.

Abt.csv is latin-1 (it holds "®" as byte 0xAE), Buy.csv is UTF-8. The ground truth is the
connected components of ``abt_buy_perfectMapping.csv``: 1,097 matches form 1,076 products (21 of
three records); records in no match are singleton products.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.datasets.files import find_file, with_match_products

FOLDER = "abt-buy"
_PRICE = pl.col("price").str.replace_all(r"[$,\s]", "").cast(pl.Float64, strict=False)


def _shop(path: Path, shop: str, encoding: str) -> pl.DataFrame:
    raw = pl.read_csv(path, encoding=encoding, infer_schema=False)
    brand = pl.col("manufacturer") if "manufacturer" in raw.columns else pl.lit(None, pl.String)
    return raw.select(
        (pl.lit(f"{shop}:") + pl.col("id")).alias(S.LISTING_ID),
        pl.col("name").alias(S.TITLE),
        pl.col("description").alias(S.DESCRIPTION),
        brand.alias(S.BRAND),
        _PRICE.alias(S.PRICE),
        pl.lit(shop).alias(S.SELLER_ID),
    )


def load_catalog(root: Path) -> pl.DataFrame:
    """Abt + Buy as one catalog: ``listing_id`` ("abt:38477", "buy:10011646"), ``title``,
    ``description``, ``brand`` (Buy's manufacturer), ``price``, ``seller_id`` (the shop) and
    ``true_product_id`` (smallest listing id of the record's mapping component).

    Raises:
        PairsieveError: ``missing_file`` when a file is absent.
    """
    abt = _shop(find_file(root, "Abt.csv", FOLDER), "abt", "latin-1")
    buy = _shop(find_file(root, "Buy.csv", FOLDER), "buy", "utf8")
    mapping = pl.read_csv(find_file(root, "abt_buy_perfectMapping.csv", FOLDER), infer_schema=False)
    catalog = pl.concat([abt, buy])
    return with_match_products(catalog, "abt:" + mapping["idAbt"], "buy:" + mapping["idBuy"])
