"""Hard-negative mining that never hands the trainer a copy of its own positive.

Today's miners (sentence-transformers' `mine_hard_negatives`, FlagEmbedding's `hn_mine.py`,
NV-Retriever's) exclude a candidate only when its text equals the positive's, so the same product
sold by another seller comes back as the hardest "negative". Here a candidate is dropped when it
is any listing of a positive's product (ids from the cluster stage), when nothing in its title
tells it apart from the positive's (`possible_duplicate`: clustering must be precise, so it
leaves some copies apart; excluding a negative only costs one of `range_max` candidates), or when
it scores within a margin of the query's weakest positive (NV-Retriever TopK-PercPos,
arXiv 2407.15831). Measured on PriceRunner with its derived click log (benchmarks/RESULTS.md):
exact-text exclusion leaves 3.2% false negatives, cluster ids 1.2%, cluster ids + the guard 0.4%,
all three with the margin 0.03% at 92% of the negatives. Typed queries often score their clicked
listing below most of their top 50, where the margin drops everything, so a query whose pairs end
short of `num_negatives` is mined again below the margin instead of going without negatives.
The margin also throws away the hardest true negatives: other models that the untrained encoder
scores above the clicked listing. So the best candidates inside the margin are judged
(`mine.judgement`, with the build's copy density as the prior): those unlikely to be a copy are
kept when the query's own attributes rule them out too (`query_cannot_tell` when not), the
likely ones dropped as `judged_copy`, and the margin decides the rest.

The stage's parts, each tested alone:

* `mine.retrieval`: embed the distinct queries and listings with the shared cache and build a
  faiss index over the listings (exact up to `knn.exact_max`);
* `mine.judgement`: the probability that a candidate inside the margin is a copy;
* `mine.filters.filter_candidates`: stamps every candidate of every (query, positive) pair with
  the first reason that drops it, or keeps it;
* `mine.deepen.mine_span` joins them, searching each query only as deep as its pairs need;
* `mine.partitions` maps that over partitions of the sorted queries, in this process or as
  tasks on the build's task runner (threads, Dask or Ray workers), with the same bytes;
* `mine.reuse` and `mine.refilter`: what a day-2 build takes over from the previous one.

Accounting: ``rows_in`` is the number of candidates considered, i.e. for every (query, positive)
pair every listing retrieved for its query; ``rows_out`` the negatives kept; every other
candidate is in ``negatives_dropped.parquet`` with its reason, so
``rows_in == rows_out + sum(dropped_by_reason)`` holds, and also row for row across the two files.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MineConfig, PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import Source, StageResult, read_source
from pairsieve.core.hashing import text_keys
from pairsieve.core.layout import RunLayout
from pairsieve.core.partitions import Mapper, MapSpans, map_here
from pairsieve.errors import PairsieveError
from pairsieve.mine import partitions
from pairsieve.mine.deepen import COUNT, Mined
from pairsieve.mine.filters import NEGATIVE_COLUMNS, REASONS, density_counts
from pairsieve.mine.judgement import smoothed_density
from pairsieve.mine.refilter import Refiltered, refilter_mapped, with_reused
from pairsieve.mine.retrieval import Embedded, build_retrieval, embed_inputs, positive_table
from pairsieve.mine.reuse import PreviousMining, ReusePlan
from pairsieve.text import attributes as text
from pairsieve.vectors import knn
from pairsieve.vectors.embed import Encoder, embed_texts, load_encoder, shared_cache
from pairsieve.vectors.embedding_cache import EmbeddingCache
from pairsieve.vectors.threads import fixed_threads

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inputs:
    """What mining reads: ingest's clicks and listings, the cluster stage's product ids, and
    the folder of the cluster stage's IVF layout (`knn.IvfLayout`) when it has one: the same
    titles' coarse lists, so mining's IVF index is built on them, not trained and assigned
    again (about a minute at 10^6 listings)."""

    clicks: Source
    listings: Source
    products: Source
    ivf: Path | None = None

    @classmethod
    def of(cls, layout: RunLayout) -> Inputs:
        return cls(layout.clicks, layout.listings, layout.products, layout.stage_dir("cluster"))


def summarise(
    counts: pl.DataFrame,
    positives: pl.DataFrame,
    kept: pl.DataFrame,
    reasons: dict[str, int],
    cfg: MineConfig,
) -> dict[str, Any]:
    """Candidates considered (from each query's `candidate_counts`, not from the rows, so the
    accounting identity is a real check), drops per reason (``reasons``, counted as
    `filters.reason_counts` does), and per-pair shortfalls (short pairs are kept, never
    padded)."""
    per_query = positives.join(counts, on=S.QUERY, how="left")
    considered = per_query[COUNT].fill_null(0).sum()
    per_pair = (
        positives.select(S.QUERY, S.POSITIVE_LISTING_ID)
        .unique()
        .join(
            kept.group_by(S.QUERY, S.POSITIVE_LISTING_ID).len("_n"),
            on=[S.QUERY, S.POSITIVE_LISTING_ID],
            how="left",
        )
        .with_columns(pl.col("_n").fill_null(0))
    )
    n_pairs = per_pair.height
    return {
        "considered": int(considered),
        "dropped_by_reason": {reason: int(reasons.get(reason, 0)) for reason in REASONS},
        "pairs": n_pairs,
        "queries": positives[S.QUERY].n_unique(),
        "pairs_short": int((per_pair["_n"] < cfg.num_negatives).sum()),
        "pairs_without_negatives": int((per_pair["_n"] == 0).sum()),
        "negatives_per_pair": round(kept.height / n_pairs, 4) if n_pairs else 0.0,
    }


def listing_products(listings: pl.DataFrame, products: pl.DataFrame) -> pl.DataFrame:
    """(listing_id, product_id, title_norm) for every listing; unclustered ones get null (they
    count as their own product). title_norm is computed when the listings lack it."""
    norm = (
        pl.col(S.TITLE_NORM)
        if S.TITLE_NORM in listings.columns
        else text.normalize_expr(pl.col(S.TITLE)).alias(S.TITLE_NORM)
    )
    return (
        listings.select(S.LISTING_ID, norm)
        .join(products.select(S.LISTING_ID, S.PRODUCT_ID), on=S.LISTING_ID, how="left")
        .select(S.LISTING_ID, S.PRODUCT_ID, S.TITLE_NORM)
    )


def _check_known(pairs: pl.DataFrame, listings: pl.DataFrame, source: str) -> None:
    unknown = pairs.join(listings.select(S.LISTING_ID), on=S.LISTING_ID, how="anti")
    if unknown.height:
        raise PairsieveError(
            "unknown_listing",
            f"{unknown.height} clicked listing(s) missing from the listings, e.g. "
            f"{unknown[S.LISTING_ID][0]!r}; run ingest, which quarantines them",
            file=source,
            column=S.LISTING_ID,
        )


@dataclass(frozen=True)
class _Rows:
    """A build's mined rows: candidate counts per query, kept and dropped (pair, candidate) rows,
    drop reasons counted, and what produced them."""

    counts: pl.DataFrame
    kept: pl.DataFrame
    dropped: pl.DataFrame | pl.LazyFrame
    reasons: dict[str, int]
    timings: dict[str, float]
    details: dict[str, Any]
    layout: knn.IvfLayout | None
    judging: MineConfig  # the mine settings mining used, the copy density resolved


@dataclass(frozen=True)
class _Read:
    """The stage's inputs as read: distinct clicked (query, listing) pairs, listings, products,
    `listing_products` of the last two (what the filters and the judgement read), and the
    cluster stage's IVF layout when it has one."""

    pairs: pl.DataFrame
    listings: pl.DataFrame
    products: pl.DataFrame
    info: pl.DataFrame
    ivf: knn.IvfLayout | None = None


