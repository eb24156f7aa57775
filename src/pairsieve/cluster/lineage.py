"""Product ids that survive rebuilds: reconcile today's clusters with the previous build's ids.

Clustering alone gives ids that are a function of each cluster's members, so a product that gains
a seller would change id and every trainer-side reference to it would break. Reconciliation keeps
yesterday's id wherever the product is still recognisably the same:

- a cluster whose listings were all unseen is a new product and keeps its fresh id;
- a cluster holding listings of one previous product keeps that product's id (new copies join it);
- a cluster holding listings of several previous products is a merge: the oldest id survives
  (earliest `first_seen`, then smallest id) and the others are recorded as its aliases;
- a previous product whose listings now fall in several clusters is a split: the cluster holding
  most of them keeps the id, the others get fresh ids;
- a previous product with no listing left is removed.
Every change is a row of `id_changes.parquet`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.core import io
from pairsieve.core.contract import StageResult, load_result
from pairsieve.core.facts import ClusterFacts
from pairsieve.core.hashing import hex_digest
from pairsieve.core.layout import RunLayout

FIRST_SEEN = "first_seen"
OTHER_PRODUCT_ID = "other_product_id"
_PREV = "previous_product_id"
_PREV_SEEN = "previous_first_seen"

CHANGES_SCHEMA = {
    S.CHANGE: pl.String,
    S.PRODUCT_ID: pl.String,
    OTHER_PRODUCT_ID: pl.String,
    "listings": pl.Int64,
}


def _candidates(current: pl.DataFrame, previous: pl.DataFrame) -> pl.DataFrame:
    """Per current cluster and previous id met in it: members shared and the previous id's age."""
    prev = previous.select(
        S.LISTING_ID, pl.col(S.PRODUCT_ID).alias(_PREV), pl.col(FIRST_SEEN).alias(_PREV_SEEN)
    )
    return (
        current.select(S.LISTING_ID, S.PRODUCT_ID)
        .join(prev, on=S.LISTING_ID, how="inner")
        .group_by(S.PRODUCT_ID, _PREV, _PREV_SEEN)
        .agg(pl.len().alias("shared"), pl.col(S.LISTING_ID).min().alias("first_member"))
    )


