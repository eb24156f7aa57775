"""Listings -> product ids: candidates, verification with vetoes, clustering without chaining.

Measured on PriceRunner (issue 3): connected components over any single similarity signal score
pairwise F1 0.001-0.10, because one bridge pair chains "iPhone 8 64GB" to "iPhone 8 256GB" to
"iPhone 8 Plus", and titles such as "washing machine" glue unrelated products. So:

1. Listings with the same normalised title form one *node* (unless the title is
   low-information, see `text.Attributes.informative`; those stay single listings).
2. Candidate node pairs come from four signals: exact title, MinHash LSH over shingles, a shared
   model-code core ("ue55nu8000" ~ "ue55nu8000txxu" ~ "55nu8000", blocked so very common codes
   are skipped), and faiss kNN over sentence embeddings of the raw titles.
3. Each candidate is scored (word Jaccard, cosine) and vetoed when extracted attributes conflict
   (model code, capacity/size, generation, variant word, number); the reason is recorded. An
   unvetoed pair is accepted by the learned verifier (`verifier`: a logistic regression over
   pair features, shipped as coefficients), whose probability is the pair's linkage score.
4. Accepted pairs are merged by constrained average linkage (`agglomerate`): two clusters merge
   only when the mean score over *all* their cross pairs reaches `link_threshold` and no cross
   pair is vetoed, in descending linkage order. A single bridge pair cannot chain two products.
5. A product id is ``"p" + stable_hash(smallest member listing_id)``: a function of the members
   only, so shuffled input yields byte-identical output.

Measured with the defaults (benchmarks/RESULTS.md, "cluster"): PriceRunner pairwise F1 0.629
(P 0.694, R 0.575), B-cubed F1 0.812 (P 0.886); Abt-Buy pairwise F1 0.803 (P 0.911). The issue's
targets (0.75 / 0.85 / 0.85) are not reached; connected components over the same candidates
score 0.000-0.058 pairwise F1.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np
import polars as pl

from pairsieve import io, minhash, text, verifier
from pairsieve import schemas as S
from pairsieve.config import ClusterConfig, PairsieveConfig
from pairsieve.errors import PairsieveError
from pairsieve.stage import StageResult

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from pairsieve.embed import Encoder

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_NODE = "_node"
_KEY = "_key"
_INFO = "_informative"
SIGNAL_ORDER = ("exact", "code", "minhash", "embedding")


# --- nodes ---------------------------------------------------------------------------------------


def prepare(
    listings: pl.DataFrame, attributes: dict[str, text.Attributes] | None = None
) -> pl.DataFrame:
    """Listings sorted by id with ``title_norm`` and a node index (one per distinct title).

    ``attributes``, when given, is filled with `text.extract_attributes` of every distinct
    ``title_norm``, so the caller need not extract them again.

    Raises:
        PairsieveError: ``missing_column`` when ``listing_id`` or ``title`` is absent.
    """
    for column in S.CATALOG_REQUIRED:
        if column not in listings.columns:
            raise PairsieveError("missing_column", "catalog lacks a required column", column=column)
    frame = listings.with_columns(pl.col(S.LISTING_ID).cast(pl.String))
    if S.TITLE_NORM not in frame.columns:
        frame = frame.with_columns(text.normalize_expr(pl.col(S.TITLE)).alias(S.TITLE_NORM))
    brand = (
        text.normalize_expr(pl.col(S.BRAND).cast(pl.String)).fill_null("")
        if S.BRAND in frame.columns
        else pl.lit("")
    )
    frame = frame.select(S.LISTING_ID, S.TITLE, S.TITLE_NORM, brand.alias(S.BRAND))
    frame = frame.sort(S.LISTING_ID)
    distinct = frame.select(pl.col(S.TITLE_NORM).unique())
    attributes = {} if attributes is None else attributes
    titles = [t for t in distinct[S.TITLE_NORM].to_list() if t not in attributes]
    found = _in_two_processes(
        lambda lo, hi: [text.extract_attributes(t) for t in titles[lo:hi]], len(titles)
    )
    attributes.update(zip(titles, chain.from_iterable(found), strict=True))
    informative = [attributes[t].informative for t in distinct[S.TITLE_NORM].to_list()]
    distinct = distinct.with_columns(pl.Series(_INFO, informative, dtype=pl.Boolean))
    frame = frame.join(distinct, on=S.TITLE_NORM, how="left")
    # Low-information titles key on their own listing id: identical text is no evidence.
    key = (
        pl.when(pl.col(_INFO))
        .then(pl.concat_str([pl.col(S.TITLE_NORM), pl.col(S.BRAND)], separator="\x1f"))
        .otherwise(pl.concat_str([pl.lit("\x00"), pl.col(S.LISTING_ID)]))
    )
    frame = frame.with_columns(key.alias(_KEY))
    node_keys = frame.select(pl.col(_KEY).unique().sort()).with_row_index(_NODE)
    return frame.join(node_keys, on=_KEY, how="left").drop(_KEY).sort(S.LISTING_ID)


def node_table(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per node in node order: representative (smallest) listing, title, brand, count."""
    return (
        frame.group_by(_NODE)
        .agg(
            pl.col(S.LISTING_ID).first(),
            pl.col(S.TITLE).first(),
            pl.col(S.TITLE_NORM).first(),
            pl.col(S.BRAND).first(),
            pl.col(_INFO).first(),
            pl.len().alias("count"),
        )
        .sort(_NODE)
    )