def _mine_rows(
    cfg: PairsieveConfig,
    read: _Read,
    encoder: Encoder,
    previous: tuple[PreviousMining, int] | None,
    mapper: Mapper,
) -> _Rows:
    """Mine the clicked pairs: queries whose inputs did not change keep the previous build's
    rows, those that only gained clicks or were regrouped are refiltered, the rest are mined in
    partitions on ``mapper``; dropped rows come back as a scan of parts in its folder."""
    spill = mapper.folder
    pairs, listings, products = read.pairs, read.listings, read.products
    none = pl.Series(S.QUERY, [], dtype=pl.String)
    plan, state = ReusePlan(none, none, none), None
    if previous is not None:
        state, build_number = previous
        plan = state.plan(pairs, listings, products, (build_number, cfg.mine.refresh_builds))
        state = state.forgetting(plan.gone)
    fresh = pairs.filter(~pl.col(S.QUERY).is_in(plan.reused.implode()))
    cache = shared_cache(cfg.cache_dir, encoder.model_key)
    embedded = embed_inputs(fresh[S.QUERY].to_list(), listings, encoder, cache)
    positives, info = positive_table(fresh, embedded), read.info
    cfg, density = _with_copy_density(cfg, pairs, embedded, info, encoder, cache)
    if state is not None:
        state = state.judged_at(cfg.mine.copy_density)
    started = time.perf_counter()
    refiltered = None
    if state is not None and plan.refiltered.len():
        refiltered = refilter_mapped(
            state, plan.refiltered, positives, info, cfg, mapper.within("refilter")
        )
    settled = none if refiltered is None else refiltered.queries
    ivf = state.ivf if state is not None and state.ivf is not None else read.ivf
    index_folder = partitions.retrieval_folder(spill) / "index"
    retrieval = build_retrieval(embedded.without(settled), cfg, ivf, index_folder)
    layout = retrieval.index.layout(embedded.listing_keys)  # embed_inputs sets the keys
    retrieval, embed_stats = partitions.listings_on_disk(retrieval, spill), embedded.stats
    del embedded  # its listing vectors: the partitions read them from the plan's file
    to_mine = positives.filter(~pl.col(S.QUERY).is_in(settled.implode()))
    mined, mapped = partitions.mine_mapped(retrieval, to_mine, info, cfg, mapper)
    counts, kept, dropped, reasons = _with_refiltered(mined, refiltered)
    if state is not None:
        counts, kept, dropped, reused = with_reused(state, plan.reused, counts, kept, dropped)
        reasons = {r: reasons.get(r, 0) + reused.get(r, 0) for r in REASONS}
    details: dict[str, Any] = {
        "copy_density": density,
        "partitions": mapped["partitions"],
        "skipped_above_ceiling": mined.skipped_above_ceiling,
        "retrieval_rounds": mined.rounds,
        "queries_scanned_below": mapped["scanned_below"],
        **{k: retrieval.info[k] for k in ("index", "index_slices", "ivf_centroids")},
        "embedding": {k: v for k, v in embed_stats.items() if k != "embed_s"},
    }
    if previous is not None:
        details["incremental"] = _incremental(plan, refiltered, to_mine)
    outside = time.perf_counter() - started - retrieval.info["index_s"] - mapped["wall_s"]
    timings = _timings(embed_stats["embed_s"], retrieval.info["index_s"], mapped, outside)
    return _Rows(counts, kept, dropped, reasons, timings, details, layout, cfg.mine)


