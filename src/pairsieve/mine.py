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
* `filter_candidates`: a pure, vectorised function of a candidate table and the positives' scores
  that stamps every candidate of every (query, positive) pair with the first reason that drops it
  (`REASONS`, in precedence order) or keeps it;

and `mine_pairs` joins them, searching each query only as deep as its pairs need.

Accounting: ``rows_in`` is the number of candidates considered, i.e. for every (query, positive)
pair every listing retrieved for its query; ``rows_out`` the negatives kept; every other
candidate is in ``negatives_dropped.parquet`` with its reason, so
``rows_in == rows_out + sum(dropped_by_reason)`` holds, and also row for row across the two files.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import io, knn, text
from pairsieve import schemas as S
from pairsieve.config import MineConfig, PairsieveConfig
from pairsieve.embed import EmbeddingCache, Encoder, embed_texts, load_encoder
from pairsieve.errors import PairsieveError
from pairsieve.stage import StageResult

log = logging.getLogger(__name__)

# Drop reasons in precedence order: a candidate gets the first that applies. Identity checks come
# first (click evidence before cluster evidence), then score filters, then the selection steps.
REASONS = (
    "same_listing",  # the pair's positive itself
    "other_positive",  # another listing clicked for the same query
    "same_product",  # a listing of the product of any of the query's positives
    "margin",  # within absolute/relative margin of the query's weakest positive
    "max_score",  # scores above mine.max_score
    "min_score",  # scores below mine.min_score
    "range_min",  # one of the first mine.range_min survivors, skipped on purpose
    "product_repeat",  # a second survivor of a product already represented
    "possible_duplicate",  # nothing in its title tells it apart from the positive (see config)
    "not_sampled",  # eligible, but beyond the num_negatives taken by `sampling`
)
_PRODUCT = "_product"
_POSITIVE_PRODUCT = "_positive_product"
_NEGATIVE_COLUMNS = (S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID, S.RANK, S.SCORE,
                     S.POSITIVE_SCORE)  # fmt: skip


@dataclass(frozen=True)
class Embedded:
    """Distinct query texts and listings (both sorted, so row order of the inputs is irrelevant)
    with their unit vectors: ``query_vectors`` (q, d) and ``listing_vectors`` (n, d) float32."""

    queries: list[str]
    listing_ids: list[str]
    query_vectors: np.ndarray
    listing_vectors: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)


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
    listing_vectors, listing_stats = embed_texts(listings[S.TITLE].to_list(), encoder, cache)
    stats = {
        "queries": vars(query_stats),
        "listings": vars(listing_stats),
        "embed_s": round(query_stats.seconds + listing_stats.seconds, 3),
    }
    return Embedded(
        queries, listings[S.LISTING_ID].to_list(), query_vectors, listing_vectors, stats
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
        return _with_ranks(candidate_table(names, self.listing_ids, scores, ids))

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


def build_retrieval(embedded: Embedded, cfg: PairsieveConfig) -> Retrieval:
    """Exact `IndexFlatIP` up to ``knn.exact_max`` listings, IVF above (see `pairsieve.knn`)."""
    started = time.perf_counter()
    index = knn.build_index(embedded.listing_vectors, cfg.knn, seed=cfg.seed)
    info = {
        "index": type(index).__name__,
        "index_s": time.perf_counter() - started,
        "search_s": 0.0,
    }
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
    query_pos = pl.DataFrame({S.QUERY: embedded.queries}).with_row_index("_q")
    listing_pos = pl.DataFrame({S.LISTING_ID: embedded.listing_ids}).with_row_index("_l")
    joined = (
        pairs.select(S.QUERY, S.LISTING_ID)
        .unique()
        .join(query_pos, on=S.QUERY)
        .join(listing_pos, on=S.LISTING_ID)
    )
    q = embedded.query_vectors[joined["_q"].to_numpy()]  # (p, d) float32
    v = embedded.listing_vectors[joined["_l"].to_numpy()]  # (p, d) float32
    return joined.select(
        S.QUERY,
        pl.col(S.LISTING_ID).alias(S.POSITIVE_LISTING_ID),
        pl.Series(S.POSITIVE_SCORE, np.einsum("ij,ij->i", q, v), dtype=pl.Float32),
    )


def _with_ranks(candidates: pl.DataFrame) -> pl.DataFrame:
    """Add each candidate's 1-based rank in its query's list (score desc, ties by listing id)."""
    return (
        candidates.with_columns(pl.col(S.SCORE).cast(pl.Float32))
        .sort([S.QUERY, S.SCORE, S.NEGATIVE_LISTING_ID], descending=[False, True, False])
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over(S.QUERY).alias(S.RANK))
    )


