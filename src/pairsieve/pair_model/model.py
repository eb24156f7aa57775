"""A learned pair judge: P(same product) of a candidate pair from a dozen pair features.

The hand-set acceptance rule (cosine >= 0.9 and Jaccard >= 0.5, or Jaccard >= 0.8, or a shared
model code) leaves evidence unused: which words the titles share matters more than how many
("sony" is shared by thousands of titles, "a6500" by a handful), as does whether the shorter
title is contained in the longer one. A logistic regression over the features below combines
them. Its coefficients are fitted once, offline, by `pair_model.fit` (run by
``benchmarks/fit_pair_model.py``) on PriceRunner's candidate pairs (labels from its ground
truth, attribute-vetoed pairs excluded, as vetoes stay hard) and shipped in ``model.json``:
nothing is trained at run time. Every
feature is a ratio or a count relative to the catalog being clustered (IDF weights come from
its own distinct titles), so no vocabulary of the training data is carried over.

It needs embeddings (cosine and the cosine gap are its strongest features): without them
(``cluster.use_embeddings`` false) the rule decides, as a model fitted without cosine lost to the
rule on the PriceRunner category split.

Measured (benchmarks/RESULTS.md, "cluster"): fitted on five PriceRunner categories it beats the
hand-set rule on the other five, both ways (pairwise F1 0.682 vs 0.668 and 0.542 vs 0.527), and
on Abt-Buy, which it never saw (0.803 vs 0.790); all of PriceRunner 0.629 vs 0.594.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

MODEL_FILE = Path(__file__).with_name("model.json")
_CHUNK = 1 << 18


@dataclass(frozen=True)
class PairModel:
    """Logistic regression on raw (unscaled) features: p = 1 / (1 + exp(-(x @ coef + bias)))."""

    features: tuple[str, ...]
    coef: np.ndarray  # (k,) float64
    intercept: float

    def as_json(self) -> dict:
        """The model as ``model.json`` spells it (features, coef, intercept)."""
        coef = [round(float(c), 6) for c in self.coef]
        intercept = round(self.intercept, 6)
        return {"features": list(self.features), "coef": coef, "intercept": intercept}

    def probability(self, features: dict[str, np.ndarray]) -> np.ndarray:
        """(m,) float64 probability per pair from a dict of (m,) feature columns."""
        z = np.full(len(next(iter(features.values()))), self.intercept)
        for name, weight in zip(self.features, self.coef.tolist(), strict=True):
            z += weight * features[name].astype(np.float64)
        return 1.0 / (1.0 + np.exp(-z))


@cache
def load_model(path: Path = MODEL_FILE) -> PairModel:
    """The shipped model (``model.json``)."""
    spec = json.loads(Path(path).read_text())
    return PairModel(
        features=tuple(spec["features"]),
        coef=np.asarray(spec["coef"], dtype=np.float64),
        intercept=float(spec["intercept"]),
    )


def word_weights(vocab: dict[str, int], words: csr_matrix) -> np.ndarray:
    """(|vocab|, 4) float64 per word: 1, IDF over the catalog's distinct titles, 1 if the word
    holds a digit, 1 if it is a bare number. Computed once for the whole catalog: the IDF
    needs every title, a chunk of pairs only its own."""
    n_titles = words.shape[0]
    df = np.bincount(words.indices, minlength=words.shape[1])
    out = np.zeros((words.shape[1], 4), dtype=np.float64)
    out[:, 0] = 1.0
    out[:, 1] = np.log((n_titles + 1) / (df + 1))
    for word, col in vocab.items():
        out[col, 2] = any(ch.isdigit() for ch in word)
        out[col, 3] = word.replace(".", "", 1).isdigit()
    return out


def _shared_weights(words: csr_matrix, a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(m, k) sums of the k word weights over the words pair i's titles share."""
    out = np.empty((len(a), w.shape[1]), dtype=np.float64)
    for start in range(0, len(a), _CHUNK):
        end = start + _CHUNK
        out[start:end] = words[a[start:end]].multiply(words[b[start:end]]) @ w
    return out


def _ratio(num: np.ndarray, den: np.ndarray, empty: float) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), empty)


@dataclass(frozen=True)
class PairInputs:
    """What `pair_features` reads besides the titles' word sets: per pair (m,) arrays."""

    a: np.ndarray  # int64 node index
    b: np.ndarray  # int64 node index
    jaccard: np.ndarray  # float64, `match.jaccard`
    shared_code: np.ndarray  # bool, `match.compare_codes` shared and not conflicting
    signal: pl.Series | list[str]  # proposing signals, "code+minhash"
    cosine: np.ndarray  # float64
    best: np.ndarray | None = None  # (n,) `best_cosines` over all candidates; None: these pairs
    neighbours: csr_matrix | None = None  # `neighbour_graph`; None: no `NEIGHBOUR_FEATURES`