def _timings(embed_s: float, index_s: float, mapped: dict[str, float], outside: float) -> dict:
    """The stage's seconds: search and filter summed over the partitions, and the refilter and
    reuse done here (``outside`` the partitions) counted as filtering."""
    return {
        "embed_s": embed_s,
        "index_s": round(index_s, 3),
        "search_s": round(mapped["search_s"], 3),
        "filter_s": round(mapped["filter_s"] + outside, 3),
        "mine_wall_s": round(mapped["wall_s"], 3),
    }


_DENSITY_SAMPLE = 512  # queries whose exact top candidates estimate the copy density


def _with_copy_density(
    cfg: PairsieveConfig,
    pairs: pl.DataFrame,
    embedded: Embedded,
    info: pl.DataFrame,
    encoder: Encoder,
    cache: EmbeddingCache | None,
) -> tuple[PairsieveConfig, dict[str, Any]]:
    """``cfg`` with `mine.copy_density` resolved, and how: when it is unset (and the margin is
    judged), the share of copies the product ids know among the candidates inside the margin
    of a sample of all the build's queries (those with the smallest text keys, so the same
    sample whatever the order or partitioning of the log, and whether a day-2 build reuses
    them), from an exact search of their top `mine.search_depth`. One value for the whole
    build, so every partition, and a day-2 build, judges alike."""
    mine = cfg.mine
    if not mine.judge_margin or mine.copy_density is not None:
        return cfg, {"value": mine.copy_density, "source": "config"}
    queries = pairs[S.QUERY].unique()
    sample = sorted(queries.gather(np.argsort(text_keys(queries.to_list()), kind="stable")[
        :_DENSITY_SAMPLE]).to_list())  # fmt: skip
    vectors, _ = embed_texts(sample, encoder, cache)
    sampled = Embedded(sample, embedded.listing_ids, vectors, embedded.listing_vectors)
    with fixed_threads():
        row, ids, scores, ranks, _ = knn.scan_below(
            embedded.listing_vectors,
            vectors,
            np.full(len(sample), np.inf, dtype=np.float32),
            mine.search_depth,
            1,
        )
    candidates = pl.DataFrame(
        {
            S.QUERY: pl.Series(S.QUERY, sample, dtype=pl.String).gather(row),
            S.NEGATIVE_LISTING_ID: embedded.listing_ids.gather(ids),
            S.SCORE: scores,
            S.RANK: pl.Series(ranks, dtype=pl.Int32),
        }
    )
    positives = positive_table(pairs.filter(pl.col(S.QUERY).is_in(sample)), sampled)
    known, considered = density_counts(candidates, positives, info, mine)
    density = smoothed_density(known, considered)
    resolved = cfg.model_copy(update={"mine": mine.model_copy(update={"copy_density": density})})
    counts = {"queries": len(sample), "inside_margin": considered, "known_copies": known}
    return resolved, {"value": round(density, 6), "source": "estimated", **counts}


