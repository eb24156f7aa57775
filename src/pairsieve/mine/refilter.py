"""Day-2 mining without a search: queries that only gained clicks or were regrouped are filtered
again from the candidates the previous build retrieved for them (`refilter`), and reused queries'
rows are merged in from the previous files as the new ones are written (`with_reused`)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.mine.deepen import COUNT, candidate_counts
from pairsieve.mine.filters import (
    filter_candidates,
    score_ceilings,
    short_queries,
)
from pairsieve.mine.reuse import PreviousMining


@dataclass(frozen=True)
class Refiltered:
    """Queries settled by `refilter`, with their candidate counts and (kept, dropped) rows."""

    queries: pl.Series
    counts: pl.DataFrame
    kept: pl.DataFrame
    dropped: pl.DataFrame


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
    before = state.pairs.select(
        S.QUERY, pl.col(S.LISTING_ID).alias(S.POSITIVE_LISTING_ID), pl.lit(True).alias("_old")
    )
    is_old = pl.col("_old").fill_null(False)
    weakest = (
        pos.join(before, on=[S.QUERY, S.POSITIVE_LISTING_ID], how="left")
        .group_by(S.QUERY)
        .agg(
            pl.col(S.POSITIVE_SCORE).filter(is_old).min().alias("_old"),
            pl.col(S.POSITIVE_SCORE).filter(~is_old).min().alias("_new"),
        )
    )
    dropped_ceiling = weakest.filter(pl.col("_new") < pl.col("_old"))[S.QUERY].implode()
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
    return Refiltered(
        settled,
        candidate_counts(candidates.filter(done)),
        kept.filter(done),
        dropped.filter(done),
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
