"""Mining that searches each query only as deep as its pairs need: the top `mine.search_depth`
first, then, for queries whose pairs are still short of negatives after the filters, deeper
rounds and finally the exact scan below the margin (`knn.scan_below`), in batches of queries so
memory does not grow with the log: each batch's dropped rows, ~100 per (query, positive) pair
and ~10 GB at 10^6 listings, can go to a part file as soon as the batch is done."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MineConfig
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


_DEEPEN = 4  # each round looks this many times deeper for the queries still short


# Queries mined together: their candidate tables (~250 rows per pair at 10^6 listings) and the
# filter's joins are the stage's working set (22 GB at 190k queries at once). At 2e5 listings a
# batch of 16,384 queries peaked at 4.6 GB and one of 4,096 at 2.5 GB in the same time
# (benchmarks/RESULTS.md, "memory per stage").
_QUERY_BATCH = 4_096


def mine_pairs(
    retrieval: Retrieval,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: MineConfig,
    seed: int,
    spill: Path | None = None,
) -> Mined:
    """Mine every query's pairs, looking only as deep as each query needs.

    Round one filters the top ``search_depth`` listings of every query. A query with a pair left
    short of ``num_negatives`` is mined again from its top ``search_depth`` plus its best
    listings at or below its ceiling (margin limit, ``max_score``), ``_DEEPEN`` times more of
    them each round, until no pair is short or rank ``range_max`` is reached. A query is short
    mostly because its weakly matched positive puts hundreds of listings inside the margin
    (PriceRunner's derived log: half the queries have 188+); stepping over them keeps the
    candidate table small. Each query's result depends on its own pairs only, so the queries
    (sorted) are mined in batches of `_QUERY_BATCH` and the batches' sorted rows concatenate
    into sorted tables. With ``spill`` (an existing folder), each batch's dropped rows are
    written there and released, and ``dropped`` scans the part files in batch order.
    """
    n = len(retrieval.queries)
    batches, parts, reasons = [], [], Counter()
    with progress.step("mining hard negatives", n, "queries") as counter:
        for start in range(0, max(n, 1), _QUERY_BATCH):
            rows = np.arange(start, min(start + _QUERY_BATCH, n))
            batch = _mine_batch(retrieval, rows, positives, products, cfg, seed)
            reasons.update(batch.reasons)
            if spill is not None:
                part = spill / f"dropped-{len(parts):05d}.parquet"
                parts.append(io.write_parquet(batch.dropped, part))
                batch = replace(batch, dropped=None)
            batches.append(batch)
            counter.advance(len(rows))
    rounds: list[dict[str, int]] = []
    for batch in batches:
        for number, entry in enumerate(batch.rounds):
            if number == len(rounds):
                rounds.append({**entry, "queries": 0, "short": 0})
            rounds[number]["queries"] += entry["queries"]
            rounds[number]["short"] += entry["short"]
    return Mined(
        pl.concat([b.counts for b in batches]),
        pl.concat([b.kept for b in batches]),
        pl.scan_parquet(parts) if parts else pl.concat([b.dropped for b in batches]),
        rounds,
        sum(b.skipped_above_ceiling for b in batches),
        dict(reasons),
    )


def _mine_batch(
    retrieval: Retrieval,
    rows: np.ndarray,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: MineConfig,
    seed: int,
) -> Mined:
    """`mine_pairs` for the queries at ``rows`` (indices into ``retrieval.queries``)."""
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
