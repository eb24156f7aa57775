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

The stage has two halves so each can be tested alone:

* retrieval (`embed_inputs`, `build_retrieval`, `candidate_table`, `positive_table`): embed the
  distinct queries and listings with the shared cache and build a faiss index over the listings
  (exact up to `knn.exact_max`);
* `pairsieve.mine.filters.filter_candidates`: stamps every candidate of every (query, positive)
  pair with the first reason that drops it, or keeps it;

and `mine_pairs` joins them, searching each query only as deep as its pairs need.

Accounting: ``rows_in`` is the number of candidates considered, i.e. for every (query, positive)
pair every listing retrieved for its query; ``rows_out`` the negatives kept; every other
candidate is in ``negatives_dropped.parquet`` with its reason, so
``rows_in == rows_out + sum(dropped_by_reason)`` holds, and also row for row across the two files.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MineConfig, PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult
from pairsieve.core.hashing import text_keys
from pairsieve.errors import PairsieveError
from pairsieve.mine.filters import (
    REASONS,
    filter_candidates,
    score_ceilings,
    short_queries,
    with_ranks,
)
from pairsieve.mine.reuse import PreviousMining, ReusePlan
from pairsieve.text import attributes as text
from pairsieve.vectors import knn
from pairsieve.vectors.embed import (
    EmbeddingCache,
    Encoder,
    embed_texts,
    load_encoder,
    shared_cache,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Embedded:
    """Distinct query texts and listings (both sorted, so row order of the inputs is irrelevant)
    with their unit vectors: ``query_vectors`` (q, d) and ``listing_vectors`` (n, d) float32;
    ``listing_keys`` (n,) are the titles' `embed.text_keys`, which file them in an IVF layout."""

    queries: list[str]
    listing_ids: list[str]
    query_vectors: np.ndarray
    listing_vectors: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)
    listing_keys: np.ndarray | None = None

    def without(self, queries: pl.Series) -> Embedded:
        """The same listings and stats, ``queries`` left out."""
        if queries.is_empty():
            return self
        keep = ~pl.Series(self.queries, dtype=pl.String).is_in(queries.implode()).to_numpy()
        names = [q for q, kept in zip(self.queries, keep, strict=True) if kept]
        return Embedded(
            names,
            self.listing_ids,
            self.query_vectors[keep],
            self.listing_vectors,
            self.stats,
            self.listing_keys,
        )


def _read(frame: pl.DataFrame | Path | str, name: str, required: tuple[str, ...]) -> pl.DataFrame:
    """A frame or a parquet file, checked for the columns mining needs."""
    source = name
    if not isinstance(frame, pl.DataFrame):
        source = str(frame)
        if not Path(frame).exists():
            raise PairsieveError("missing_file", f"{name} not found", file=source)
        frame = pl.read_parquet(frame)
    for column in required:
        if column not in frame.columns:
            raise PairsieveError(
                "missing_column", f"{name} lacks a required column", file=source, column=column
            )
    return frame


def embed_inputs(
    queries: list[str], listings: pl.DataFrame, encoder: Encoder, cache: EmbeddingCache | None
) -> Embedded:
    """Embed distinct query texts and listing titles (raw text: what the trainer encodes)."""
    queries = sorted(set(queries))
    listings = listings.select(S.LISTING_ID, S.TITLE).unique(S.LISTING_ID).sort(S.LISTING_ID)
    query_vectors, query_stats = embed_texts(queries, encoder, cache)
    titles = listings[S.TITLE].to_list()
    listing_vectors, listing_stats = embed_texts(titles, encoder, cache)
    stats = {
        "queries": vars(query_stats),
        "listings": vars(listing_stats),
        "embed_s": round(query_stats.seconds + listing_stats.seconds, 3),
    }
    return Embedded(
        queries,
        listings[S.LISTING_ID].to_list(),
        query_vectors,
        listing_vectors,
        stats,
        text_keys(titles),
    )


