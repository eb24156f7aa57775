"""Each negative of a dataset judged against its positive as the build's miner judges a candidate.

A dataset mined elsewhere is a list of (anchor, positive, negative) texts; the build's filter
(`mine.filters.filter_candidates`) takes candidates of a query with their scores. So each anchor
becomes a query, its rows' positives its clicked listings and its rows' negatives its candidates,
scored by the build's encoder, and the filter stamps each with the first reason that makes it
unsafe: the positive itself, another clicked listing, a listing of the positive's product, a
candidate inside the margin judged a copy, left undecided or not ruled out by the anchor, or a
title nothing tells apart from the positive's. Its selection steps (one negative per product,
`range_min`, the sample) choose among safe negatives rather than judge them, so they replace
nothing here; the duplicate guard, which the filter only runs on the negatives it takes, is run
on those too.
"""

from __future__ import annotations

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MineConfig
from pairsieve.mine.filters import filter_candidates, possible_duplicates

SELECTION_ONLY = ("range_min", "product_repeat", "not_sampled")  # choices among safe negatives
PAIR = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID]


def judge(table: pl.DataFrame, products: pl.DataFrame, cfg: MineConfig) -> pl.DataFrame:
    """``table`` with a ``reason`` column: null for a safe negative, else the filter's reason.

    Args:
        table: one row per negative of the dataset: query (the anchor), positive_listing_id,
            negative_listing_id, score (anchor with negative), positive_score (anchor with
            positive).
        products: (listing_id, product_id, title_norm) of every listing (`listing_products`).
        cfg: the build's `mine` settings, its copy density resolved.
    """
    candidates = table.select(S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE).unique(
        [S.QUERY, S.NEGATIVE_LISTING_ID]
    )
    positives = table.select(S.QUERY, S.POSITIVE_LISTING_ID, S.POSITIVE_SCORE).unique(
        [S.QUERY, S.POSITIVE_LISTING_ID]
    )
    widest = int(candidates.group_by(S.QUERY).len()["len"].max() or 1)
    every = cfg.model_copy(update={"num_negatives": widest, "range_min": 0, "sampling": "top"})
    kept, dropped = filter_candidates(candidates, positives, products, every, seed=0)
    stamped = pl.concat(
        [
            kept.select(*PAIR, pl.lit(None, pl.String).alias(S.REASON)),
            dropped.select(*PAIR, pl.col(S.REASON).cast(pl.String)),
        ]
    )
    chosen = pl.col(S.REASON).is_in(SELECTION_ONLY).fill_null(False)
    selection = stamped.filter(chosen)
    if cfg.duplicate_guard_jaccard is not None and selection.height:
        flags = possible_duplicates(
            selection[S.POSITIVE_LISTING_ID],
            selection[S.NEGATIVE_LISTING_ID],
            products,
            cfg.duplicate_guard_jaccard,
        )
        selection = selection.with_columns(
            pl.when(pl.Series(flags)).then(pl.lit("possible_duplicate")).alias(S.REASON)
        )
    stamped = pl.concat([stamped.filter(~chosen), selection])
    return table.join(stamped, on=PAIR, how="left", maintain_order="left")