def _incremental(
    plan: ReusePlan, refiltered: Refiltered | None, to_mine: pl.DataFrame
) -> dict[str, int]:
    """How many queries a day-2 build took over from the previous one, and how many it mined."""
    return {
        "queries_reused": plan.reused.len(),
        "queries_refiltered": 0 if refiltered is None else refiltered.queries.len(),
        "refilter_partitions": 0 if refiltered is None else refiltered.partitions,
        "queries_mined": to_mine[S.QUERY].n_unique(),
    }


def _with_refiltered(mined: Mined, refiltered: Refiltered | None) -> tuple:
    """(counts, kept, dropped, reasons) of the mined queries and the refiltered ones; both sides
    are sorted by (query, positive, rank) and share no query."""
    counts, kept, dropped, reasons = mined.counts, mined.kept, mined.dropped, mined.reasons
    if refiltered is None:
        return counts, kept, dropped, reasons
    again = refiltered.reasons
    return (
        pl.concat([counts, refiltered.counts]),
        kept.merge_sorted(refiltered.kept, key=S.QUERY),
        dropped.lazy().merge_sorted(refiltered.dropped.lazy(), key=S.QUERY),
        {r: reasons.get(r, 0) + again.get(r, 0) for r in REASONS},
    )


# negatives_judgement.parquet: the kept negatives the judgement decided, in their file order, with
# the p_copy their filter gave them (a day-2 build's reused ones moved to today's copy density), so
# the report reads what mining decided instead of deciding again.
_JUDGEMENT = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID, S.P_COPY]
_SPILL = "_dropped-parts"  # the batches' dropped rows until negatives_dropped.parquet is written
_ROWS_IN_MEANS = (
    "candidates considered: for each (query, positive) pair, each listing retrieved for its "
    "query: its top mine.search_depth and, for queries left short, its best listings at or "
    "below the margin up to rank mine.range_max; skipped_above_ceiling counts the listings "
    "stepped over (inside the margin) by the queries mined in this build"
)