def _in_two_processes(fn: Callable[[int, int], _T], n: int) -> list[_T]:
    """``[fn(0, h), fn(h, n)]`` with h = n // 2, the second half computed by a forked child
    (the machine has 2 cores) and pickled back through a pipe; ordered and deterministic.

    For pure per-item Python work only: the child must not use polars or numba, whose thread
    pools do not survive a fork. Below `_FORK_MIN_ITEMS` items (or without ``os.fork``) this
    is ``[fn(0, n)]``.
    """
    if n < _FORK_MIN_ITEMS or not hasattr(os, "fork"):
        return [fn(0, n)]
    half = n // 2
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, exit without running the parent's clean-up
        status = 1
        try:
            os.close(read)
            payload = pickle.dumps(fn(half, n), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write, "wb") as sink:
                sink.write(payload)
            status = 0
        except BaseException:
            log.exception("forked worker failed")
        finally:
            os._exit(status)
    os.close(write)
    try:
        # Closing ``read`` (also on an error here) unblocks a child still writing.
        with os.fdopen(read, "rb") as source:
            head = fn(0, half)
            payload = source.read()
    finally:
        status = os.waitpid(pid, 0)[1]
    if status != 0:
        raise RuntimeError(f"forked worker failed (wait status {status})")
    return [head, pickle.loads(payload)]


_FORK_MIN_ITEMS = 20_000  # below this, forking (page copies, pickling) does not pay


# --- candidates ----------------------------------------------------------------------------------


def common_codes(attrs: list[text.Attributes], max_df: int) -> set[str]:
    """Codes found on more than ``max_df`` distinct titles: features, not product identifiers."""
    codes = [c for a in attrs for c in a.codes | a.joined]
    counts = pl.Series("code", codes, dtype=pl.String).value_counts()
    return set(counts.filter(pl.col("count") > max_df)["code"].to_list())


def code_block_pairs(attrs: list[text.Attributes], max_block: int) -> tuple[np.ndarray, int]:
    """Node pairs sharing a model-code blocking key (`text.code_keys`); blocks over
    ``max_block`` titles are skipped."""
    rows, keys = [], []
    key_ids: dict[str, int] = {}
    ids_of: dict[str, list[int]] = {}  # code -> its key ids, computed once per distinct code
    for node, attr in enumerate(attrs):
        if not (attr.codes or attr.joined):
            continue
        node_keys: set[int] = set()
        for c in attr.codes | attr.joined:
            found = ids_of.get(c)
            if found is None:
                found = ids_of[c] = [key_ids.setdefault(k, len(key_ids)) for k in text.code_keys(c)]
            node_keys.update(found)
        rows.extend([node] * len(node_keys))
        keys.extend(node_keys)
    if not rows:
        return np.empty((0, 2), np.int64), 0
    # Rows sorted by (key, node): each block is a run of ascending nodes (a node holds a key
    # once). Blocks of s nodes are paired s at a time through the upper triangle of an s x s
    # grid, so the work is the number of pairs; most keys (6-char stretches) are on one title.
    ordered = np.sort((np.asarray(keys, dtype=np.int64) << 32) | np.asarray(rows, dtype=np.int64))
    members = ordered & 0xFFFFFFFF
    starts = np.flatnonzero(np.r_[True, (ordered[1:] >> 32) != (ordered[:-1] >> 32)])
    sizes = np.diff(np.r_[starts, len(ordered)])
    found = [np.empty(0, dtype=np.int64)]
    for size in np.unique(sizes[(sizes >= 2) & (sizes <= max_block)]).tolist():
        block = members[starts[sizes == size][:, None] + np.arange(size)]
        first, second = np.triu_indices(size, 1)
        found.append(((block[:, first] << 32) | block[:, second]).ravel())
    codes = np.sort(np.concatenate(found))
    codes = codes[np.r_[True, codes[1:] != codes[:-1]]] if len(codes) else codes
    return np.stack([codes >> 32, codes & 0xFFFFFFFF], axis=1), int(np.sum(sizes > max_block))


def minhash_pairs(cfg: ClusterConfig, titles: pl.Series, seed: int) -> tuple[np.ndarray, int]:
    """Node pairs colliding in at least one LSH band of their MinHash signatures."""
    shingles = pl.select(
        minhash.shingle_expr(pl.lit(titles), cfg.shingle_kind, cfg.shingle_size)
    ).to_series()
    sig = minhash.signatures(shingles, cfg.num_perm, seed)
    bands, rows = minhash.lsh_params(cfg.lsh_threshold, cfg.num_perm)
    return minhash.lsh_pairs(sig, bands, rows, cfg.max_bucket)