@dataclass(frozen=True)
class Retrieval:
    """A faiss index over the listings and the distinct queries' vectors, searched as deep as
    each query needs (`mine_pairs`)."""

    index: Any
    queries: list[str]
    listing_ids: list[str]
    query_vectors: np.ndarray
    listing_vectors: np.ndarray
    info: dict[str, Any]

    def candidates(self, rows: np.ndarray, depth: int) -> pl.DataFrame:
        """(query, negative_listing_id, score, rank) for the top ``depth`` listings of the
        queries at ``rows`` (indices into ``queries``), from the index."""
        started = time.perf_counter()
        scores, ids = knn.search(self.index, self.query_vectors[rows], depth)
        self.info["search_s"] += time.perf_counter() - started
        names = [self.queries[i] for i in rows]
        return with_ranks(candidate_table(names, self.listing_ids, scores, ids))

    def candidates_below(
        self, rows: np.ndarray, ceilings: np.ndarray, head: int, depth: int, max_rank: int
    ) -> tuple[pl.DataFrame, np.ndarray]:
        """The top ``head`` listings of each query plus its top ``depth`` scoring at or below
        its ceiling, ranked in the full ranking and cut at ``max_rank``, from an exact scan
        (`knn.scan_below`); and per query the number of listings above its ceiling."""
        started = time.perf_counter()
        row, ids, scores, ranks, above = knn.scan_below(
            self.listing_vectors, self.query_vectors[rows], ceilings, head, depth
        )
        self.info["search_s"] += time.perf_counter() - started
        table = pl.DataFrame(
            {
                S.QUERY: pl.Series([self.queries[i] for i in rows], dtype=pl.String).gather(row),
                S.NEGATIVE_LISTING_ID: pl.Series(self.listing_ids, dtype=pl.String).gather(ids),
                S.SCORE: scores,
                S.RANK: pl.Series(ranks, dtype=pl.Int32),
            }
        )
        return table.filter(pl.col(S.RANK) <= max_rank), above


def build_retrieval(
    embedded: Embedded, cfg: PairsieveConfig, layout: knn.IvfLayout | None = None
) -> Retrieval:
    """Exact `IndexFlatIP` up to ``knn.exact_max`` listings, IVF above (see
    `pairsieve.vectors.knn`; a previous build's ``layout`` spares the IVF training while its
    centroids fit, and the assignment of the titles it indexed)."""
    started = time.perf_counter()
    index = knn.build_index(
        embedded.listing_vectors, cfg.knn, cfg.seed, layout, embedded.listing_keys
    )
    info = {
        "index": type(index).__name__,
        "index_s": time.perf_counter() - started,
        "search_s": 0.0,
    }
    info["ivf_centroids"] = knn.centroid_source(index, layout)
    return Retrieval(
        index,
        embedded.queries,
        embedded.listing_ids,
        embedded.query_vectors,
        embedded.listing_vectors,
        info,
    )


def candidate_table(
    queries: list[str], listing_ids: list[str], scores: np.ndarray, ids: np.ndarray
) -> pl.DataFrame:
    """Long table (query, negative_listing_id, score) of the retrieved listings; ids < 0 (fewer
    listings than k) are not candidates."""
    mask = ids >= 0  # (q, k) bool
    query_index = np.repeat(np.arange(len(queries)), ids.shape[1])[mask.ravel()]
    return pl.DataFrame(
        {
            S.QUERY: pl.Series(queries, dtype=pl.String).gather(query_index),
            S.NEGATIVE_LISTING_ID: pl.Series(listing_ids, dtype=pl.String).gather(ids[mask]),
            S.SCORE: scores[mask].astype(np.float32),
        }
    )


def positive_table(pairs: pl.DataFrame, embedded: Embedded) -> pl.DataFrame:
    """(query, positive_listing_id, positive_score) for every distinct clicked pair."""
    query_pos = pl.DataFrame({S.QUERY: embedded.queries}, {S.QUERY: pl.String}).with_row_index("_q")
    listing_pos = pl.DataFrame(
        {S.LISTING_ID: embedded.listing_ids}, {S.LISTING_ID: pl.String}
    ).with_row_index("_l")
    joined = (
        pairs.select(S.QUERY, S.LISTING_ID)
        .unique()
        .join(query_pos, on=S.QUERY)
        .join(listing_pos, on=S.LISTING_ID)
    )
    scores = knn.pair_scores(
        embedded.query_vectors,
        joined["_q"].to_numpy(),
        embedded.listing_vectors,
        joined["_l"].to_numpy(),
    )
    return joined.select(
        S.QUERY,
        pl.col(S.LISTING_ID).alias(S.POSITIVE_LISTING_ID),
        pl.Series(S.POSITIVE_SCORE, scores, dtype=pl.Float32),
    )


@dataclass(frozen=True)
class Mined:
    """What `mine_pairs` found: how many listings each query retrieved (`candidate_counts`),
    the split of (pair, candidate) rows into kept and dropped (see `filter_candidates`), each
    sorted by (query, positive, rank), one entry per retrieval round, and the listings deeper
    rounds stepped over because they score above the margin (summed over pairs; they are
    counted, not listed)."""

    counts: pl.DataFrame
    kept: pl.DataFrame
    dropped: pl.DataFrame
    rounds: list[dict[str, int]]
    skipped_above_ceiling: int


_DEEPEN = 4  # each round looks this many times deeper for the queries still short
# Queries mined together: their candidate tables (~250 rows per pair at 10^6 listings) and the
# filter's joins stay a few GB instead of growing with the log (22 GB at 190k queries at once).
_QUERY_BATCH = 16_384


