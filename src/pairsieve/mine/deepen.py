"""Mining that searches each query only as deep as its pairs need: the top `mine.search_depth`
first, then, for queries whose pairs are still short of negatives after the filters, deeper
rounds and finally the exact scan below the margin (`knn.scan_below`), in batches of queries so
memory does not grow with the log: each batch's dropped rows, ~100 per (query, positive) pair
and ~10 GB at 10^6 listings, can go to a part file as soon as the batch is done."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MINE_QUERY_BATCH, MineConfig
from pairsieve.core import io, progress
from pairsieve.mine.filters import (
    filter_candidates,
    reason_counts,
    score_ceilings,
    short_queries,
)
from pairsieve.mine.retrieval import Retrieval

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mined:
    """What `mine_pairs` found: how many listings each query retrieved (`candidate_counts`),
    the split of (pair, candidate) rows into kept and dropped (see `filter_candidates`), each
    sorted by (query, positive, rank), one entry per retrieval round, and the listings deeper
    rounds stepped over because they score above the margin (summed over pairs; they are
    counted, not listed). ``dropped`` is a scan of part files when they were spilled, and
    ``reasons`` counts its rows per reason either way."""

    counts: pl.DataFrame
    kept: pl.DataFrame
    dropped: pl.DataFrame | pl.LazyFrame
    rounds: list[dict[str, int]]
    skipped_above_ceiling: int
    reasons: dict[str, int]


@dataclass(frozen=True)
class Mining:
    """What mining reads: the retrieval over all listings and queries, the positives of the
    queries to mine, and (listing_id, product_id, title_norm) for the filters."""

    retrieval: Retrieval
    positives: pl.DataFrame
    products: pl.DataFrame


_DEEPEN = 4  # each round looks this many times deeper for the queries still short


_QUERY_BATCH = MINE_QUERY_BATCH  # queries scored and filtered together (see config)


def mine_pairs(
    retrieval: Retrieval,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: MineConfig,
    seed: int,
    spill: Path | None = None,
) -> Mined:
    """Mine every query's pairs in this process (`mine_span` over all queries), with progress."""
    n = len(retrieval.queries)
    mining = Mining(retrieval, positives, products)
    with progress.step("mining hard negatives", n, "queries") as counter:
        return mine_span(mining, (0, n), cfg, seed, spill, counter.advance)


def mine_span(
    mining: Mining,
    span: tuple[int, int],
    cfg: MineConfig,
    seed: int,
    spill: Path | None = None,
    advance: Callable[[int], None] | None = None,
) -> Mined:
    """Mine the pairs of the queries at rows ``span`` = (lo, hi) of ``mining.retrieval``'s
    queries, looking only as deep as each query needs.

    Round one filters the top ``search_depth`` listings of every query. A query with a pair left
    short of ``num_negatives`` is mined again from its top ``search_depth`` plus its best
    listings at or below its ceiling (margin limit, ``max_score``), ``_DEEPEN`` times more of
    them each round, until no pair is short or rank ``range_max`` is reached. A query is short
    mostly because its weakly matched positive puts hundreds of listings inside the margin
    (PriceRunner's derived log: half the queries have 188+); stepping over them keeps the
    candidate table small. Each query's result depends on its own pairs only, so the queries
    (sorted) are mined in batches of `_QUERY_BATCH` that start at multiples of it, and the
    batches' sorted rows concatenate into sorted tables: spans that start at such a multiple
    give the rows of one span over them all. With ``spill`` (an existing folder), each batch's
    dropped rows are written there (named by the batch's first row) and released, and
    ``dropped`` scans the part files in batch order.
    """
    edges = batch_edges(span)
    batches = []
    for start, end in zip(edges[:-1], edges[1:], strict=True):
        rows = np.arange(start, end)
        batch = _mine_batch(mining, rows, cfg, seed)
        if spill is not None:
            part = io.write_parquet(batch.dropped, dropped_part(spill, start))
            batch = replace(batch, dropped=pl.scan_parquet(part))
        batches.append(batch)
        if advance is not None:
            advance(len(rows))
    return combine(batches)