def _margin_limit(weakest: pl.Expr, cfg: MineConfig) -> pl.Expr:
    """Highest score a candidate may have: the tightest of the configured margins.

    The relative margin subtracts |pos|*m, so it still lowers the limit when the weakest positive
    scores below zero (pos*(1-m) would raise it there).
    """
    limits = []
    if cfg.absolute_margin is not None:
        limits.append(weakest - cfg.absolute_margin)
    if cfg.relative_margin is not None:
        limits.append(weakest - weakest.abs() * cfg.relative_margin)
    return pl.min_horizontal(limits) if limits else pl.lit(float("inf"))


def _limits(positives: pl.DataFrame, cfg: MineConfig) -> pl.DataFrame:
    """(query, _limit): the highest score the margin lets a candidate of the query have."""
    weakest = pl.col(S.POSITIVE_SCORE).cast(pl.Float32).min()
    return positives.group_by(S.QUERY).agg(_margin_limit(weakest, cfg).alias("_limit"))


def _ceilings(positives: pl.DataFrame, names: pl.Series, cfg: MineConfig) -> np.ndarray:
    """Per query of ``names`` (in order): the score above which no candidate can survive, the
    tighter of the margin limit and ``max_score``."""
    max_score = cfg.max_score if cfg.max_score is not None else float("inf")
    limits = names.to_frame(S.QUERY).join(
        _limits(positives, cfg), on=S.QUERY, how="left", maintain_order="left"
    )
    return np.minimum(limits["_limit"].fill_null(float("inf")).to_numpy(), max_score)


def _text_keys(values: pl.Series) -> pl.Series:
    """uint64 key per string from blake2b: stable across processes and library versions."""
    distinct = values.unique().sort()
    keys = [
        int.from_bytes(hashlib.blake2b(v.encode(), digest_size=8).digest(), "big")
        for v in distinct.to_list()
    ]
    lookup = pl.DataFrame({"_v": distinct, "_k": pl.Series(keys, dtype=pl.UInt64)})
    return values.to_frame("_v").join(lookup, on="_v", how="left", maintain_order="left")["_k"]


