"""Held-out retrieval: every query against the whole catalog, scored at product level.

Per query, with `hits` the top-k listings whose product is one the query clicked and `relevant`
the number of such listings in the corpus: recall@k is hits / relevant (the share of the
product's listings found, so a product with 30 copies caps it at 1/3 at k = 10); nDCG@k uses
binary gains against the ideal ordering of `relevant` listings; MRR@k is 1 over the rank of the
first hit (0 without one). A listing without a product answers no query.
"""

from __future__ import annotations

import faiss
import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.experiment.data import RELEVANT, ExperimentData

K = 10
METRICS = (f"recall@{K}", f"ndcg@{K}", f"mrr@{K}")


def encode(model, texts: list[str], batch_size: int = 128) -> np.ndarray:
    """(n, d) float32 unit vectors of `texts` under `model` (a SentenceTransformer)."""
    vectors = model.encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True
    )
    return np.ascontiguousarray(vectors, dtype=np.float32)


def top_k(queries: np.ndarray, corpus: np.ndarray, k: int = K) -> np.ndarray:
    """(q, k) int64 corpus rows of each query's k best inner products, exact (faiss flat)."""
    index = faiss.IndexFlatIP(corpus.shape[1])
    index.add(corpus)
    _, found = index.search(queries, min(k, corpus.shape[0]))
    return found.astype(np.int64)


def score(found: np.ndarray, hit: np.ndarray, relevant: np.ndarray) -> dict[str, np.ndarray]:
    """Per-query metrics from `hit` (q, k) bool (the rank's listing is relevant) and `relevant`
    (q,) int64 (relevant listings in the corpus)."""
    k = found.shape[1]
    ranks = np.arange(1, k + 1)
    gains = 1.0 / np.log2(ranks + 1)
    ideal = np.cumsum(gains)[np.clip(np.minimum(relevant, k) - 1, 0, k - 1)]
    first = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            f"recall@{K}": np.where(relevant > 0, hit.sum(axis=1) / relevant, 0.0),
            f"ndcg@{K}": np.where(relevant > 0, (hit * gains).sum(axis=1) / ideal, 0.0),
            f"mrr@{K}": np.where(first > 0, 1.0 / np.maximum(first, 1), 0.0),
        }


def evaluate(model, data: ExperimentData) -> pl.DataFrame:
    """Per-query recall, nDCG and MRR at 10 of `model` on the held-out queries, the whole catalog
    as corpus: query, recall@10, ndcg@10, mrr@10 (one row per distinct query text)."""
    # Each distinct title is encoded once, then given to every listing that carries it.
    titles, row_of = np.unique(data.corpus[S.TITLE].to_numpy().astype(str), return_inverse=True)
    corpus_vectors = encode(model, titles.tolist())[row_of]
    grouped = data.queries.group_by(S.QUERY).agg(pl.col(RELEVANT)).sort(S.QUERY)
    query_vectors = encode(model, grouped[S.QUERY].to_list())
    found = top_k(query_vectors, corpus_vectors)
    keys = data.corpus.select(pl.col(RELEVANT).fill_null(pl.concat_str(pl.lit("\0"), S.LISTING_ID)))
    names, codes = np.unique(keys.to_series().to_numpy().astype(str), return_inverse=True)
    lookup = {name: code for code, name in enumerate(names.tolist())}
    counts = np.bincount(codes, minlength=len(names))
    hit = np.zeros(found.shape, dtype=bool)
    relevant = np.zeros(len(grouped), dtype=np.int64)
    for i, products in enumerate(grouped[RELEVANT].to_list()):
        wanted = np.array([lookup[p] for p in products if p in lookup], dtype=np.int64)
        relevant[i] = counts[wanted].sum()
        hit[i] = np.isin(codes[found[i]], wanted)
    return pl.DataFrame({S.QUERY: grouped[S.QUERY], **score(found, hit, relevant)})
