"""faiss nearest-neighbour search over unit vectors (inner product = cosine).

Exact `IndexFlatIP` up to `KnnConfig.exact_max` vectors; above it an IVF index whose recall
against exact search is measured in `benchmarks/`.
"""

from __future__ import annotations

import math

import faiss
import numpy as np

from pairsieve.config import KnnConfig


def build_index(vectors: np.ndarray, cfg: KnnConfig, seed: int = 13) -> faiss.Index:
    """Index (n, d) float32 unit vectors: exact when small, IVF-flat when large."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    if n <= cfg.exact_max:
        index = faiss.IndexFlatIP(dim)
    else:
        nlist = cfg.nlist or max(1, int(4 * math.sqrt(n)))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        clustering_sample = np.random.default_rng(seed).choice(n, min(n, nlist * 64), replace=False)
        index.cp.seed = seed
        index.train(vectors[np.sort(clustering_sample)])
        index.nprobe = cfg.nprobe
    index.add(vectors)
    return index


def search(
    index: faiss.Index, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
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
