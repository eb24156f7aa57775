"""Day-2 mining without a search: queries that only gained clicks or were regrouped are filtered
again from the candidates the previous build retrieved for them (`refilter`, mapped over
partitions of those queries by `refilter_mapped`), and reused queries' rows are merged in from the
previous files as the new ones are written (`with_reused`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core import partitions as parts
from pairsieve.core.partitions import Mapper, Span
from pairsieve.core.plans import Plan
from pairsieve.mine.deepen import COUNT, candidate_counts
from pairsieve.mine.filters import (
    filter_candidates,
    reason_counts,
    score_ceilings,
    short_queries,
)
from pairsieve.mine.reuse import PreviousMining

STEP = "refiltering day-2 queries"


@dataclass(frozen=True)
class Refiltered:
    """Queries settled by `refilter`, with their candidate counts and (kept, dropped) rows."""

    queries: pl.Series
    counts: pl.DataFrame
    kept: pl.DataFrame
    dropped: pl.DataFrame | pl.LazyFrame
    reasons: dict[str, int]
    partitions: int = 1  # the map's, when mapped


def _ceiling_dropped(state: PreviousMining, positives: pl.DataFrame) -> pl.Series:
    """The queries of ``positives`` with a new click that scores below their weakest old one:
    their margin's ceiling fell, so mining would look further than the previous build did."""
    before = state.pairs.select(
        S.QUERY, pl.col(S.LISTING_ID).alias(S.POSITIVE_LISTING_ID), pl.lit(True).alias("_old")
    )
    is_old = pl.col("_old").fill_null(False)
    weakest = (
        positives.join(before, on=[S.QUERY, S.POSITIVE_LISTING_ID], how="left")
        .group_by(S.QUERY)
        .agg(
            pl.col(S.POSITIVE_SCORE).filter(is_old).min().alias("_old"),
            pl.col(S.POSITIVE_SCORE).filter(~is_old).min().alias("_new"),
        )
    )
    return weakest.filter(pl.col("_new") < pl.col("_old"))[S.QUERY]


def refilter(
    state: PreviousMining,
    queries: pl.Series,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: PairsieveConfig,
) -> Refiltered:
    """Filter the previous candidates of ``queries`` (which only gained clicks or were
    regrouped) against today's positives and products: what mining would give them over the
    previous catalog, without a search (see `mine.reuse`). Settled: a query with no short pair
    whose ceiling did not drop (no new click scores below its weakest old one), and a query
    still short whose previous search was exhausted, filtered from its head and the previous
    candidates at or below today's ceiling. Left to mining: the others, which mining would
    search deeper than the previous build did."""
    names = queries.sort()
    pos = positives.filter(pl.col(S.QUERY).is_in(names.implode()))
    dropped_ceiling = _ceiling_dropped(state, pos).implode()
    ceilings = pl.DataFrame(
        {S.QUERY: names, "_ceiling": score_ceilings(pos, names, cfg.mine)},
        schema={S.QUERY: pl.String, "_ceiling": pl.Float64},
    )
    reachable = (pl.col(S.RANK) <= cfg.mine.search_depth) | (pl.col(S.SCORE) <= pl.col("_ceiling"))
    candidates = (
        state.candidates_of(names)
        .join(ceilings, on=S.QUERY, maintain_order="left")
        .filter(reachable)
        .drop("_ceiling")
    )
    kept, dropped = filter_candidates(candidates, pos, products, cfg.mine, cfg.seed)
    short = short_queries(pos, kept, cfg.mine.num_negatives).implode()
    exhausted = state.exhausted(names, cfg.mine.num_negatives).implode()
    settled = names.filter(
        (~names.is_in(dropped_ceiling) & ~names.is_in(short))
        | (names.is_in(exhausted) & names.is_in(short))
    )
    done = pl.col(S.QUERY).is_in(settled.implode())
    dropped = dropped.filter(done)
    return Refiltered(
        settled,
        candidate_counts(candidates.filter(done)),
        kept.filter(done),
        dropped,
        reason_counts(dropped),
    )


@dataclass(frozen=True)
class _Plan(Plan):
    """What every partition reads: the sorted queries to refilter with their positives, the
    previous build's rows and clicks of those queries alone, and (listing_id, product_id,
    title_norm) for the filters. The tables a partition filters to its queries are scans, so it
    reads its own rows, not every refiltered query's."""

    queries: pl.Series
    positives: pl.LazyFrame
    kept: pl.LazyFrame
    dropped: pl.LazyFrame
    pairs: pl.LazyFrame
    products: pl.DataFrame

    @staticmethod
    def of(
        state: PreviousMining, queries: pl.Series, positives: pl.DataFrame, products: pl.DataFrame
    ) -> _Plan:
        """The plan of refiltering ``queries``: its tables are queries over ``state`` that
        writing it streams (the previous build's dropped rows, tens of millions at 10^6
        listings, are never held)."""
        names = pl.Series(S.QUERY, queries.sort(), dtype=pl.String)
        chosen = pl.col(S.QUERY).is_in(names.implode())
        kept, dropped = state.lazy_rows_of(names)
        pairs = state.pairs.lazy().filter(chosen)
        return _Plan(names, positives.lazy().filter(chosen), kept, dropped, pairs, products)


