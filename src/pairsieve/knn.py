"""faiss nearest-neighbour search over unit vectors (inner product = cosine).

Exact `IndexFlatIP` up to `KnnConfig.exact_max` vectors; above it an IVF index whose recall
against exact search is measured in `benchmarks/`. Training the IVF index's coarse centroids
(k-means over a sample) is its fixed cost, minutes at 10^6 vectors, so a day-2 build takes the
previous build's centroids (`CENTROIDS_FILE`) while they still fit the index's size.
"""

from __future__ import annotations

import math
from pathlib import Path

import faiss
import numpy as np
import polars as pl

from pairsieve import io
from pairsieve.config import KnnConfig

CENTROIDS_FILE = "ivf_centroids.parquet"  # a stage's IVF centroids, for the next build
_CENTROID = "centroid"
_REFIT_RATIO = 1.25  # retrain when the size calls for this many times more (or fewer) lists


def nlist_for(n: int, cfg: KnnConfig) -> int:
    """IVF lists for ``n`` vectors: ``cfg.nlist``, else 4 * sqrt(n)."""
    return cfg.nlist or max(1, int(4 * math.sqrt(n)))


def build_index(
    vectors: np.ndarray, cfg: KnnConfig, seed: int = 13, centroids: np.ndarray | None = None
) -> faiss.Index:
    """Index (n, d) float32 unit vectors: exact when small, IVF-flat when large.

    The IVF index's centroids are trained on a seeded sample, or taken from ``centroids``
    (nlist, d) when `centroids_fit` them to this index (no training).
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    if n <= cfg.exact_max:
        index = faiss.IndexFlatIP(dim)
    else:
        quantizer = faiss.IndexFlatIP(dim)
        if centroids_fit(centroids, n, dim, cfg):
            quantizer.add(np.ascontiguousarray(centroids, dtype=np.float32))
            index = faiss.IndexIVFFlat(quantizer, dim, len(centroids), faiss.METRIC_INNER_PRODUCT)
        else:
            nlist = nlist_for(n, cfg)
            index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            sample = np.random.default_rng(seed).choice(n, min(n, nlist * 64), replace=False)
            index.cp.seed = seed
            index.train(vectors[np.sort(sample)])
        index.nprobe = cfg.nprobe
    index.add(vectors)
    return index


def centroids_fit(centroids: np.ndarray | None, n: int, dim: int, cfg: KnnConfig) -> bool:
    """Whether ``centroids`` can serve an IVF index over ``n`` vectors of ``dim``: same
    dimension, and a list count within `_REFIT_RATIO` of what ``n`` calls for (exactly
    ``cfg.nlist`` when set), so lists stay about as long as a fresh training makes them."""
    if centroids is None or centroids.ndim != 2 or centroids.shape[1] != dim:
        return False
    wanted, have = nlist_for(n, cfg), len(centroids)
    if cfg.nlist is not None:
        return have == wanted
    return wanted / _REFIT_RATIO <= have <= wanted * _REFIT_RATIO


def centroids_of(index: faiss.Index) -> np.ndarray | None:
    """The coarse centroids (nlist, d) float32 of an IVF index; None for an exact one."""
    if not isinstance(index, faiss.IndexIVF):
        return None
    quantizer = faiss.downcast_index(index.quantizer)
    return quantizer.reconstruct_n(0, quantizer.ntotal)


def write_centroids(centroids: np.ndarray, path: Path) -> None:
    """Store (nlist, d) centroids as one fixed-size float32 array column."""
    io.write_parquet(pl.DataFrame({_CENTROID: np.asarray(centroids, dtype=np.float32)}), path)


def read_centroids(path: Path) -> np.ndarray | None:
    """Centroids written by `write_centroids`, or None when the file is absent."""
    if not path.exists():
        return None
    return pl.read_parquet(path)[_CENTROID].to_numpy().astype(np.float32, copy=False)


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` neighbours: (scores (m, k) float32, ids (m, k) int64; -1 where fewer exist).

    Ties are broken by id so results do not depend on faiss' internal order.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, index.ntotal)
    if k == 0 or len(queries) == 0:
        return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
    scores, ids = index.search(queries, k)
    order = np.lexsort((ids, -scores), axis=1)
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def _top_sorted(scores: np.ndarray, k: int) -> np.ndarray:
    """Column ids of each row's ``k`` best scores, ordered by (score desc, id asc); ties at the
    cut go to the smaller ids, so the result is the prefix of a full sort.

    `np.argpartition` picks the top k in one pass; only rows where it had to choose among
    values tied at the cut (rare with float scores) are redone by `_top_with_ties`.
    """
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    picked = np.take_along_axis(scores, top, 1)
    kth = picked.min(axis=1, keepdims=True)
    ties = (scores == kth).sum(axis=1) > (picked == kth).sum(axis=1)
    if ties.any():
        top[ties] = _top_with_ties(scores[ties], k)
        picked[ties] = np.take_along_axis(scores[ties], top[ties], 1)
    return np.take_along_axis(top, np.lexsort((top, -picked), axis=1), 1)


def _top_with_ties(scores: np.ndarray, k: int) -> np.ndarray:
    """`_top_sorted` by counting: the values above the cut, then the smallest ids tied at it."""
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]  # (c, 1)
    greater = scores > kth
    equal = scores == kth
    room = k - greater.sum(axis=1, keepdims=True)
    chosen = greater | (equal & (np.cumsum(equal, axis=1) <= room))
    ids = np.nonzero(chosen)[1].reshape(len(scores), k)  # ascending ids per row
    picked = np.take_along_axis(scores, ids, 1)
    return np.take_along_axis(ids, np.lexsort((ids, -picked), axis=1), 1)


def scan_below(
    vectors: np.ndarray,
    queries: np.ndarray,
    ceilings: np.ndarray,
    head: int,
    depth: int,
    chunk_cells: int = 1 << 25,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact scan: per query its top ``head`` vectors, and its top ``depth`` among those scoring
    at or below its ceiling, each with its rank in the full ranking (score desc, id asc).

    Listings above the ceiling beyond the head are stepped over, not returned: a query whose
    weakly matched positive puts thousands of listings above its margin gets its candidates from
    below the margin without materialising the thousands. Works in chunks of about
    ``chunk_cells`` scores (128 MB).

    Returns:
        (query_row, id, score, rank) as flat arrays, and ``above`` (m,): listings per query
        scoring above its ceiling.
    """
    n = len(vectors)
    head, depth = min(head, n), min(depth, n)
    step = max(1, chunk_cells // max(n, 1))
    parts, above_all = [], []
    for start in range(0, len(queries), step):
        scores = np.ascontiguousarray(queries[start : start + step], np.float32) @ vectors.T
        over = scores > ceilings[start : start + step, None]
        above = over.sum(axis=1)
        top = _top_sorted(scores, head) if head else np.empty((len(scores), 0), np.int64)
        below = _top_sorted(np.where(over, -np.inf, scores), depth)
        below_rank = above[:, None] + np.arange(1, depth + 1)
        rows = np.arange(start, start + len(scores))[:, None]
        # a below-ceiling listing ranked within the head is already there
        keep_below = ~np.take_along_axis(over, below, 1) & (below_rank > head)
        ids = np.concatenate([top, below], axis=1)
        ranks = np.concatenate([np.broadcast_to(np.arange(1, head + 1), top.shape), below_rank], 1)
        mask = np.concatenate([np.ones(top.shape, bool), keep_below], axis=1)
        got = np.take_along_axis(scores, ids, 1)
        parts.append((np.broadcast_to(rows, ids.shape)[mask], ids[mask], got[mask], ranks[mask]))
        above_all.append(above)
    if not parts:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0, np.float32), empty, empty
    q, i, s, r = (np.concatenate(column) for column in zip(*parts, strict=True))
    above = np.concatenate(above_all)
    return q, i.astype(np.int64), s.astype(np.float32), r.astype(np.int64), above