def _write(rows: _Rows, out_dir: Path) -> dict[str, str]:
    """Write the kept and the dropped negatives, the judgement of the kept ones (`_JUDGEMENT`,
    when the margin is judged) and the IVF layout; their names by role."""
    # One chunk: parquet row groups follow chunks, and chunks follow the partitions.
    io.write_parquet(rows.kept.select(NEGATIVE_COLUMNS).rechunk(), out_dir / S.NEGATIVES_FILE)
    io.write_parquet(rows.dropped, out_dir / S.NEGATIVES_DROPPED_FILE)
    outputs = {"negatives": S.NEGATIVES_FILE, "dropped": S.NEGATIVES_DROPPED_FILE}
    if rows.judging.judge_margin:
        judged = rows.kept.filter(pl.col(S.P_COPY).is_not_null()).select(_JUDGEMENT)
        io.write_parquet(judged.rechunk(), out_dir / S.NEGATIVES_JUDGEMENT_FILE)
        outputs["judgement"] = S.NEGATIVES_JUDGEMENT_FILE
    if rows.layout is not None:
        outputs.update(rows.layout.write(out_dir))
    return outputs


def _read_inputs(inputs: Inputs) -> _Read:
    """The stage's inputs, read and checked.

    Raises:
        PairsieveError: ``missing_file``, ``missing_column`` or ``unknown_listing``.
    """
    clicks = read_source(inputs.clicks, "clicks", (S.QUERY, S.LISTING_ID))
    listings = read_source(inputs.listings, "listings", (S.LISTING_ID, S.TITLE))
    products = read_source(inputs.products, "products", (S.LISTING_ID, S.PRODUCT_ID))
    pairs = clicks.select(S.QUERY, S.LISTING_ID).unique()
    clicks_name = "clicks" if isinstance(inputs.clicks, pl.DataFrame) else str(inputs.clicks)
    _check_known(pairs, listings, clicks_name)
    ivf = None if inputs.ivf is None else knn.IvfLayout.read(Path(inputs.ivf))
    return _Read(pairs, listings, products, listing_products(listings, products), ivf)


def run(
    cfg: PairsieveConfig,
    inputs: Inputs,
    out_dir: Path,
    *,
    encoder: Encoder | None = None,
    previous: tuple[PreviousMining, int] | None = None,
    map_spans: MapSpans = map_here,
) -> StageResult:
    """Mine hard negatives for every clicked (query, listing) pair into ``out_dir``.

    Writes `negatives.parquet`, `negatives_dropped.parquet` (see `filter_candidates`) and, when
    the margin is judged, `negatives_judgement.parquet` (`_JUDGEMENT`). With
    ``previous`` = (the previous build's mining, this build's number), the queries whose inputs
    did not change keep their rows from it (`mine.reuse`). ``map_spans`` runs the partitions of
    the queries to mine (default: one after the other in this process; a build maps them on its
    task runner).

    Raises:
        PairsieveError: ``missing_file``, ``missing_column`` or ``unknown_listing``.
    """
    read = _read_inputs(inputs)
    pairs = read.pairs
    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    out_dir = Path(out_dir)
    spill = out_dir / _SPILL
    spill.mkdir(parents=True, exist_ok=True)
    try:
        rows = _mine_rows(cfg, read, encoder, previous, Mapper(spill, map_spans))
        outputs = _write(rows, out_dir)
    finally:
        shutil.rmtree(spill)
    clicked = pairs.select(S.QUERY, pl.col(S.LISTING_ID).alias(S.POSITIVE_LISTING_ID))
    summary = summarise(rows.counts, clicked, rows.kept, rows.reasons, cfg.mine)
    dropped_by_reason = summary.pop("dropped_by_reason")
    per_query = rows.counts[COUNT].sum() / max(1, pairs[S.QUERY].n_unique())
    return StageResult(
        stage="mine",
        rows_in=summary.pop("considered"),
        rows_out=rows.kept.height,
        dropped_by_reason=dropped_by_reason,
        timings=rows.timings,
        outputs=outputs,
        details={
            **summary,
            "skipped_above_ceiling": rows.details.pop("skipped_above_ceiling"),
            **({"incremental": rows.details.pop("incremental")} if previous else {}),
            "rows_in_means": _ROWS_IN_MEANS,
            "candidates_per_query": per_query,
            **rows.details,
        },
    )