@dataclass(frozen=True)
class _SpanFiles:
    """What a partition hands back: its files, named by its first query row, and its drop
    reasons."""

    settled: str
    counts: str
    kept: str
    dropped: str
    reasons: dict[str, int]


def refilter_partition(plan: str, span: Span, cfg: PairsieveConfig) -> _SpanFiles:
    """`refilter` the queries at rows ``span`` of the plan in the folder ``plan``; the rows go
    to files in the plan's parent folder (a rerun overwrites them)."""
    loaded = parts.held(plan, _Plan.read)
    names = loaded.queries[span[0] : span[1]]
    chosen = pl.col(S.QUERY).is_in(names.implode())
    # The previous state of these queries alone: `refilter` reads no listings.
    state = PreviousMining(
        loaded.kept.filter(chosen).collect(),
        loaded.dropped.filter(chosen),
        loaded.pairs.filter(chosen).collect(),
        pl.DataFrame(),
    )
    positives = loaded.positives.filter(chosen).collect()
    done = refilter(state, names, positives, loaded.products, cfg)
    out, lo = Path(plan).parent, span[0]
    frames = {
        "settled": done.queries.to_frame(S.QUERY).cast(pl.String),
        "counts": done.counts,
        "kept": done.kept,
        "dropped": done.dropped,
    }
    files = {
        name: str(io.write_parquet(frame, out / f"{name}-{lo:010d}.parquet"))
        for name, frame in frames.items()
    }
    return _SpanFiles(**files, reasons=done.reasons)


def refilter_mapped(
    state: PreviousMining,
    queries: pl.Series,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: PairsieveConfig,
    mapper: Mapper,
) -> Refiltered:
    """`refilter` as a map on ``mapper`` over spans of `runner.mine_partition_queries` sorted
    queries, through a plan in its folder (removed by the caller): the same rows as one call,
    as each query is filtered on its own. The dropped rows come back as a scan of the
    partitions' files."""
    plan = _Plan.of(state, queries, positives, products).write(mapper.folder / "plan")
    # The spans here read the written tables, not the queries over the previous build's files.
    parts.hold(plan, replace(_Plan.read(plan), products=products))
    spans = parts.spans(queries.len(), cfg.runner.mine_partition_queries)
    results = mapper.run(refilter_partition, plan, spans, cfg, STEP)
    reasons: Counter[str] = Counter()
    for result in results:
        reasons.update(result.reasons)
    return Refiltered(
        pl.concat([pl.read_parquet(r.settled)[S.QUERY] for r in results]),
        pl.concat([pl.read_parquet(r.counts) for r in results]),
        pl.concat([pl.read_parquet(r.kept) for r in results]),
        pl.scan_parquet([r.dropped for r in results]),
        dict(reasons),
        len(spans),
    )


def with_reused(
    state: PreviousMining,
    reused: pl.Series,
    counts: pl.DataFrame,
    kept: pl.DataFrame,
    dropped: pl.DataFrame | pl.LazyFrame,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.LazyFrame, dict[str, int]]:
    """This build's (candidate counts, kept, dropped) with the reused queries' previous rows
    added, in the order a full build writes them, and the reused rows' drop reasons counted.
    The dropped rows come back as a plan that streams the previous file's reused rows into the
    merge as it is written: at 10^6 listings they are ~45 M rows, ~10 GB in memory."""
    old_kept, old_dropped = state.lazy_rows_of(reused)
    old_kept, dropped = old_kept.collect(), dropped.lazy()
    per_query = old_dropped.group_by(S.QUERY, S.REASON).len("_rows").collect()
    # A query's every pair saw all its candidates, and each (pair, candidate) row is in one of
    # the two files (the previous build checked that identity): rows / pairs = candidates.
    rows = pl.concat(
        [old_kept.group_by(S.QUERY).len("_rows"), per_query.select(S.QUERY, "_rows")],
        how="vertical_relaxed",
    ).group_by(S.QUERY)
    old_pairs = state.pairs.filter(pl.col(S.QUERY).is_in(reused.implode())).group_by(S.QUERY)
    old_counts = rows.agg(pl.col("_rows").sum()).join(old_pairs.len("_pairs"), on=S.QUERY)
    old_counts = old_counts.select(S.QUERY, (pl.col("_rows") // pl.col("_pairs")).alias(COUNT))
    reasons = per_query.group_by(S.REASON).agg(pl.col("_rows").sum())
    # Both sides are sorted by (query, positive, rank) and share no query: merging on the query
    # gives the full build's order without sorting again.
    return (
        pl.concat([counts, old_counts.cast(counts.schema)]),
        kept.merge_sorted(old_kept.select(kept.columns), key=S.QUERY),
        pl.merge_sorted([dropped, old_dropped.select(dropped.collect_schema().names())], S.QUERY),
        {str(reason): int(n) for reason, n in reasons.iter_rows()},
    )