# Features of the candidate graph, not of the titles: how many neighbours two titles share. The
# shipped model does not read them (a catalog's graph depends on how many offers each product
# has); a model refitted to a catalog's own labels may (`pairsieve.labels.refit`).
NEIGHBOUR_FEATURES = ("neighbour_overlap", "neighbours_shared")


def neighbour_graph(n: int, a: np.ndarray, b: np.ndarray) -> csr_matrix:
    """(n, n) symmetric 0/1 adjacency of the node pairs (a[i], b[i])."""
    from scipy.sparse import coo_matrix

    ones = np.ones(2 * len(a), dtype=np.float32)  # counts below 2^24 stay exact
    graph = coo_matrix((ones, (np.concatenate([a, b]), np.concatenate([b, a]))), shape=(n, n))
    graph = graph.tocsr()
    graph.data[:] = 1.0  # a pair listed twice is one edge
    return graph


def neighbour_features(graph: csr_matrix, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """`NEIGHBOUR_FEATURES` per pair: the Jaccard of the two nodes' neighbour sets, and
    log(1 + neighbours shared)."""
    degree = np.diff(graph.indptr)
    shared = np.empty(len(a))
    for start in range(0, len(a), _CHUNK):
        end = start + _CHUNK
        rows = graph[a[start:end]].multiply(graph[b[start:end]])
        shared[start:end] = np.asarray(rows.sum(axis=1)).ravel()
    union = degree[a] + degree[b] - shared
    overlap = _ratio(shared, union, 0.0)
    return {"neighbour_overlap": overlap, "neighbours_shared": np.log1p(shared)}


def best_cosines(n: int, a: np.ndarray, b: np.ndarray, cosine: np.ndarray) -> np.ndarray:
    """(n,) the best cosine among each node's candidate pairs (-1 for a node with none): a pair
    far below its titles' best match is weaker evidence than the same cosine at the top."""
    best = np.full(n, -1.0)
    np.maximum.at(best, a, cosine)
    np.maximum.at(best, b, cosine)
    return best


def pair_features(
    words: csr_matrix, weights: np.ndarray, has_codes: np.ndarray, pairs: PairInputs
) -> dict[str, np.ndarray]:
    """(m,) feature columns per candidate pair, by name (the names `model.json` uses).

    ``words`` is the (n_nodes, |vocab|) binary matrix of the titles' word sets, ``weights``
    its columns' `word_weights`, ``has_codes`` (n_nodes,) whether a title has a model code.
    """
    a, b = pairs.a, pairs.b
    totals = words @ weights  # (n, 4): words, IDF mass, digit words, numbers per title
    shared = _shared_weights(words, a, b, weights)
    ta, tb = totals[a], totals[b]
    # Matched in polars: a numpy string array of the signals is ~130 bytes a pair.
    given = pairs.signal
    signal = (given.cast(pl.String) if isinstance(given, pl.Series) else pl.Series(given)).str
    out = {
        "jaccard": pairs.jaccard,
        "idf_jaccard": _ratio(shared[:, 1], ta[:, 1] + tb[:, 1] - shared[:, 1], 1.0),
        "containment": _ratio(shared[:, 0], np.minimum(ta[:, 0], tb[:, 0]), 1.0),
        "length_ratio": _ratio(np.minimum(ta[:, 0], tb[:, 0]), np.maximum(ta[:, 0], tb[:, 0]), 1.0),
        "digit_jaccard": _ratio(shared[:, 2], ta[:, 2] + tb[:, 2] - shared[:, 2], 1.0),
        "digit_unmatched": ta[:, 2] + tb[:, 2] - 2 * shared[:, 2],
        "numbers_shared": shared[:, 3] > 0,
        "numbers_unmatched": ta[:, 3] + tb[:, 3] - 2 * shared[:, 3],
        "shared_code": pairs.shared_code,
        "codes_both": has_codes[a] & has_codes[b],
        "codes_one": has_codes[a] ^ has_codes[b],
        "signal_code": signal.contains("code", literal=True).to_numpy(),
        "signal_minhash": signal.contains("minhash", literal=True).to_numpy(),
    }
    best = pairs.best
    if best is None:
        best = best_cosines(words.shape[0], a, b, pairs.cosine)
    out["cosine"] = pairs.cosine
    out["cosine_gap"] = np.maximum(best[a], best[b]) - pairs.cosine
    if pairs.neighbours is not None:
        out.update(neighbour_features(pairs.neighbours, a, b))
    return out