def batch_edges(span: tuple[int, int]) -> list[int]:
    """Where the batches of ``span`` = (lo, hi) start, and hi: at lo and at the multiples of
    `_QUERY_BATCH` inside it (one empty batch when the span is empty)."""
    lo, hi = span
    return [lo, *range(lo - lo % _QUERY_BATCH + _QUERY_BATCH, hi, _QUERY_BATCH), max(lo, hi)]


def dropped_part(spill: Path, start: int) -> Path:
    """The file of the dropped rows of the batch that starts at query row ``start``."""
    return spill / f"dropped-{start:010d}.parquet"


def combine(parts: list[Mined]) -> Mined:
    """Results of disjoint runs of sorted queries, in query order, as one: the tables
    concatenate (dropped rows stay a lazy scan when any part's are), the rounds and counts
    add up."""
    rounds: list[dict[str, int]] = []
    for part in parts:
        for number, entry in enumerate(part.rounds):
            if number == len(rounds):
                rounds.append({**entry, "queries": 0, "short": 0})
            rounds[number]["queries"] += entry["queries"]
            rounds[number]["short"] += entry["short"]
    dropped = [part.dropped for part in parts]
    lazy = any(isinstance(frame, pl.LazyFrame) for frame in dropped)
    reasons: Counter[str] = Counter()
    for part in parts:
        reasons.update(part.reasons)
    return Mined(
        pl.concat([part.counts for part in parts]),
        pl.concat([part.kept for part in parts]),
        pl.concat([frame.lazy() for frame in dropped]) if lazy else pl.concat(dropped),
        rounds,
        sum(part.skipped_above_ceiling for part in parts),
        dict(reasons),
    )


def _mine_batch(mining: Mining, rows: np.ndarray, cfg: MineConfig, seed: int) -> Mined:
    """`mine_pairs` for the queries at ``rows`` (indices into ``mining.retrieval.queries``)."""
    retrieval, positives, products = mining.retrieval, mining.positives, mining.products
    deepest = min(cfg.range_max, len(retrieval.listing_ids))
    head = depth = min(cfg.search_depth, deepest)
    candidates = retrieval.candidates(rows, head)
    above = np.zeros(rows.size, np.int64)
    parts: list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]] = []
    rounds, skipped = [], []
    while True:
        names = pl.Series(S.QUERY, [retrieval.queries[i] for i in rows], dtype=pl.String)
        pos = positives.filter(pl.col(S.QUERY).is_in(names.implode()))
        kept, dropped = filter_candidates(candidates, pos, products, cfg, seed)
        short = short_queries(pos, kept, cfg.num_negatives)
        rounds.append({"depth": depth, "queries": int(rows.size), "short": short.len()})
        deeper = names.is_in(short.implode()).to_numpy() & (above + depth < deepest)
        finished = names.filter(pl.Series(~deeper))
        done = pl.col(S.QUERY).is_in(finished.implode())
        parts.append(
            (candidate_counts(candidates.filter(done)), kept.filter(done), dropped.filter(done))
        )
        steps = np.clip(np.minimum(above, deepest) - head, 0, None)[~deeper]
        skipped.append(pl.DataFrame({S.QUERY: finished, "_skipped": steps}))
        if not deeper.any():
            break
        rows, depth = rows[deeper], depth * _DEEPEN
        ceilings = score_ceilings(pos, names.filter(pl.Series(deeper)), cfg)
        candidates, above = retrieval.candidates_below(rows, ceilings, head, depth, deepest)
    order = [S.QUERY, S.POSITIVE_LISTING_ID, S.RANK]
    per_pair = positives.select(S.QUERY).join(pl.concat(skipped), on=S.QUERY)
    dropped = pl.concat([d for _, _, d in parts]).sort(order)
    return Mined(
        pl.concat([c for c, _, _ in parts]),
        pl.concat([k for _, k, _ in parts]).sort(order),
        dropped,
        rounds,
        int(per_pair["_skipped"].sum()),
        reason_counts(dropped),
    )


COUNT = "_candidates"


def candidate_counts(candidates: pl.DataFrame) -> pl.DataFrame:
    """(query, _candidates): listings retrieved per query, from a candidate table."""
    return candidates.group_by(S.QUERY).len(COUNT)