def _splitmix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over uint64 arrays (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _random_keys(table: pl.DataFrame, seed: int) -> pl.Series:
    """A seeded pseudo-random uint64 per (query, positive, negative): depends on those ids and
    the seed only, so the sample does not change with input order or with other rows."""
    mixed = np.full(table.height, np.uint64(seed & 0xFFFF_FFFF_FFFF_FFFF), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in (S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID):
            mixed = _splitmix(mixed ^ _text_keys(table[column]).to_numpy())
    return pl.Series("_key", mixed, dtype=pl.UInt64)


def _stamp_filters(
    candidates: pl.DataFrame, positives: pl.DataFrame, products: pl.DataFrame, cfg: MineConfig
) -> pl.DataFrame:
    """Every (pair, candidate) row with the first score/identity reason that drops it, or null."""
    product_of = products.select(S.LISTING_ID, pl.col(S.PRODUCT_ID).alias(_PRODUCT))
    ranked = candidates if S.RANK in candidates.columns else _with_ranks(candidates)
    ranked = ranked.with_columns(pl.col(S.SCORE).cast(pl.Float32)).join(
        product_of, left_on=S.NEGATIVE_LISTING_ID, right_on=S.LISTING_ID, how="left"
    ).with_columns(pl.col(_PRODUCT).fill_null(pl.col(S.NEGATIVE_LISTING_ID)))
    pos = positives.join(
        product_of, left_on=S.POSITIVE_LISTING_ID, right_on=S.LISTING_ID, how="left"
    ).with_columns(
        pl.col(_PRODUCT).fill_null(pl.col(S.POSITIVE_LISTING_ID)).alias(_POSITIVE_PRODUCT),
        pl.col(S.POSITIVE_SCORE).cast(pl.Float32),
    )
    limit = _limits(pos, cfg)
    clicked = pos.select(
        S.QUERY,
        pl.col(S.POSITIVE_LISTING_ID).alias(S.NEGATIVE_LISTING_ID),
        pl.lit(True).alias("_clicked"),
    ).unique()
    positive_products = pos.select(
        S.QUERY, pl.col(_POSITIVE_PRODUCT).alias(_PRODUCT), pl.lit(True).alias("_pos_product")
    ).unique()
    table = (
        pos.select(S.QUERY, S.POSITIVE_LISTING_ID, S.POSITIVE_SCORE)
        .join(ranked, on=S.QUERY)
        .join(limit, on=S.QUERY)
        .join(clicked, on=[S.QUERY, S.NEGATIVE_LISTING_ID], how="left")
        .join(positive_products, on=[S.QUERY, _PRODUCT], how="left")
    )
    score = pl.col(S.SCORE)
    reason = (
        pl.when(pl.col(S.NEGATIVE_LISTING_ID) == pl.col(S.POSITIVE_LISTING_ID))
        .then(pl.lit("same_listing"))
        .when(pl.col("_clicked").fill_null(False))
        .then(pl.lit("other_positive"))
        .when(pl.col("_pos_product").fill_null(False))
        .then(pl.lit("same_product"))
        .when(score > pl.col("_limit"))
        .then(pl.lit("margin"))
        .when(score > (cfg.max_score if cfg.max_score is not None else float("inf")))
        .then(pl.lit("max_score"))
        .when(score < (cfg.min_score if cfg.min_score is not None else float("-inf")))
        .then(pl.lit("min_score"))
    )
    return table.with_columns(reason.alias(S.REASON)).drop("_limit", "_clicked", "_pos_product")


def _possible_duplicates(
    pairs: list[tuple[str, str]], texts: dict[str, str], min_jaccard: float
) -> list[bool]:
    """For (positive, candidate) listing ids: True when no extracted attribute tells the two
    titles apart (`text.conflict`) and their word Jaccard reaches ``min_jaccard``."""
    attrs: dict[str, text.Attributes] = {}

    def attributes(listing_id: str) -> text.Attributes:
        if listing_id not in attrs:
            attrs[listing_id] = text.extract_attributes(texts.get(listing_id, ""))
        return attrs[listing_id]

    flags = []
    for positive, candidate in pairs:
        a, b = attributes(positive), attributes(candidate)
        flags.append(text.conflict(a, b) is None and text.jaccard(a, b) >= min_jaccard)
    return flags


def _guard_taken(table: pl.DataFrame, texts: dict[str, str], cfg: MineConfig) -> pl.DataFrame:
    """Stamp `possible_duplicate` on candidates about to be taken, refilling until each pair has
    num_negatives unflagged ones or runs out. Lazy because the check costs ~100 us per pair in
    Python: only ~num_negatives candidates per pair are ever checked, not all range_max."""
    pair = [S.QUERY, S.POSITIVE_LISTING_ID]
    alive = pl.col(S.REASON).is_null()
    table = table.with_row_index("_row").with_columns(pl.lit(False).alias("_checked"))
    while True:
        taken = pl.int_range(pl.len()).over([*pair, alive])
        todo = table.filter(alive & (taken < cfg.num_negatives) & ~pl.col("_checked"))
        if todo.height == 0:
            return table.drop("_row", "_checked")
        ids = todo.select(S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID).rows()
        flags = _possible_duplicates(ids, texts, cfg.duplicate_guard_jaccard or 0.0)
        flagged = todo["_row"].filter(pl.Series(flags, dtype=pl.Boolean))
        table = table.with_columns(
            pl.col("_checked") | pl.col("_row").is_in(todo["_row"].implode()),
            pl.when(pl.col("_row").is_in(flagged.implode()))
            .then(pl.lit("possible_duplicate"))
            .otherwise(pl.col(S.REASON))
            .alias(S.REASON),
        )


def _select(
    table: pl.DataFrame, texts: dict[str, str] | None, cfg: MineConfig, seed: int
) -> pl.DataFrame:
    """Among survivors of each pair: skip range_min, one per product, guard against unclustered
    copies, then take num_negatives."""
    pair = [S.QUERY, S.POSITIVE_LISTING_ID]
    alive = pl.col(S.REASON).is_null()
    table = table.sort([*pair, S.RANK])
    table = table.with_columns(
        pl.when(alive & (pl.int_range(pl.len()).over([*pair, alive]) < cfg.range_min))
        .then(pl.lit("range_min"))
        .otherwise(pl.col(S.REASON))
        .alias(S.REASON)
    )
    table = table.with_columns(
        pl.when(alive & (pl.int_range(pl.len()).over([*pair, _PRODUCT, alive]) > 0))
        .then(pl.lit("product_repeat"))
        .otherwise(pl.col(S.REASON))
        .alias(S.REASON)
    )
    if cfg.sampling == "random":
        order = _random_keys(table, seed)
    else:
        order = table[S.RANK].cast(pl.UInt64)
    table = table.with_columns(order.alias("_order")).sort([*pair, "_order", S.NEGATIVE_LISTING_ID])
    if texts is not None and cfg.duplicate_guard_jaccard is not None:
        table = _guard_taken(table, texts, cfg)
    taken = pl.int_range(pl.len()).over([*pair, alive])
    return table.with_columns(
        pl.when(alive & (taken >= cfg.num_negatives))
        .then(pl.lit("not_sampled"))
        .otherwise(pl.col(S.REASON))
        .alias(S.REASON)
    ).drop("_order")


def filter_candidates(
    candidates: pl.DataFrame,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: MineConfig,
    seed: int,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split every (pair, candidate) into kept negatives and dropped rows with a reason.

    Args:
        candidates: (query, negative_listing_id, score): the listings retrieved for each query.
        positives: (query, positive_listing_id, positive_score): one row per clicked pair; a query
            with several rows is one query with several positives.
        products: (listing_id, product_id[, title_norm]); a listing without a row is its own
            product. With `title_norm`, `cfg.duplicate_guard_jaccard` compares the titles of a
            positive and the candidates about to be taken.
        cfg: the `mine` section; seed: for `sampling = "random"`.

    Returns:
        (kept, dropped): kept has `_NEGATIVE_COLUMNS`, dropped the same plus `reason`; both sorted
        by (query, positive_listing_id, rank), where rank is the candidate's 1-based position in
        its query's retrieval list (score descending, ties by listing id).
    """
    texts = None
    if S.TITLE_NORM in products.columns:
        texts = dict(products.select(S.LISTING_ID, S.TITLE_NORM).iter_rows())
    table = _select(_stamp_filters(candidates, positives, products, cfg), texts, cfg, seed)
    order = [S.QUERY, S.POSITIVE_LISTING_ID, S.RANK]
    kept = table.filter(pl.col(S.REASON).is_null()).select(_NEGATIVE_COLUMNS).sort(order)
    dropped = (
        table.filter(pl.col(S.REASON).is_not_null())
        .select(*_NEGATIVE_COLUMNS, pl.col(S.REASON).cast(pl.Enum(REASONS)))
        .sort(order)
    )
    return kept, dropped


@dataclass(frozen=True)
class Mined:
    """What `mine_pairs` found: every query's final candidates, the split of (pair, candidate)
    rows into kept and dropped (see `filter_candidates`), one entry per retrieval round, and the
    listings deeper rounds stepped over because they score above the margin (summed over pairs;
    they are counted, not listed)."""

    candidates: pl.DataFrame
    kept: pl.DataFrame
    dropped: pl.DataFrame
    rounds: list[dict[str, int]]
    skipped_above_ceiling: int


_DEEPEN = 4  # each round looks this many times deeper for the queries still short


def _short_queries(positives: pl.DataFrame, kept: pl.DataFrame, num_negatives: int) -> pl.Series:
    """Queries with at least one pair that kept fewer than ``num_negatives`` negatives."""
    per_pair = positives.select(S.QUERY, S.POSITIVE_LISTING_ID).join(
        kept.group_by(S.QUERY, S.POSITIVE_LISTING_ID).len("_n"),
        on=[S.QUERY, S.POSITIVE_LISTING_ID],
        how="left",
    )
    return per_pair.filter(pl.col("_n").fill_null(0) < num_negatives)[S.QUERY].unique()


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
    candidate table small. Each query's result depends on its own pairs only.
    """
    deepest = min(cfg.range_max, len(retrieval.listing_ids))
    head = depth = min(cfg.search_depth, deepest)
    rows = np.arange(len(retrieval.queries))
    candidates = retrieval.candidates(rows, head)
    above = np.zeros(rows.size, np.int64)
    parts: list[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]] = []
    rounds, skipped = [], []
    while True:
        names = pl.Series(S.QUERY, [retrieval.queries[i] for i in rows], dtype=pl.String)
        pos = positives.filter(pl.col(S.QUERY).is_in(names.implode()))
        kept, dropped = filter_candidates(candidates, pos, products, cfg, seed)
        short = _short_queries(pos, kept, cfg.num_negatives)
        rounds.append({"depth": depth, "queries": int(rows.size), "short": short.len()})
        deeper = names.is_in(short.implode()).to_numpy() & (above + depth < deepest)
        finished = names.filter(pl.Series(~deeper))
        done = pl.col(S.QUERY).is_in(finished.implode())
        parts.append((candidates.filter(done), kept.filter(done), dropped.filter(done)))
        steps = np.clip(np.minimum(above, deepest) - head, 0, None)[~deeper]
        skipped.append(pl.DataFrame({S.QUERY: finished, "_skipped": steps}))
        if not deeper.any():
            break
        rows, depth = rows[deeper], depth * _DEEPEN
        ceilings = _ceilings(positives, names.filter(pl.Series(deeper)), cfg)
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


def summarise(
    candidates: pl.DataFrame,
    positives: pl.DataFrame,
    kept: pl.DataFrame,
    dropped: pl.DataFrame,
    cfg: MineConfig,
) -> dict[str, Any]:
    """Candidates considered (counted from the inputs, so the accounting identity is a real
    check), per-reason drops, and per-pair shortfalls (short pairs are kept, never padded)."""
    per_query = candidates.group_by(S.QUERY).len("_k")
    considered = positives.join(per_query, on=S.QUERY, how="left")["_k"].fill_null(0).sum()
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
    counts = dict(dropped[S.REASON].cast(pl.String).value_counts().iter_rows())
    n_pairs = per_pair.height
    return {
        "considered": int(considered),
        "dropped_by_reason": {reason: int(counts.get(reason, 0)) for reason in REASONS},
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


def run(  # noqa: PLR0913 - the stage interface shared by the pipeline
    cfg: PairsieveConfig,
    clicks: pl.DataFrame | Path,
    listings: pl.DataFrame | Path,
    products: pl.DataFrame | Path,
    out_dir: Path,
    encoder: Encoder | None = None,
) -> StageResult:
    """Mine hard negatives for every clicked (query, listing) pair into ``out_dir``.

    Writes `negatives.parquet` and `negatives_dropped.parquet` (see `filter_candidates`).

    Raises:
        PairsieveError: ``missing_file``, ``missing_column`` or ``unknown_listing``.
    """
    clicks_df = _read(clicks, "clicks", (S.QUERY, S.LISTING_ID))
    listings_df = _read(listings, "listings", (S.LISTING_ID, S.TITLE))
    products_df = _read(products, "products", (S.LISTING_ID, S.PRODUCT_ID))
    pairs = clicks_df.select(S.QUERY, S.LISTING_ID).unique()
    _check_known(pairs, listings_df, str(clicks) if isinstance(clicks, Path) else "clicks")
    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    embedded = embed_inputs(
        pairs[S.QUERY].to_list(),
        listings_df,
        encoder,
        EmbeddingCache(cfg.cache_dir, encoder.model_key),
    )
    retrieval = build_retrieval(embedded, cfg)
    started = time.perf_counter()
    positives = positive_table(pairs, embedded)
    info = listing_products(listings_df, products_df)
    mined = mine_pairs(retrieval, positives, info, cfg.mine, cfg.seed)
    candidates, kept, dropped = mined.candidates, mined.kept, mined.dropped
    filter_s = round(time.perf_counter() - started - retrieval.info["search_s"], 3)
    out_dir = Path(out_dir)
    io.write_parquet(kept, out_dir / S.NEGATIVES_FILE)
    io.write_parquet(dropped, out_dir / S.NEGATIVES_DROPPED_FILE)
    summary = summarise(candidates, positives, kept, dropped, cfg.mine)
    summary["skipped_above_ceiling"] = mined.skipped_above_ceiling
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
        outputs={"negatives": S.NEGATIVES_FILE, "dropped": S.NEGATIVES_DROPPED_FILE},
        details={
            **summary,
            "rows_in_means": "candidates considered: for each (query, positive) pair, each "
            "listing retrieved for its query: its top mine.search_depth and, for queries left "
            "short, its best listings at or below the margin up to rank mine.range_max; "
            "skipped_above_ceiling counts the listings stepped over (inside the margin)",
            "candidates_per_query": candidates.height / max(1, len(embedded.queries)),
            "retrieval_rounds": mined.rounds,
            "index": retrieval.info["index"],
            "embedding": {k: v for k, v in embedded.stats.items() if k != "embed_s"},
        },
    )