def mine_pairs(
    retrieval: Retrieval,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: MineConfig,
    seed: int,
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
    into sorted tables.
    """
    n = len(retrieval.queries)
    batches = [
        _mine_batch(
            retrieval,
            np.arange(start, min(start + _QUERY_BATCH, n)),
            positives,
            products,
            cfg,
            seed,
        )
        for start in range(0, n, _QUERY_BATCH)
    ] or [_mine_batch(retrieval, np.arange(0), positives, products, cfg, seed)]
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
        pl.concat([b.dropped for b in batches]),
        rounds,
        sum(b.skipped_above_ceiling for b in batches),
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
    return Mined(
        pl.concat([c for c, _, _ in parts]),
        pl.concat([k for _, k, _ in parts]).sort(order),
        pl.concat([d for _, _, d in parts]).sort(order),
        rounds,
        int(per_pair["_skipped"].sum()),
    )


_COUNT = "_candidates"


def candidate_counts(candidates: pl.DataFrame) -> pl.DataFrame:
    """(query, _candidates): listings retrieved per query, from a candidate table."""
    return candidates.group_by(S.QUERY).len(_COUNT)


def summarise(
    counts: pl.DataFrame,
    positives: pl.DataFrame,
    kept: pl.DataFrame,
    reasons: dict[str, int],
    cfg: MineConfig,
) -> dict[str, Any]:
    """Candidates considered (from each query's `candidate_counts`, not from the rows, so the
    accounting identity is a real check), drops per reason (``reasons``, see `reason_counts`),
    and per-pair shortfalls (short pairs are kept, never padded)."""
    per_query = positives.join(counts, on=S.QUERY, how="left")
    considered = per_query[_COUNT].fill_null(0).sum()
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


def reason_counts(dropped: pl.DataFrame) -> dict[str, int]:
    """Dropped rows per reason."""
    return dict(dropped[S.REASON].cast(pl.String).value_counts().iter_rows())


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


def run(  # noqa: PLR0913 - the stage interface shared by the pipeline
    cfg: PairsieveConfig,
    clicks: pl.DataFrame | Path,
    listings: pl.DataFrame | Path,
    products: pl.DataFrame | Path,
    out_dir: Path,
    encoder: Encoder | None = None,
    previous: tuple[PreviousMining, int] | None = None,
) -> StageResult:
    """Mine hard negatives for every clicked (query, listing) pair into ``out_dir``.

    Writes `negatives.parquet` and `negatives_dropped.parquet` (see `filter_candidates`). With
    ``previous`` = (the previous build's mining, this build's number), the queries whose inputs
    did not change keep their rows from it (`mine_reuse`).

    Raises:
        PairsieveError: ``missing_file``, ``missing_column`` or ``unknown_listing``.
    """
    clicks_df = _read(clicks, "clicks", (S.QUERY, S.LISTING_ID))
    listings_df = _read(listings, "listings", (S.LISTING_ID, S.TITLE))
    products_df = _read(products, "products", (S.LISTING_ID, S.PRODUCT_ID))
    pairs = clicks_df.select(S.QUERY, S.LISTING_ID).unique()
    _check_known(pairs, listings_df, str(clicks) if isinstance(clicks, Path) else "clicks")
    none = pl.Series(S.QUERY, [], dtype=pl.String)
    plan = ReusePlan(none, none)
    if previous is not None:
        state, build_number = previous
        refresh = (build_number, cfg.mine.refresh_builds)
        plan = state.plan(pairs, listings_df, products_df, refresh)
    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    fresh = pairs.filter(~pl.col(S.QUERY).is_in(plan.reused.implode()))
    embedded = embed_inputs(
        fresh[S.QUERY].to_list(),
        listings_df,
        encoder,
        shared_cache(cfg.cache_dir, encoder.model_key),
    )
    positives = positive_table(fresh, embedded)
    info = listing_products(listings_df, products_df)
    started = time.perf_counter()
    refiltered = None
    if previous is not None and plan.refiltered.len():
        refiltered = refilter(state, plan.refiltered, positives, info, cfg)
    settled = none if refiltered is None else refiltered.queries
    retrieval = build_retrieval(
        embedded.without(settled), cfg, None if previous is None else state.ivf
    )
    to_mine = positives.filter(~pl.col(S.QUERY).is_in(settled.implode()))
    mined = mine_pairs(retrieval, to_mine, info, cfg.mine, cfg.seed)
    counts, kept, dropped = mined.counts, mined.kept, mined.dropped
    if refiltered is not None:  # both sorted by (query, positive, rank), no query in both
        counts = pl.concat([counts, refiltered.counts])
        kept = kept.merge_sorted(refiltered.kept, key=S.QUERY)
        dropped = dropped.merge_sorted(refiltered.dropped, key=S.QUERY)
    reasons = reason_counts(dropped)
    if previous is not None:
        counts, kept, dropped, reused_reasons = _with_reused(
            state, plan.reused, counts, kept, dropped
        )
        reasons = {r: reasons.get(r, 0) + reused_reasons.get(r, 0) for r in REASONS}
    retrieval_s = retrieval.info["search_s"] + retrieval.info["index_s"]
    filter_s = round(time.perf_counter() - started - retrieval_s, 3)
    out_dir = Path(out_dir)
    io.write_parquet(kept, out_dir / S.NEGATIVES_FILE)
    io.write_parquet(dropped, out_dir / S.NEGATIVES_DROPPED_FILE)
    outputs = {"negatives": S.NEGATIVES_FILE, "dropped": S.NEGATIVES_DROPPED_FILE}
    layout = knn.layout_of(retrieval.index, embedded.listing_keys)  # embed_inputs sets the keys
    if layout is not None:
        outputs.update(layout.write(out_dir))
    clicked = pairs.select(S.QUERY, pl.col(S.LISTING_ID).alias(S.POSITIVE_LISTING_ID))
    summary = summarise(counts, clicked, kept, reasons, cfg.mine)
    summary["skipped_above_ceiling"] = mined.skipped_above_ceiling
    if previous is not None:
        summary["incremental"] = {
            "queries_reused": plan.reused.len(),
            "queries_refiltered": settled.len(),
            "queries_mined": to_mine[S.QUERY].n_unique(),
        }
    dropped_by_reason = summary.pop("dropped_by_reason")
    return StageResult(
        stage="mine",
        rows_in=summary.pop("considered"),
        rows_out=kept.height,
        dropped_by_reason=dropped_by_reason,
        timings={
            "embed_s": embedded.stats["embed_s"],
            "index_s": round(retrieval.info["index_s"], 3),
            "search_s": round(retrieval.info["search_s"], 3),
            "filter_s": filter_s,
        },
        outputs=outputs,
        details={
            **summary,
            "rows_in_means": "candidates considered: for each (query, positive) pair, each "
            "listing retrieved for its query: its top mine.search_depth and, for queries left "
            "short, its best listings at or below the margin up to rank mine.range_max; "
            "skipped_above_ceiling counts the listings stepped over (inside the margin) by the "
            "queries mined in this build",
            "candidates_per_query": counts[_COUNT].sum() / max(1, pairs[S.QUERY].n_unique()),
            "retrieval_rounds": mined.rounds,
            "index": retrieval.info["index"],
            "ivf_centroids": retrieval.info["ivf_centroids"],
            "embedding": {k: v for k, v in embedded.stats.items() if k != "embed_s"},
        },
    )


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
    previous catalog, without a search (see `mine_reuse`). Settled: a query with no short pair
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


def _with_reused(
    state: PreviousMining,
    reused: pl.Series,
    counts: pl.DataFrame,
    kept: pl.DataFrame,
    dropped: pl.DataFrame,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.LazyFrame, dict[str, int]]:
    """This build's (candidate counts, kept, dropped) with the reused queries' previous rows
    added, in the order a full build writes them, and the reused rows' drop reasons counted.
    The dropped rows come back as a plan that streams the previous file's reused rows into the
    merge as it is written: at 10^6 listings they are ~45 M rows, ~10 GB in memory."""
    old_kept, old_dropped = state.lazy_rows_of(reused)
    old_kept = old_kept.collect()
    per_query = old_dropped.group_by(S.QUERY, S.REASON).len("_rows").collect()
    # A query's every pair saw all its candidates, and each (pair, candidate) row is in one of
    # the two files (the previous build checked that identity): rows / pairs = candidates.
    rows = pl.concat(
        [old_kept.group_by(S.QUERY).len("_rows"), per_query.select(S.QUERY, "_rows")],
        how="vertical_relaxed",
    ).group_by(S.QUERY)
    old_pairs = state.pairs.filter(pl.col(S.QUERY).is_in(reused.implode())).group_by(S.QUERY)
    old_counts = rows.agg(pl.col("_rows").sum()).join(old_pairs.len("_pairs"), on=S.QUERY)
    old_counts = old_counts.select(S.QUERY, (pl.col("_rows") // pl.col("_pairs")).alias(_COUNT))
    reasons = per_query.group_by(S.REASON).agg(pl.col("_rows").sum())
    # Both sides are sorted by (query, positive, rank) and share no query: merging on the query
    # gives the full build's order without sorting again.
    return (
        pl.concat([counts, old_counts.cast(counts.schema)]),
        kept.merge_sorted(old_kept.select(kept.columns), key=S.QUERY),
        pl.merge_sorted([dropped.lazy(), old_dropped.select(dropped.columns)], key=S.QUERY),
        {str(reason): int(n) for reason, n in reasons.iter_rows()},
    )