def reconcile(
    current: pl.DataFrame, previous: pl.DataFrame, build_number: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Map this build's fresh cluster ids onto the previous build's ids.

    Args:
        current: products of this build (`listing_id`, `product_id` = fresh id, ...).
        previous: the previous build's products (`listing_id`, `product_id`, `first_seen`).
        build_number: `first_seen` given to products born in this build.

    Returns:
        (current with reconciled `product_id` and `first_seen`, id changes table).
    """
    cand = _candidates(current, previous)
    # The oldest previous id in each cluster is the one it claims (merges keep the oldest).
    claims = cand.sort(_PREV_SEEN, _PREV).group_by(S.PRODUCT_ID, maintain_order=True).first()
    # A previous id claimed by several clusters (a split) goes to the one sharing most listings.
    winners = (
        claims.sort(["shared", "first_member"], descending=[True, False])
        .group_by(_PREV, maintain_order=True)
        .first()
        .select(S.PRODUCT_ID, _PREV, _PREV_SEEN)
    )
    mapping = current.select(S.PRODUCT_ID).unique().join(winners, on=S.PRODUCT_ID, how="left")
    # A fresh id may equal a previous product's id (ids derive from members): re-derive it.
    taken = previous[S.PRODUCT_ID].unique().implode()
    unclaimed_fresh = (
        pl.when(pl.col(S.PRODUCT_ID).is_in(taken))
        .then(
            pl.concat_str(pl.col(S.PRODUCT_ID), pl.lit(f"@{build_number}")).map_elements(
                lambda v: "p" + hex_digest(v), return_dtype=pl.String
            )
        )
        .otherwise(pl.col(S.PRODUCT_ID))
    )
    resolved = mapping.select(
        pl.col(S.PRODUCT_ID).alias("fresh_id"),
        pl.coalesce(pl.col(_PREV), unclaimed_fresh).alias("final_id"),
        pl.coalesce(_PREV_SEEN, pl.lit(build_number)).alias(FIRST_SEEN),
    )
    products = (
        current.rename({S.PRODUCT_ID: "fresh_id"})
        .join(resolved, on="fresh_id", how="left")
        .drop("fresh_id")
        .rename({"final_id": S.PRODUCT_ID})
        .select(current.columns + [FIRST_SEEN])
        .sort(S.LISTING_ID)
    )
    return products, _changes(cand, resolved, winners, previous, products)


def _changes(
    cand: pl.DataFrame,
    resolved: pl.DataFrame,
    winners: pl.DataFrame,
    previous: pl.DataFrame,
    products: pl.DataFrame,
) -> pl.DataFrame:
    final_of = cand.join(resolved, left_on=S.PRODUCT_ID, right_on="fresh_id")
    lost = final_of.filter(pl.col(_PREV) != pl.col("final_id"))
    kept_ids = set(winners[_PREV].to_list())
    merged = lost.filter(pl.col(_PREV).is_in(kept_ids).not_())
    split = lost.filter(pl.col(_PREV).is_in(kept_ids))
    new_ids = resolved.join(
        winners.select(pl.col(S.PRODUCT_ID).alias("fresh_id")), on="fresh_id", how="anti"
    )
    sizes = products.group_by(S.PRODUCT_ID).agg(pl.len().alias("listings"))
    removed = (
        previous.group_by(S.PRODUCT_ID)
        .agg(pl.len().alias("listings"))
        .join(cand.select(pl.col(_PREV).alias(S.PRODUCT_ID)).unique(), on=S.PRODUCT_ID, how="anti")
    )
    parts = [
        merged.select(
            pl.lit("merged").alias(S.CHANGE),
            pl.col("final_id").alias(S.PRODUCT_ID),
            pl.col(_PREV).alias(OTHER_PRODUCT_ID),
            pl.col("shared").alias("listings"),
        ),
        split.select(
            pl.lit("split").alias(S.CHANGE),
            pl.col("final_id").alias(S.PRODUCT_ID),
            pl.col(_PREV).alias(OTHER_PRODUCT_ID),
            pl.col("shared").alias("listings"),
        ),
        new_ids.join(sizes, left_on="final_id", right_on=S.PRODUCT_ID).select(
            pl.lit("new").alias(S.CHANGE),
            pl.col("final_id").alias(S.PRODUCT_ID),
            pl.lit(None, pl.String).alias(OTHER_PRODUCT_ID),
            "listings",
        ),
        removed.select(
            pl.lit("removed").alias(S.CHANGE),
            S.PRODUCT_ID,
            pl.lit(None, pl.String).alias(OTHER_PRODUCT_ID),
            "listings",
        ),
    ]
    return (
        pl.concat([p.cast(CHANGES_SCHEMA) for p in parts])
        .unique()
        .sort(S.CHANGE, S.PRODUCT_ID, OTHER_PRODUCT_ID, nulls_last=True)
    )


def empty_changes() -> pl.DataFrame:
    """The id changes of a build with no predecessor: none."""
    return pl.DataFrame(schema=CHANGES_SCHEMA)


def first_build(products: pl.DataFrame) -> pl.DataFrame:
    """Products of a build with no predecessor: every product is first seen in build 0."""
    return products.with_columns(pl.lit(0, pl.Int64).alias(FIRST_SEEN))


def record(result: StageResult, out_dir: Path, previous: Path | None) -> StageResult:
    """Give the products in ``out_dir`` their lasting ids: carried over from the previous build
    folder ``previous``, or first seen now. Rewrites products.parquet with `first_seen`, writes
    id_changes.parquet beside it and adds the build number and change counts to the result."""
    products = pl.read_parquet(out_dir / S.PRODUCTS_FILE)
    build_number = 0
    if previous is None:
        products, changes = first_build(products), empty_changes()
    else:
        before_layout = RunLayout(previous)
        before = pl.read_parquet(before_layout.products)
        if FIRST_SEEN not in before.columns:
            before = first_build(before)
        recorded = load_result(before_layout.stage_dir("cluster"))
        build_number = (ClusterFacts.of(recorded).build_number if recorded else 0) + 1
        products, changes = reconcile(products, before, build_number)
    io.write_parquet(products, out_dir / S.PRODUCTS_FILE)
    io.write_parquet(changes, out_dir / S.ID_CHANGES_FILE)
    counts = dict(sorted(changes[S.CHANGE].value_counts().iter_rows()))
    details = {**result.details, "build_number": build_number, "id_changes": counts}
    outputs = {**result.outputs, "id_changes": S.ID_CHANGES_FILE}
    return replace(result, details=details, outputs=outputs)
