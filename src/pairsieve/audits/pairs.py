"""The (positive, negative) pairs of an audited dataset: the listing that stands for each of its
texts, the clustering that judges every pair besides its candidates, and each pair's
``p_same`` read back from that clustering's ``pairs.parquet``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.labels.pairs import LINKED, ROWS, pair_ids
from pairsieve.pair_model.calibration import load_calibration

NEGATIVES = "negatives"  # list[str] column of the normalised dataset


def text_listings(listings: pl.DataFrame) -> pl.DataFrame:
    """(title, listing_id): the listing that stands for each distinct text (its smallest id)."""
    return (
        listings.select(S.TITLE, pl.col(S.LISTING_ID).cast(pl.String))
        .sort(S.LISTING_ID)
        .unique(S.TITLE, keep="first", maintain_order=True)
    )


def negative_pairs(data: pl.DataFrame, listings: pl.DataFrame) -> pl.DataFrame:
    """One row per (row, negative) in file order: ``_row``, the texts, ``_false`` when ``data``
    has it, and their listings (``listing_a`` the positive's, ``listing_b`` the negative's)."""
    ids = text_listings(listings)
    flags = ["_false"] if "_false" in data.columns else []
    return (
        data.with_row_index("_row")
        .select("_row", S.POSITIVE, NEGATIVES, *flags)
        .explode([NEGATIVES, *flags])
        .join(
            ids.rename({S.TITLE: S.POSITIVE, S.LISTING_ID: S.LISTING_A}),
            on=S.POSITIVE,
            maintain_order="left",
        )
        .join(
            ids.rename({S.TITLE: NEGATIVES, S.LISTING_ID: S.LISTING_B}),
            on=NEGATIVES,
            maintain_order="left",
        )
    )


def cluster_texts(
    cfg: PairsieveConfig, listings: pl.DataFrame, work_dir: Path, encoder: Any, data: pl.DataFrame
) -> pl.DataFrame:
    """(title, product_id) for every distinct text, via the cluster stage (files in work_dir),
    which also judges every (positive, negative) pair of ``data``."""
    from pairsieve.cluster import stage as cluster

    requested = negative_pairs(data, listings).select(S.LISTING_A, S.LISTING_B)
    cluster.run(cfg, cluster.Inputs(listings, requested), work_dir, encoder=encoder)
    products = pl.read_parquet(work_dir / S.PRODUCTS_FILE)
    return (
        text_listings(listings)
        .join(products.select(S.LISTING_ID, S.PRODUCT_ID), on=S.LISTING_ID)
        .select(S.TITLE, S.PRODUCT_ID)
    )


def negative_table(
    labelled: pl.DataFrame, listings: pl.DataFrame, work_dir: Path
) -> pl.DataFrame | None:
    """One row per (row, negative) of the labelled dataset, in order: ``_row``, the texts,
    their listings, ``_false`` (clustered into the positive's product) and ``p_same``, the
    probability that the negative is its positive's product. A copy of the positive's text is
    1; identical normalised titles get the calibrated share of such pairs; other pairs their
    probability in the clustering's ``pairs.parquet`` (every pair is judged there, as
    `cluster_texts` requests them; one that is not counts by its clusters). None when the
    clustering wrote no probabilities (the rule judge)."""
    pairs = pl.read_parquet(
        work_dir / S.PAIRS_FILE, columns=[S.LISTING_A, S.LISTING_B, S.SIGNAL, S.P_SAME]
    )
    if pairs.height and pairs[S.P_SAME].null_count() == pairs.height:
        return None
    is_exact = pl.col(S.SIGNAL) == "exact"
    # Scored pairs name each node by its representative listing; the exact rows link every
    # other listing of a node (same normalised title) to it.
    rep_of = pairs.filter(is_exact).select(
        pl.col(S.LISTING_B).alias("_id"), pl.col(S.LISTING_A).alias("_rep")
    )
    judged = pairs.filter(~is_exact).select(
        pl.min_horizontal(S.LISTING_A, S.LISTING_B).alias("_lo"),
        pl.max_horizontal(S.LISTING_A, S.LISTING_B).alias("_hi"),
        S.P_SAME,
    )
    flat = negative_pairs(labelled, listings)
    for end, rep in ((S.LISTING_A, "_ra"), (S.LISTING_B, "_rb")):
        flat = flat.join(rep_of, left_on=end, right_on="_id", how="left", maintain_order="left")
        flat = flat.with_columns(pl.coalesce("_rep", end).alias(rep)).drop("_rep")
    flat = flat.with_columns(
        pl.min_horizontal("_ra", "_rb").alias("_lo"), pl.max_horizontal("_ra", "_rb").alias("_hi")
    ).join(judged, on=["_lo", "_hi"], how="left", maintain_order="left")
    p = (
        pl.when(pl.col(S.POSITIVE) == pl.col(NEGATIVES))
        .then(1.0)
        .when(pl.col("_ra") == pl.col("_rb"))
        .then(load_calibration().exact)
        .otherwise(pl.col(S.P_SAME).fill_null(pl.col("_false").cast(pl.Float64)))
    )
    return flat.select(
        "_row", S.POSITIVE, NEGATIVES, S.LISTING_A, S.LISTING_B, "_false", p.alias(S.P_SAME)
    )


def per_row(table: pl.DataFrame) -> pl.Series:
    """``p_same`` of each row's negatives, as a list per row in order."""
    rows = table.group_by("_row", maintain_order=True).agg(pl.col(S.P_SAME).cast(pl.Float64))
    return rows[S.P_SAME]


def distinct_pairs(table: pl.DataFrame) -> pl.DataFrame:
    """The audit's pairs to estimate over and to label: one row per distinct (positive,
    negative) with its ``pair_id``, listings, texts, ``p_same``, ``linked`` and ``rows`` (how
    many of the dataset's negatives it is)."""
    return (
        table.group_by(S.POSITIVE, NEGATIVES)
        .agg(
            pl.col(S.LISTING_A).first(),
            pl.col(S.LISTING_B).first(),
            pl.col(S.P_SAME).first().cast(pl.Float64),
            pl.col("_false").first().alias(LINKED),
            pl.len().cast(pl.Int64).alias(ROWS),
        )
        .with_columns(
            pair_ids("audit", S.POSITIVE, NEGATIVES).alias("pair_id"),
            pl.lit("audit").alias("source"),
        )
        .rename({S.POSITIVE: "text_a", NEGATIVES: "text_b"})
        .select(
            "pair_id",
            S.LISTING_A,
            S.LISTING_B,
            "text_a",
            "text_b",
            S.P_SAME,
            "source",
            LINKED,
            ROWS,
        )
        .sort("pair_id")
    )
