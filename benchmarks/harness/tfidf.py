"""TF-IDF top-k neighbours of a catalog's titles, as listing pairs for the clustering to judge.

A lexical candidate source beside MinHash and the embedding kNN: each distinct normalised title
gets the k titles with the highest cosine of their TF-IDF vectors (idf from the catalog's own
document frequencies), whatever that cosine is. Unlike MinHash's Jaccard over every word, a
rare shared word weighs more than several common ones, so two word-named titles that share one
rare name meet even when their other words differ. Words held by more than `max_df_share` of the
titles (colours, "black", "pack") are left out: they weigh little and would make the sparse
product dense.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import sparse

from pairsieve import schemas as S
from pairsieve.text.attributes import normalize_expr, tokens

ROWS_AT_ONCE = 2048  # titles whose similarities are held at once: a bounded sparse block


def _matrix(titles: list[str], max_df_share: float) -> sparse.csr_matrix:
    """(titles, words) L2-normalised TF-IDF rows, sublinear term frequency."""
    vocabulary: dict[str, int] = {}
    rows, cols, counts = [], [], []
    for row, title in enumerate(titles):
        seen: dict[int, int] = {}
        for word in tokens(title):
            column = vocabulary.setdefault(word, len(vocabulary))
            seen[column] = seen.get(column, 0) + 1
        rows.extend([row] * len(seen))
        cols.extend(seen)
        counts.extend(seen.values())
    shape = (len(titles), len(vocabulary))
    tf = sparse.csr_matrix((np.asarray(counts, dtype=np.float32), (rows, cols)), shape=shape)
    df = np.bincount(np.asarray(cols, dtype=np.int64), minlength=shape[1])
    keep = (df >= 2) & (df <= max(2, max_df_share * shape[0]))  # a word on one title joins none
    idf = np.where(keep, np.log(shape[0] / np.maximum(df, 1)), 0.0).astype(np.float32)
    tf.data = 1.0 + np.log(tf.data)
    weighted = tf @ sparse.diags(idf)
    norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1)).ravel())
    weighted = sparse.diags(1.0 / np.maximum(norms, 1e-12)) @ weighted
    weighted.eliminate_zeros()
    return weighted.tocsr()


def top_k_pairs(titles: list[str], k: int, max_df_share: float = 0.01) -> np.ndarray:
    """(m, 2) int64 index pairs (i < j) of `titles` (already normalised and distinct): each
    title with its k most similar others by TF-IDF cosine, any cosine above 0."""
    matrix = _matrix(titles, max_df_share)
    transposed = matrix.T.tocsr()
    found = []
    for lo in range(0, matrix.shape[0], ROWS_AT_ONCE):
        block = (matrix[lo : lo + ROWS_AT_ONCE] @ transposed).tocsr()
        for offset in range(block.shape[0]):
            row = lo + offset
            start, end = block.indptr[offset], block.indptr[offset + 1]
            others, scores = block.indices[start:end], block.data[start:end]
            chosen = others != row
            others, scores = others[chosen], scores[chosen]
            if len(others) > k:
                best = np.argpartition(-scores, k)[:k]
                others = others[best]
            found.extend((min(row, o), max(row, o)) for o in others.tolist())
    return np.unique(np.asarray(found, dtype=np.int64).reshape(-1, 2), axis=0)


def listing_pairs(catalog: pl.DataFrame, k: int, max_df_share: float = 0.01) -> pl.DataFrame:
    """`top_k_pairs` over the catalog's distinct normalised titles, as (``listing_a``,
    ``listing_b``): one listing stands for each title, the clustering's node of that title."""
    titled = catalog.select(
        pl.col(S.LISTING_ID),
        normalize_expr(pl.col(S.TITLE)).alias("_norm"),
    )
    first = titled.group_by("_norm", maintain_order=True).first().sort("_norm")
    pairs = top_k_pairs(first["_norm"].to_list(), k, max_df_share)
    ids = first[S.LISTING_ID]
    return pl.DataFrame(
        {S.LISTING_A: ids.gather(pairs[:, 0]), S.LISTING_B: ids.gather(pairs[:, 1])}
    )