def knn_pairs(cfg: PairsieveConfig, vectors: np.ndarray) -> np.ndarray:
    """Node pairs among each other's ``knn_k`` nearest neighbours with cosine >= min_cosine."""
    from pairsieve import knn

    index = knn.build_index(vectors, cfg.knn, seed=cfg.seed)
    scores, ids = knn.search(index, vectors, cfg.cluster.knn_k + 1)
    source = np.repeat(np.arange(len(vectors)), ids.shape[1])
    keep = (ids.ravel() >= 0) & (scores.ravel() >= cfg.cluster.min_cosine)
    pairs = np.stack([source[keep], ids.ravel()[keep]], axis=1).astype(np.int64)
    pairs = np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1)
    return minhash.unique_pairs(pairs)


def combine_candidates(found: dict[str, np.ndarray]) -> pl.DataFrame:
    """One row per distinct node pair (a < b) with the signals that proposed it ("code+minhash"),
    sorted by (a, b); signals are named in `SIGNAL_ORDER`."""
    parts = [(name, p) for name, p in found.items() if len(p)]
    if not parts:
        return pl.DataFrame(schema={"a": pl.Int64, "b": pl.Int64, S.SIGNAL: pl.String})
    rank = {name: i for i, name in enumerate(SIGNAL_ORDER)}
    codes = np.concatenate([(p[:, 0].astype(np.int64) << 32) | p[:, 1] for _, p in parts])
    bits = np.concatenate([np.full(len(p), 1 << rank[name], dtype=np.int64) for name, p in parts])
    order = np.argsort(codes, kind="stable")
    codes, bits = codes[order], bits[order]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    masks, which = np.unique(np.bitwise_or.reduceat(bits, starts), return_inverse=True)
    names = [
        "+".join(name for name in SIGNAL_ORDER if int(mask) & (1 << rank[name])) for mask in masks
    ]
    codes = codes[starts]
    return pl.DataFrame(
        {
            "a": codes >> 32,
            "b": codes & 0xFFFFFFFF,
            S.SIGNAL: pl.Series(names, dtype=pl.String).gather(which.ravel()),
        }
    )


# --- verification --------------------------------------------------------------------------------


def _set_matrix(sets: list, vocab: dict | None = None) -> tuple[csr_matrix, dict]:
    """(n, |vocab|) binary CSR of n sets (row i holds set i) and the item -> column vocabulary."""
    from scipy.sparse import csr_matrix

    vocab = {} if vocab is None else vocab
    indptr = np.zeros(len(sets) + 1, dtype=np.int64)
    indices: list[int] = []
    for i, items in enumerate(sets):
        indices.extend(vocab.setdefault(item, len(vocab)) for item in items)
        indptr[i + 1] = len(indices)
    data = np.ones(len(indices), dtype=np.int32)
    matrix = csr_matrix(
        (data, np.asarray(indices, dtype=np.int64), indptr), shape=(len(sets), max(len(vocab), 1))
    )
    return matrix, vocab


