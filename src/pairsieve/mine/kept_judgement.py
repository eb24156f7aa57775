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
    mine settings with the copy density resolved."""
    columns = [*_KEYS, S.SCORE, S.RANK, S.POSITIVE_SCORE]
    kept = pl.read_parquet(negatives, columns=columns)
    others = pl.scan_parquet(dropped).select(columns).collect(engine="streaming")
    candidates, positives = candidates_and_positives(pl.concat([kept, others]))
    scored = judged_rows(candidates, positives, products, cfg)
    return kept.select(_KEYS).join(
        scored.select(*_KEYS, S.P_COPY), on=_KEYS, how="inner", maintain_order="left"
    )
