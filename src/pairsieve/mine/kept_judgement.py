"""The judgement of the negatives mining kept: each kept negative whose candidate the judgement
decided, with the probability that it is a copy of the positive's product (``p_copy``).

Written beside the negatives so the report reads what mining decided instead of deciding again.
The probabilities come from the stage's own filter (`filters.judged_rows`) over every candidate
the stage wrote, kept and dropped, at the copy density mining used; the partitions and a day-2
build's reused rows are judged alike, since the file is made from the stage's final outputs.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MineConfig
from pairsieve.mine.filters import judged_rows

_KEYS = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID]


def candidates_and_positives(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What mining filtered, from its kept and dropped rows together: (candidates, positives),
    each once, candidates in (query, rank) order and positives in (query, positive) order, as
    `filters.judged_rows` takes them."""
    candidates = rows.select(S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK).unique()
    positives = rows.select(S.QUERY, S.POSITIVE_LISTING_ID, S.POSITIVE_SCORE).unique()
    return candidates.sort(S.QUERY, S.RANK), positives.sort(S.QUERY, S.POSITIVE_LISTING_ID)


def kept_judgement(
    negatives: Path, dropped: Path, products: pl.DataFrame, cfg: MineConfig
) -> pl.DataFrame:
    """(query, positive_listing_id, negative_listing_id, p_copy) of the kept negatives in
    ``negatives`` that the judgement decided, in their file order. ``dropped`` is the stage's
    negatives_dropped.parquet, ``products`` `stage.listing_products` of the build, ``cfg`` the
    mine settings with the copy density resolved.

    A query's judgement reads its own candidates only, so the queries are judged a run of
    `_QUERIES_AT_ONCE` at a time: the dropped rows, ~19 M at 10^6 listings, are read a run at a
    time (the file is sorted by query, so a run reads its own row groups), not held whole."""
    kept = pl.read_parquet(negatives, columns=_COLUMNS)
    queries = kept[S.QUERY].unique().sort()
    runs = [
        pl.col(S.QUERY).is_between(pl.lit(queries[start]), pl.lit(queries[end - 1]))
        for start in range(0, len(queries), _QUERIES_AT_ONCE)
        for end in [min(start + _QUERIES_AT_ONCE, len(queries))]
    ]
    judged = [_judged_run(kept, dropped, products, cfg, run) for run in runs or [pl.lit(True)]]
    return kept.select(_KEYS).join(pl.concat(judged), on=_KEYS, maintain_order="left")


_COLUMNS = [*_KEYS, S.SCORE, S.RANK, S.POSITIVE_SCORE]
_QUERIES_AT_ONCE = 16_384  # ~1.6 M dropped rows at 10^6 listings


def _judged_run(
    kept: pl.DataFrame, dropped: Path, products: pl.DataFrame, cfg: MineConfig, run: pl.Expr
) -> pl.DataFrame:
    """`kept_judgement` of the queries ``run`` selects."""
    ours = kept.filter(run)
    others = pl.scan_parquet(dropped).select(_COLUMNS).filter(run).collect()
    candidates, positives = candidates_and_positives(pl.concat([ours, others]))
    scored = judged_rows(candidates, positives, products, cfg)
    return ours.select(_KEYS).join(scored.select(*_KEYS, S.P_COPY), on=_KEYS)