def _overlap(matrix: csr_matrix, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m,) int64 size of the intersection of the sets in rows a[i] and b[i] of a binary CSR."""
    out = np.empty(len(a), dtype=np.int64)
    for start in range(0, len(a), _PAIR_CHUNK):
        end = start + _PAIR_CHUNK
        both = matrix[a[start:end]].multiply(matrix[b[start:end]])
        out[start:end] = np.asarray(both.sum(axis=1)).ravel()
    return out


def _intern(values: list) -> np.ndarray:
    """(n,) int64 id per value, equal ids for equal values."""
    ids: dict = {}
    return np.fromiter((ids.setdefault(v, len(ids)) for v in values), np.int64, len(values))


class _AttributeColumns:
    """The attributes of every node encoded as integer columns and binary set matrices, so the
    checks of `text.assess` and `text.jaccard` run per candidate pair in numpy."""

    def __init__(self, attrs: list[text.Attributes]) -> None:
        self.words, self.vocab = _set_matrix([a.words for a in attrs])
        self.n_words = np.diff(self.words.indptr)
        self.models, _ = _set_matrix([a.models for a in attrs])
        self.numbers, _ = _set_matrix([a.numbers for a in attrs])
        self.quantities, items = _set_matrix([a.quantities for a in attrs])
        self.units = sorted({unit for unit, _ in items})
        unit_col = {unit: i for i, unit in enumerate(self.units)}
        item_unit = np.zeros(max(len(items), 1), dtype=np.int64)
        for (unit, _), col in items.items():
            item_unit[col] = unit_col[unit]
        self.item_unit = item_unit
        has_unit = np.zeros((len(attrs), max(len(self.units), 1)), dtype=bool)
        for node, a in enumerate(attrs):
            for unit, _ in a.quantities:
                has_unit[node, unit_col[unit]] = True
        self.has_unit = has_unit
        self.generations = _intern([a.generations for a in attrs])
        self.variants = _intern([a.variants for a in attrs])
        self.code_sets = [(a.codes, a.joined) for a in attrs]
        self.code_ids = _intern(self.code_sets)
        self.has_codes = np.array([bool(a.codes or a.joined) for a in attrs], dtype=bool)
        self.attrs = attrs

    def jaccard(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`text.jaccard` per pair."""
        inter = _overlap(self.words, a, b)
        union = self.n_words[a] + self.n_words[b] - inter
        with np.errstate(invalid="ignore", divide="ignore"):
            out = inter / union
        return np.where(union == 0, 1.0, out)

    def compare_codes(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`text.compare_codes` per pair, computed once per distinct pair of code sets."""
        shared = np.zeros(len(a), dtype=bool)
        conflicting = np.zeros(len(a), dtype=bool)
        both = np.flatnonzero(self.has_codes[a] & self.has_codes[b])
        if not len(both):
            return shared, conflicting
        ia, ib = a[both], b[both]
        keys = self.code_ids[ia] * (int(self.code_ids.max()) + 1) + self.code_ids[ib]
        order = np.argsort(keys)
        head = np.r_[True, keys[order][1:] != keys[order][:-1]]
        first = order[head]
        inverse = np.empty(len(keys), dtype=np.int64)
        inverse[order] = np.cumsum(head) - 1

        def compare(lo: int, hi: int) -> np.ndarray:
            # In chunks, straight into a bool array: at 10^6 listings there are millions of
            # distinct code-set pairs, and a list of result tuples held GBs at the peak.
            out = np.empty((hi - lo, 2), dtype=bool)
            for start in range(lo, hi, _PAIR_CHUNK):
                part = first[start : min(start + _PAIR_CHUNK, hi)]
                results = (
                    text.compare_codes(self.attrs[x], self.attrs[y])
                    for x, y in zip(ia[part].tolist(), ib[part].tolist(), strict=True)
                )
                flat = np.fromiter(chain.from_iterable(results), dtype=bool, count=2 * len(part))
                out[start - lo : start - lo + len(part)] = flat.reshape(-1, 2)
            return out

        table = np.concatenate(_in_two_processes(compare, len(first)))
        shared[both] = table[inverse.ravel(), 0]
        conflicting[both] = table[inverse.ravel(), 1]
        return shared, conflicting

    def quantity_conflict(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(m,) int64 index into ``units`` of `text._quantity_conflict`'s unit, -1 for none."""
        out = np.full(len(a), -1, dtype=np.int64)
        if not self.units:
            return out
        for start in range(0, len(a), _PAIR_CHUNK):
            ca, cb = a[start : start + _PAIR_CHUNK], b[start : start + _PAIR_CHUNK]
            both = self.has_unit[ca] & self.has_unit[cb]
            rows = np.flatnonzero(both.any(axis=1))
            if not len(rows):
                continue
            common = self.quantities[ca[rows]].multiply(self.quantities[cb[rows]]).tocoo()
            shared = np.zeros((len(rows), len(self.units)), dtype=bool)
            shared[common.row, self.item_unit[common.col]] = True
            clash = both[rows] & ~shared
            hit = clash.any(axis=1)
            out[start + rows[hit]] = clash[hit].argmax(axis=1)
        return out

    def assess(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`text.assess` per pair: (reason code per pair, shared model code). Reason codes
        index `_REASONS`, 0 meaning none; quantity conflicts are ``len(_REASONS) + unit``."""
        shared_code, code_conflict = self.compare_codes(a, b)
        unit = self.quantity_conflict(a, b)
        generation = self.generations[a] != self.generations[b]
        models = (
            (np.diff(self.models.indptr)[a] > 0)
            & (np.diff(self.models.indptr)[b] > 0)
            & (_overlap(self.models, a, b) == 0)
        )
        numbers = (
            (np.diff(self.numbers.indptr)[a] > 0)
            & (np.diff(self.numbers.indptr)[b] > 0)
            & (_overlap(self.numbers, a, b) == 0)
        )
        variants = self.variants[a] != self.variants[b]
        strong = np.where(unit >= 0, len(_REASONS) + unit, np.where(generation, _R_GENERATION, 0))
        weak = np.select(
            [models, variants, numbers],
            [_R_MODEL_TOKEN, _R_VARIANT, _R_NUMBER],
            default=0,
        )
        reason = np.where(
            code_conflict,
            _R_MODEL_CODE,
            np.where((strong > 0) | shared_code, strong, weak),
        )
        return reason, shared_code & ~code_conflict

    def reason_names(self) -> list[str | None]:
        return [*_REASONS, *(f"{unit}_conflict" for unit in self.units)]


_PAIR_CHUNK = 1 << 20
_REASONS: tuple[str | None, ...] = (
    None,
    "low_information",
    "brand_conflict",
    "model_code_conflict",
    "generation_conflict",
    "model_token_conflict",
    "variant_conflict",
    "number_conflict",
)
_R_LOW, _R_BRAND, _R_MODEL_CODE, _R_GENERATION, _R_MODEL_TOKEN, _R_VARIANT, _R_NUMBER = range(1, 8)


def verify(
    cfg: ClusterConfig,
    candidates: pl.DataFrame,
    nodes: pl.DataFrame,
    attrs: list[text.Attributes],
    vectors: np.ndarray | None,
    features: dict[str, np.ndarray] | None = None,
) -> pl.DataFrame:
    """Score every candidate and decide it: jaccard, cosine, score, accepted, veto_reason.

    A pair is accepted when nothing vetoes it and, with the learned verifier (default, with
    embeddings), its probability (`verifier`) reaches accept_probability; that probability is
    its score for the average linkage. ``features``, when given and embeddings are used,
    receives the verifier's pair features. With the rule verifier (or without embeddings), a
    pair is accepted when the titles share a model code or are similar enough (cosine >=
    accept_cosine and Jaccard >= accept_jaccard, or Jaccard >= accept_jaccard_alone; Jaccard >=
    accept_jaccard alone when no embeddings are used), and its score is the cosine, else
    Jaccard (1.0 for a shared code).

    The checks are `text.jaccard` and `text.assess` per pair, evaluated column-wise over
    integer-encoded attributes (`_AttributeColumns`); a test checks they agree pair by pair.
    """
    a = candidates["a"].to_numpy().astype(np.int64)
    b = candidates["b"].to_numpy().astype(np.int64)
    informative = nodes[_INFO].to_numpy()
    brand_ids = _intern(nodes[S.BRAND].to_list())
    has_brand = (nodes[S.BRAND].str.len_bytes() > 0).fill_null(False).to_numpy()
    cosine = _pair_cosines(vectors, a, b) if vectors is not None else None
    columns = _AttributeColumns(attrs)
    jac = columns.jaccard(a, b)
    low = ~(informative[a] & informative[b])
    brand = ~low & has_brand[a] & has_brand[b] & (brand_ids[a] != brand_ids[b])
    rest = np.flatnonzero(~low & ~brand)
    reason = np.where(low, _R_LOW, np.where(brand, _R_BRAND, 0))
    shared = np.zeros(len(a), dtype=bool)
    reason[rest], shared[rest] = columns.assess(a[rest], b[rest])
    vetoed = reason > 0
    names = columns.reason_names()
    reasons = pl.Series(S.VETO_REASON, names, dtype=pl.String).gather(reason)
    learned = uses_learned_verifier(cfg) and cosine is not None
    if cosine is not None and (learned or features is not None):
        pairs = verifier.PairInputs(a, b, jac, shared, candidates[S.SIGNAL].to_list(), cosine)
        probability = _learned_probability(columns, pairs, {} if features is None else features)
    if learned:
        score = probability
        similar, shared = score >= cfg.accept_probability, np.zeros(len(a), dtype=bool)
    elif cosine is not None:
        similar = (cosine >= cfg.accept_cosine) & (jac >= cfg.accept_jaccard)
        similar |= jac >= cfg.accept_jaccard_alone
        shared &= cosine >= cfg.code_min_cosine
        score = np.where(shared, 1.0, cosine)
    else:
        similar = jac >= cfg.accept_jaccard
        score = np.where(shared, 1.0, jac)
    return candidates.with_columns(
        pl.Series(S.JACCARD, jac.round(4)),
        pl.Series(S.COSINE, cosine.round(4), dtype=pl.Float64)
        if cosine is not None
        else pl.lit(None, dtype=pl.Float64).alias(S.COSINE),
        pl.Series("score", score.astype(np.float64)),
        pl.Series(S.ACCEPTED, ~vetoed & (shared | similar)),
        reasons,
    )


def _pair_cosines(vectors: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m,) cosine of each (a, b) node pair, in chunks: gathering both sides at once would copy
    two (m, d) arrays (~1 GB each for PriceRunner's 0.7 M candidate pairs)."""
    out = np.empty(len(a), dtype=vectors.dtype)
    for start in range(0, len(a), _PAIR_CHUNK):
        end = start + _PAIR_CHUNK
        out[start:end] = np.einsum("ij,ij->i", vectors[a[start:end]], vectors[b[start:end]])
    return out.clip(-1, 1)


def uses_learned_verifier(cfg: ClusterConfig) -> bool:
    """The learned verifier decides when chosen and embeddings give it its cosine features."""
    return cfg.verifier == "learned" and cfg.use_embeddings


def resolved_link_threshold(cfg: ClusterConfig) -> float:
    """``cfg.link_threshold``, or its default for the verifier in use (see the knob): 0.3 for
    the learned verifier's probabilities (best on both PriceRunner category halves, Abt-Buy
    0.803 vs 0.795 at 0.4), 0.5 for the rule's cosine and Jaccard scores."""
    if cfg.link_threshold is not None:
        return cfg.link_threshold
    return 0.3 if uses_learned_verifier(cfg) else 0.5


def _learned_probability(
    columns: _AttributeColumns, pairs: verifier.PairInputs, features: dict[str, np.ndarray]
) -> np.ndarray:
    """(m,) float64 P(same product) of each pair by the shipped `verifier` model; ``features``
    is filled with the pair features."""
    features.update(verifier.pair_features(columns.attrs, columns.words, columns.vocab, pairs))
    return verifier.load_model().probability(features)


# --- clustering ----------------------------------------------------------------------------------


def agglomerate(counts: np.ndarray, scored: pl.DataFrame, link_threshold: float) -> np.ndarray:
    """(n,) int64 cluster label (smallest member node) per node, by constrained average linkage.

    Linkage of clusters A, B = sum of accepted scores over cross pairs (weighted by listings per
    node) / (|A| * |B|); a vetoed cross pair blocks the merge for good. Clusters merge in
    descending linkage, ties by node index, so the result is deterministic and independent of
    input order. The merge loop itself is `merge_loop.merge_loop` (compiled).
    """
    from pairsieve.merge_loop import merge_loop

    n = len(counts)
    relevant, component = _relevant_pairs(n, scored)
    xs = relevant["a"].to_numpy().astype(np.int64)
    ys = relevant["b"].to_numpy().astype(np.int64)
    ok = relevant[S.ACCEPTED].to_numpy()
    vetoed = relevant[S.VETO_REASON].to_numpy().astype(bool)
    weights = np.where(ok, relevant["score"].to_numpy() * counts[xs] * counts[ys], 0.0)
    lo, hi = np.minimum(xs, ys), np.maximum(xs, ys)
    keys = (lo << 32) | hi
    sorted_keys = np.sort(keys)
    if np.any(sorted_keys[1:] == sorted_keys[:-1]):
        # A repeated pair is one cell: weights summed in input order (np.add.at is unbuffered
        # and sequential: ((w1 + w2) + w3), as the cell accumulated them), vetoes OR-ed.
        unique, inverse = np.unique(keys, return_inverse=True)
        summed = np.zeros(len(unique))
        np.add.at(summed, inverse, weights)
        any_veto = np.zeros(len(unique), dtype=bool)
        np.logical_or.at(any_veto, inverse, vetoed)
        lo, hi, weights, vetoed = unique >> 32, unique & 0xFFFFFFFF, summed, any_veto
    size = counts.astype(np.float64)
    # A component of two nodes holds exactly one cell and nothing else can touch it: it merges
    # iff that cell is unvetoed and its linkage reaches the threshold, as in the loop.
    two = np.bincount(component, minlength=n)[component[lo]] == 2
    merges = two & ~vetoed & (weights / (size[lo] * size[hi]) >= link_threshold)
    parent = np.arange(n, dtype=np.int64)
    parent[hi[merges]] = lo[merges]
    rest = ~two
    ends = np.stack([lo[rest], hi[rest]], axis=1)
    merge_loop(parent, size, ends, weights[rest], vetoed[rest], float(link_threshold))
    return _resolve(parent)


def _relevant_pairs(n: int, scored: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """Accepted pairs, and vetoed pairs inside one component of the accepted graph: a rejected
    pair adds nothing to a linkage and a veto across components can never be tested, so the
    rest (most candidates) is dropped before the merge loop. Also returns the (n,)
    component label of every node in the accepted graph."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    pairs = scored.select("a", "b", "score", S.ACCEPTED, pl.col(S.VETO_REASON).is_not_null())
    accepted = pairs.filter(pl.col(S.ACCEPTED))
    graph = coo_matrix(
        (np.ones(len(accepted)), (accepted["a"].to_numpy(), accepted["b"].to_numpy())),
        shape=(n, n),
    )
    component = connected_components(graph, directed=False)[1]
    same = component[pairs["a"].to_numpy()] == component[pairs["b"].to_numpy()]
    return pairs.filter(pl.col(S.ACCEPTED) | (pl.col(S.VETO_REASON) & pl.Series(same))), component


def _resolve(parent: np.ndarray) -> np.ndarray:
    roots = parent.copy()
    while True:
        nxt = roots[roots]
        if np.array_equal(nxt, roots):
            return roots.astype(np.int64)
        roots = nxt


# --- the stage -----------------------------------------------------------------------------------


class Clustering:
    """Everything one clustering run computed, for writing and for evaluation.

    ``frame``: listings (sorted by id) with their node; ``nodes``: one row per node;
    ``scored``: every verified candidate node pair; ``node_labels``: (n_nodes,) cluster label.
    """

    def __init__(
        self,
        frame: pl.DataFrame,
        nodes: pl.DataFrame,
        scored: pl.DataFrame,
        node_labels: np.ndarray,
        details: dict,
    ) -> None:
        self.frame = frame
        self.nodes = nodes
        self.scored = scored
        self.node_labels = node_labels
        self.details = details

    def listing_labels(self) -> np.ndarray:
        """(n_listings,) int64 cluster label per listing, in ``frame`` order."""
        return self.node_labels[self.frame[_NODE].to_numpy()]

    def components(self, signal: str | None) -> np.ndarray:
        """Baseline: connected components over candidates carrying ``signal`` (None = exact only).

        Listings with the same normalised title are always connected, as every baseline that
        hashes or embeds titles puts identical texts together.
        """
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        n = len(self.nodes)
        pairs = self.scored.filter(pl.col(S.SIGNAL).str.contains(signal or "^$"))
        same_title = (
            self.frame.group_by(S.TITLE_NORM)
            .agg(pl.col(_NODE).min().alias("a"), pl.col(_NODE).alias("b"))
            .explode("b")
            .select("a", "b")
        )
        edges = pl.concat([pairs.select("a", "b"), same_title.cast(pl.Int64)])
        graph = coo_matrix(
            (np.ones(len(edges)), (edges["a"].to_numpy(), edges["b"].to_numpy())), shape=(n, n)
        )
        _, labels = connected_components(graph, directed=False)
        return labels[self.frame[_NODE].to_numpy()]


def _embed(
    cfg: PairsieveConfig, titles: list[str], encoder: Encoder | None
) -> tuple[np.ndarray, dict]:
    from pairsieve.embed import EmbeddingCache, embed_texts, load_encoder

    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    vectors, stats = embed_texts(titles, encoder, EmbeddingCache(cfg.cache_dir, encoder.model_key))
    return vectors, {"embedded": stats.encoded, "embedding_cache_hits": stats.cache_hits}


def cluster_listings(
    cfg: PairsieveConfig,
    listings: pl.DataFrame,
    encoder: Encoder | None = None,
    features: dict[str, np.ndarray] | None = None,
) -> Clustering:
    """Cluster a catalog frame (see module docstring); ``cfg.cluster.use_embeddings`` = False
    runs the MinHash path alone (no encoder needed). ``features``, when given, receives the
    learned verifier's pair features (rows of ``Clustering.scored``), for refitting it."""
    c = cfg.cluster
    timings: dict[str, float] = {}
    started = time.perf_counter()
    by_title: dict[str, text.Attributes] = {}
    frame = prepare(listings, by_title)
    nodes = node_table(frame)
    attrs = [by_title[t] for t in nodes[S.TITLE_NORM].to_list()]
    del by_title
    common = common_codes(attrs, c.max_bucket)
    attrs = [a.without_codes(common) for a in attrs]
    timings["attributes_s"] = time.perf_counter() - started
    details: dict = {}
    found: dict[str, np.ndarray] = {}
    found["code"], details["code_blocks_skipped"] = code_block_pairs(attrs, c.max_bucket)
    match_text = pl.Series([" ".join(sorted(a.words)) for a in attrs], dtype=pl.String)
    found["minhash"], details["lsh_buckets_skipped"] = minhash_pairs(c, match_text, cfg.seed)
    timings["minhash_s"] = time.perf_counter() - started - sum(timings.values())
    vectors = None
    if c.use_embeddings:
        vectors, embed_stats = _embed(cfg, nodes[S.TITLE].to_list(), encoder)
        details.update(embed_stats)
        found["embedding"] = knn_pairs(cfg, vectors)
        timings["embedding_s"] = time.perf_counter() - started - sum(timings.values())
    candidates = combine_candidates(found)
    by_signal = {k: len(v) for k, v in found.items()}
    del found  # the per-signal pair arrays (GBs at 1M listings) are in ``candidates`` now
    scored = verify(c, candidates, nodes, attrs, vectors, features)
    timings["verify_s"] = time.perf_counter() - started - sum(timings.values())
    labels = agglomerate(nodes["count"].to_numpy(), scored, resolved_link_threshold(c))
    timings["agglomerate_s"] = time.perf_counter() - started - sum(timings.values())
    details["candidates_by_signal"] = by_signal
    details["candidate_pairs"] = len(scored)
    details["accepted_pairs"] = int(scored[S.ACCEPTED].sum())
    details["vetoes"] = dict(
        sorted(scored.drop_nulls(S.VETO_REASON)[S.VETO_REASON].value_counts().iter_rows())
    )
    details["timings"] = {k: round(v, 3) for k, v in timings.items()}
    return Clustering(frame, nodes, scored, labels, details)


def products_frame(result: Clustering) -> pl.DataFrame:
    """products.parquet: listing_id, product_id, cluster_size, canonical_title, method."""
    frame = result.frame.with_columns(pl.Series("_label", result.listing_labels()))
    accepted = result.scored.filter(pl.col(S.ACCEPTED))
    same = (
        result.node_labels[accepted["a"].to_numpy()] == result.node_labels[accepted["b"].to_numpy()]
    )
    inside = accepted.filter(pl.Series(same)).sort(
        "score", "a", "b", descending=[True, False, False]
    )
    ends = [inside.select(pl.col(end).alias(_NODE), S.SIGNAL) for end in ("a", "b")]
    best_signal = (
        pl.concat(ends)
        .group_by(_NODE, maintain_order=True)
        .agg(pl.col(S.SIGNAL).first().str.split("+").list.first().alias("_edge_method"))
    )
    frame = frame.join(best_signal.cast({_NODE: pl.UInt32}), on=_NODE, how="left")
    canonical = (
        frame.group_by("_label", S.TITLE_NORM)
        .agg(pl.len().alias("_n"), pl.col(S.TITLE).sort_by(S.LISTING_ID).first())
        .sort("_n", S.TITLE_NORM, descending=[True, False])
        .group_by("_label", maintain_order=True)
        .agg(pl.col(S.TITLE).first().alias(S.CANONICAL_TITLE))
    )
    out = frame.join(canonical, on="_label", how="left").with_columns(
        pl.col(S.LISTING_ID).min().over("_label").alias("_first"),
        pl.len().over("_label").cast(pl.Int64).alias(S.CLUSTER_SIZE),
    )
    # One hash per product, not per listing.
    firsts = out["_first"].unique()
    ids = pl.DataFrame(
        {"_first": firsts, S.PRODUCT_ID: ["p" + S.stable_hash(x) for x in firsts.to_list()]},
        schema={"_first": pl.String, S.PRODUCT_ID: pl.String},
    )
    out = out.join(ids, on="_first", how="left").with_columns(
        pl.when(pl.col(S.CLUSTER_SIZE) == 1)
        .then(pl.lit("singleton"))
        .when(pl.col("_edge_method").is_not_null())
        .then(pl.col("_edge_method"))
        .otherwise(pl.lit("exact"))
        .alias(S.METHOD),
    )
    return out.select(S.LISTING_ID, S.PRODUCT_ID, S.CLUSTER_SIZE, S.CANONICAL_TITLE, S.METHOD).sort(
        S.LISTING_ID
    )


def pairs_frame(result: Clustering, consume: bool = False) -> pl.DataFrame:
    """pairs.parquet: every scored candidate (by representative listing), plus exact duplicates,
    sorted by (listing_a, listing_b). ``consume``: drop ``result.scored`` column by column
    while building (it is the other copy of tens of millions of rows at 10^6 listings)."""
    # Sorted by the listing ids' ranks (one int64 key per row) rather than by the two strings:
    # the same order, as ``frame`` is sorted by listing id and no two rows share (listing_a,
    # listing_b). Each output column is gathered once in that order, so the id strings are
    # built once (not built, concatenated and sorted).
    frame, scored = result.frame, result.scored
    rank = frame[S.LISTING_ID].rank("dense").cast(pl.Int64).to_numpy()
    frame_nodes = frame[_NODE].to_numpy().astype(np.int64)
    node_rank = np.empty(len(result.nodes), dtype=np.int64)
    nodes, first = np.unique(frame_nodes, return_index=True)  # first = smallest listing
    node_rank[nodes] = rank[first]
    a = scored["a"].to_numpy().astype(np.int64)
    b = scored["b"].to_numpy().astype(np.int64)
    exact = np.flatnonzero(rank != node_rank[frame_nodes])  # listings besides their node's rep
    keys = np.concatenate(
        [(node_rank[a] << 32) | node_rank[b], (node_rank[frame_nodes[exact]] << 32) | rank[exact]]
    )
    order = np.argsort(keys)
    del keys
    reps = result.nodes[S.LISTING_ID]
    ids = pl.concat([reps, frame[S.LISTING_ID]])  # node reps, then every listing
    columns = [
        reps.gather(np.concatenate([a, frame_nodes[exact]])[order]).alias(S.LISTING_A),
        ids.gather(np.concatenate([b, len(reps) + exact])[order]).alias(S.LISTING_B),
    ]
    del a, b
    rest = [
        (S.JACCARD, 1.0, pl.Float64),
        (S.COSINE, 1.0, pl.Float64),
        (S.SIGNAL, "exact", pl.String),
        (S.ACCEPTED, True, pl.Boolean),
        (S.VETO_REASON, None, pl.String),
    ]
    sources = {name: scored[name] for name, _, _ in rest}
    if consume:
        result.scored = scored = None
    for name, exact_value, dtype in rest:
        filler = pl.repeat(exact_value, len(exact), dtype=dtype, eager=True).alias(name)
        both = pl.concat([sources.pop(name).cast(dtype), filler], rechunk=False)
        columns.append(both.gather(order))
        del both
    return pl.DataFrame(columns)


def read_listings(path: Path, cfg: PairsieveConfig) -> pl.DataFrame:
    """A catalog (parquet, CSV or JSONL; file, glob or folder) read as text columns.

    Raises:
        PairsieveError: ``missing_file`` / ``unreadable_file`` / ``missing_column`` (see
            `io.TableReader.scan`).
    """
    reader = io.TableReader(
        S.CATALOG_REQUIRED,
        dict(cfg.ingest.catalog_columns),
        cfg.ingest.csv_encoding,
        cfg.ingest.csv_separator,
    )
    frame, files = reader.scan(path)
    return reader.collect(frame, files)


def run(
    cfg: PairsieveConfig,
    listings: pl.DataFrame | Path,
    out_dir: Path,
    encoder: Encoder | None = None,
) -> StageResult:
    """The cluster stage: write ``products.parquet`` and ``pairs.parquet`` into ``out_dir``."""
    frame = (
        read_listings(Path(listings), cfg) if not isinstance(listings, pl.DataFrame) else listings
    )
    result = cluster_listings(cfg, frame, encoder)
    products = products_frame(result)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    io.write_parquet(products, out_dir / S.PRODUCTS_FILE)
    found = result.details
    pairs = pairs_frame(result, consume=True)
    del result
    io.write_parquet(pairs, out_dir / S.PAIRS_FILE)
    del pairs
    sizes = products.group_by(S.PRODUCT_ID).len()
    details = {
        **found,
        "products": len(sizes),
        "largest_cluster": int(sizes["len"].max()) if len(sizes) else 0,
        "methods": dict(sorted(products[S.METHOD].value_counts().iter_rows())),
    }
    return StageResult(
        stage="cluster",
        rows_in=len(frame),
        rows_out=len(products),
        timings=details.pop("timings"),
        outputs={"products": S.PRODUCTS_FILE, "pairs": S.PAIRS_FILE},
        details=details,
    )
