"""Mining's retrieval half: embed the distinct queries and listings with the shared cache, build
a faiss index over the listings (exact up to `knn.exact_max`, IVF above, in slices of
`knn.slice_vectors`) and turn its answers into candidate tables; `positive_table` scores each
clicked (query, listing) pair."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core.hashing import text_keys
from pairsieve.core.plans import Plan
from pairsieve.mine.filters import (
    with_ranks,
)
from pairsieve.vectors import index_slices, knn, probe_below
from pairsieve.vectors.embed import Encoder, embed_texts
from pairsieve.vectors.embedding_cache import EmbeddingCache
from pairsieve.vectors.threads import fixed_threads


@dataclass(frozen=True)
class Embedded:
    """Distinct query texts and listings (both sorted, so row order of the inputs is irrelevant)
    with their unit vectors: ``query_vectors`` (q, d) and ``listing_vectors`` (n, d) float32;
    ``listing_keys`` (n,) are the titles' `embed.text_keys`, which file them in an IVF layout.
    The listing ids are a polars String series: one buffer, not a Python object per listing,
    and gathered by row without a conversion."""

    queries: list[str]
    listing_ids: pl.Series
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
        listings[S.LISTING_ID],
        query_vectors,
        listing_vectors,
        stats,
        text_keys(titles),
    )


@dataclass(frozen=True)
class Retrieval(Plan):
    """A sliced faiss index over the listings and the distinct queries' vectors, searched as
    deep as each query needs (`mine_pairs`), at a fixed thread count so that the scores are the
    same bytes on any worker (`vectors.threads`). The listing vectors, which the exact scan
    below the margin reads, may be a `knn.VectorFile`, as they are when read from a plan."""

    readers = {"index": index_slices.SlicedIndex.read, "listing_vectors": knn.VectorFile.read}

    index: index_slices.SlicedIndex
    queries: list[str]
    listing_ids: pl.Series
    query_vectors: np.ndarray
    listing_vectors: np.ndarray | knn.VectorFile
    info: dict[str, Any]
    deep_nprobe: int | None = None  # IVF lists the scan below the margin probes; None: exact

    def candidates(self, rows: np.ndarray, depth: int) -> pl.DataFrame:
        """(query, negative_listing_id, score, rank) for the top ``depth`` listings of the
        queries at ``rows`` (indices into ``queries``), from the index."""
        started = time.perf_counter()
        with fixed_threads():
            scores, ids = self.index.search(self.query_vectors[rows], depth)
        self.info["search_s"] += time.perf_counter() - started
        names = [self.queries[i] for i in rows]
        return with_ranks(candidate_table(names, self.listing_ids, scores, ids))

    def candidates_below(
        self, rows: np.ndarray, ceilings: np.ndarray, head: int, depth: int, max_rank: int
    ) -> tuple[pl.DataFrame, np.ndarray]:
        """The top ``head`` listings of each query plus its top ``depth`` scoring at or below
        its ceiling, ranked in the full ranking and cut at ``max_rank``, and per query the
        number of listings above its ceiling: from the IVF index probing ``deep_nprobe`` lists
        (`probe_below`, exact for the queries its guard finds unfilled), or an exact scan
        (`knn.scan_below`)."""
        started = time.perf_counter()
        queries = self.query_vectors[rows]
        with fixed_threads():
            if self.deep_nprobe is None:
                row, ids, scores, ranks, above = knn.scan_below(
                    self.listing_vectors, queries, ceilings, head, depth
                )
                scanned = len(rows)
            else:
                row, ids, scores, ranks, above, scanned = probe_below.probe_below(
                    self.index, self.deep_nprobe, self.listing_vectors, queries, ceilings,
                    head, depth, max_rank,
                )  # fmt: skip
        self.info["search_s"] += time.perf_counter() - started
        self.info["scanned_below"] = self.info.get("scanned_below", 0) + scanned
        table = pl.DataFrame(
            {
                S.QUERY: pl.Series([self.queries[i] for i in rows], dtype=pl.String).gather(row),
                S.NEGATIVE_LISTING_ID: self.listing_ids.gather(ids),
                S.SCORE: scores,
                S.RANK: pl.Series(ranks, dtype=pl.Int32),
            }
        )
        return table.filter(pl.col(S.RANK) <= max_rank), above


def build_retrieval(
    embedded: Embedded,
    cfg: PairsieveConfig,
    layout: knn.IvfLayout | None = None,
    folder: Path | None = None,
) -> Retrieval:
    """Exact `IndexFlatIP` slices up to ``knn.exact_max`` listings, IVF above (see
    `pairsieve.vectors.index_slices`; a previous build's ``layout`` spares the IVF training while
    its centroids fit, and the assignment of the titles it indexed); with ``folder``, the slices
    go to files there as they are built."""
    started = time.perf_counter()
    index = index_slices.build(
        embedded.listing_vectors, cfg.knn, cfg.seed, layout, embedded.listing_keys, folder
    )
    info = {
        "index": index.kind,
        "index_slices": len(index.slices),
        "index_s": time.perf_counter() - started,
        "search_s": 0.0,
    }
    info["ivf_centroids"] = knn.centroid_source(index.centroids, layout)
    return Retrieval(
        index,
        embedded.queries,
        embedded.listing_ids,
        embedded.query_vectors,
        embedded.listing_vectors,
        info,
        cfg.knn.deep_nprobe if index.centroids is not None else None,
    )


def candidate_table(
    queries: list[str], listing_ids: pl.Series, scores: np.ndarray, ids: np.ndarray
) -> pl.DataFrame:
    """Long table (query, negative_listing_id, score) of the retrieved listings; ids < 0 (fewer
    listings than k) are not candidates."""
    mask = ids >= 0  # (q, k) bool
    query_index = np.repeat(np.arange(len(queries)), ids.shape[1])[mask.ravel()]
    return pl.DataFrame(
        {
            S.QUERY: pl.Series(queries, dtype=pl.String).gather(query_index),
            S.NEGATIVE_LISTING_ID: listing_ids.gather(ids[mask]),
            S.SCORE: scores[mask].astype(np.float32),
        }
    )


def positive_table(pairs: pl.DataFrame, embedded: Embedded) -> pl.DataFrame:
    """(query, positive_listing_id, positive_score) for every distinct clicked pair."""
    query_pos = pl.DataFrame({S.QUERY: embedded.queries}, {S.QUERY: pl.String}).with_row_index("_q")
    listing_pos = embedded.listing_ids.to_frame(S.LISTING_ID).with_row_index("_l")
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
