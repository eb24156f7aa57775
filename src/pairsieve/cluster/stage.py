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
5. A product id is ``"p" + hex_digest(smallest member listing_id)``: a function of the members
   only, so shuffled input yields byte-identical output.

Measured with the defaults (benchmarks/RESULTS.md, "cluster"): PriceRunner pairwise F1 0.629
(P 0.694, R 0.575), B-cubed F1 0.812 (P 0.886); Abt-Buy pairwise F1 0.803 (P 0.911). The issue's
targets (0.75 / 0.85 / 0.85) are not reached; connected components over the same candidates
score 0.000-0.058 pairwise F1.
"""

from __future__ import annotations

import logging
import time
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import lineage
from pairsieve.cluster.reuse import PreviousClustering, touching
from pairsieve.cluster.verify import INFORMATIVE, resolved_link_threshold, verify
from pairsieve.config import ClusterConfig, PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult
from pairsieve.core.hashing import hex_digest
from pairsieve.core.parallel import in_two_processes
from pairsieve.errors import PairsieveError
from pairsieve.ingest.catalog import read_catalog
from pairsieve.text import attributes as text
from pairsieve.text import match
from pairsieve.vectors import minhash

if TYPE_CHECKING:
    from pairsieve.vectors import knn
    from pairsieve.vectors.embed import Encoder

log = logging.getLogger(__name__)

_NODE = "_node"
_KEY = "_key"
SIGNAL_ORDER = ("exact", "code", "minhash", "embedding")
_SIGNATURE_PARTITION = 250_000  # titles per signature cache part


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
    frame = frame.select(S.LISTING_ID, S.TITLE, S.TITLE_NORM, text.brand_expr(frame.columns))
    frame = frame.sort(S.LISTING_ID)
    distinct = frame.select(pl.col(S.TITLE_NORM).unique())
    attributes = {} if attributes is None else attributes
    titles = [t for t in distinct[S.TITLE_NORM].to_list() if t not in attributes]
    found = in_two_processes(
        lambda lo, hi: [text.extract_attributes(t) for t in titles[lo:hi]], len(titles)
    )
    attributes.update(zip(titles, chain.from_iterable(found), strict=True))
    informative = [attributes[t].informative for t in distinct[S.TITLE_NORM].to_list()]
    distinct = distinct.with_columns(pl.Series(INFORMATIVE, informative, dtype=pl.Boolean))
    frame = frame.join(distinct, on=S.TITLE_NORM, how="left")
    # Low-information titles key on their own listing id: identical text is no evidence.
    key = (
        pl.when(pl.col(INFORMATIVE))
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
            pl.col(INFORMATIVE).first(),
            pl.len().alias("count"),
        )
        .sort(_NODE)
    )


# --- candidates ----------------------------------------------------------------------------------


def common_codes(attrs: list[text.Attributes], max_df: int) -> set[str]:
    """Codes found on more than ``max_df`` distinct titles: features, not product identifiers."""
    codes = [c for a in attrs for c in a.codes | a.joined]
    counts = pl.Series("code", codes, dtype=pl.String).value_counts()
    return set(counts.filter(pl.col("count") > max_df)["code"].to_list())


def code_block_pairs(
    attrs: list[text.Attributes], max_block: int, wanted: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Node pairs sharing a model-code blocking key (`match.code_keys`); blocks over
    ``max_block`` titles are skipped, and with ``wanted`` ((n,) bool) blocks without a wanted
    node."""
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
                own = match.code_keys(c)
                found = ids_of[c] = [key_ids.setdefault(k, len(key_ids)) for k in own]
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
    paired = (sizes >= 2) & (sizes <= max_block)
    if wanted is not None:
        paired &= np.add.reduceat(wanted[members].astype(np.int64), starts) > 0
    found = [np.empty(0, dtype=np.int64)]
    for size in np.unique(sizes[paired]).tolist():
        block = members[starts[paired & (sizes == size)][:, None] + np.arange(size)]
        first, second = np.triu_indices(size, 1)
        found.append(((block[:, first] << 32) | block[:, second]).ravel())
    codes = np.sort(np.concatenate(found))
    codes = codes[np.r_[True, codes[1:] != codes[:-1]]] if len(codes) else codes
    return np.stack([codes >> 32, codes & 0xFFFFFFFF], axis=1), int(np.sum(sizes > max_block))


def minhash_pairs(
    cfg: ClusterConfig,
    titles: pl.Series,
    seed: int,
    cache_dir: str | None = None,
    wanted: np.ndarray | None = None,
) -> tuple[np.ndarray, int, int]:
    """Node pairs colliding in at least one LSH band of their MinHash signatures (a band bucket
    holding a ``wanted`` node, when given), buckets skipped, and signatures computed: those of
    texts seen before come from the cache in ``cache_dir``."""
    from pairsieve.vectors.embed import embed_texts

    encoder = minhash.SignatureEncoder(cfg.shingle_kind, cfg.shingle_size, cfg.num_perm, seed)
    cache = minhash.SignatureCache(cache_dir, encoder.model_key) if cache_dir else None
    sig, stats = embed_texts(titles.to_list(), encoder, cache, _SIGNATURE_PARTITION)
    bands, rows = minhash.lsh_params(cfg.lsh_threshold, cfg.num_perm)
    pairs, skipped = minhash.lsh_pairs(sig, bands, rows, cfg.max_bucket, wanted)
    return pairs, skipped, stats.encoded


def knn_pairs(
    cfg: PairsieveConfig,
    vectors: np.ndarray,
    rows: np.ndarray | None = None,
    layout: knn.IvfLayout | None = None,
    keys: np.ndarray | None = None,
) -> tuple[np.ndarray, Any]:
    """Node pairs among each other's ``knn_k`` nearest neighbours with cosine >= min_cosine
    (with ``rows``, only the neighbours of those nodes are searched), and the faiss index
    searched: a previous build's ``layout`` spares its IVF training and, for the titles with
    ``keys`` it indexed, their assignment (`knn.build_index`)."""
    from pairsieve.vectors import knn

    rows = np.arange(len(vectors)) if rows is None else rows
    index = knn.build_index(vectors, cfg.knn, cfg.seed, layout, keys)
    scores, ids = knn.search(index, vectors[rows], cfg.cluster.knn_k + 1)
    source = np.repeat(rows, ids.shape[1])
    keep = (ids.ravel() >= 0) & (scores.ravel() >= cfg.cluster.min_cosine)
    pairs = np.stack([source[keep], ids.ravel()[keep]], axis=1).astype(np.int64)
    pairs = np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1)
    return minhash.unique_pairs(pairs), index


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


# --- clustering ----------------------------------------------------------------------------------


def agglomerate(counts: np.ndarray, scored: pl.DataFrame, link_threshold: float) -> np.ndarray:
    """(n,) int64 cluster label (smallest member node) per node, by constrained average linkage.

    Linkage of clusters A, B = sum of accepted scores over cross pairs (weighted by listings per
    node) / (|A| * |B|); a vetoed cross pair blocks the merge for good. Clusters merge in
    descending linkage, ties by node index, so the result is deterministic and independent of
    input order. The merge loop itself is `merge_loop.merge_loop` (compiled).
    """
    from pairsieve.cluster.linkage import merge_loop

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
    ``scored``: every verified candidate node pair; ``node_labels``: (n_nodes,) cluster label;
    ``ivf``: the kNN index's `knn.IvfLayout`, kept for the next build (None when exact).
    """

    def __init__(  # noqa: PLR0913 - one field per computed part
        self,
        frame: pl.DataFrame,
        nodes: pl.DataFrame,
        scored: pl.DataFrame,
        node_labels: np.ndarray,
        details: dict,
        ivf: knn.IvfLayout | None = None,
    ) -> None:
        self.frame = frame
        self.nodes = nodes
        self.scored = scored
        self.node_labels = node_labels
        self.details = details
        self.ivf = ivf

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
    from pairsieve.vectors.embed import embed_texts, load_encoder, shared_cache

    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    vectors, stats = embed_texts(titles, encoder, shared_cache(cfg.cache_dir, encoder.model_key))
    return vectors, {"embedded": stats.encoded, "embedding_cache_hits": stats.cache_hits}


def _embedding_candidates(
    cfg: PairsieveConfig,
    nodes: pl.DataFrame,
    encoder: Encoder | None,
    unsettled: np.ndarray | None,
    previous: knn.IvfLayout | None,
) -> tuple[np.ndarray, np.ndarray, knn.IvfLayout | None, dict]:
    """kNN pairs touching an unsettled node (all when None), the node vectors, the index's
    `knn.IvfLayout` (built on ``previous`` while its centroids fit), and what was embedded and
    trained."""
    from pairsieve.core.hashing import text_keys
    from pairsieve.vectors import knn

    titles = nodes[S.TITLE].to_list()
    vectors, details = _embed(cfg, titles, encoder)
    rows = None if unsettled is None else np.flatnonzero(unsettled)
    keys = text_keys(titles) if len(titles) > cfg.knn.exact_max else None  # IVF only
    pairs, index = knn_pairs(cfg, vectors, rows, previous, keys)
    layout = None if keys is None else knn.layout_of(index, keys)
    if layout is not None:
        details["ivf_centroids"] = knn.centroid_source(index, previous)
    return touching(pairs, unsettled), vectors, layout, details


def cluster_listings(
    cfg: PairsieveConfig,
    listings: pl.DataFrame,
    encoder: Encoder | None = None,
    features: dict[str, np.ndarray] | None = None,
    previous: PreviousClustering | None = None,
) -> Clustering:
    """Cluster a catalog frame (see module docstring); ``cfg.cluster.use_embeddings`` = False
    runs the MinHash path alone (no encoder needed). ``features``, when given, receives the
    learned verifier's pair features (rows of ``Clustering.scored``), for refitting it. With
    ``previous``, pairs between unchanged titles are reused from it and only pairs touching the
    others are generated and verified (`cluster_reuse`)."""
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
    details: dict = {"titles": len(nodes)}
    unsettled = None  # a full build generates every pair
    if previous is not None:
        settled = previous.settled(frame, nodes)
        unsettled = ~settled
        details["settled_nodes"] = int(settled.sum())
    found: dict[str, np.ndarray] = {}
    code, details["code_blocks_skipped"] = code_block_pairs(attrs, c.max_bucket, unsettled)
    found["code"] = touching(code, unsettled)
    match_text = pl.Series([" ".join(sorted(a.words)) for a in attrs], dtype=pl.String)
    lsh, details["lsh_buckets_skipped"], details["signatures_computed"] = minhash_pairs(
        c, match_text, cfg.seed, cfg.cache_dir, unsettled
    )
    found["minhash"] = touching(lsh, unsettled)
    del code, lsh
    timings["minhash_s"] = time.perf_counter() - started - sum(timings.values())
    vectors = ivf = None
    if c.use_embeddings:
        before = None if previous is None else previous.ivf
        found["embedding"], vectors, ivf, embed_details = _embedding_candidates(
            cfg, nodes, encoder, unsettled, before
        )
        details.update(embed_details)
        timings["embedding_s"] = time.perf_counter() - started - sum(timings.values())
    candidates = combine_candidates(found)
    by_signal = {k: len(v) for k, v in found.items()}
    del found  # the per-signal pair arrays (GBs at 1M listings) are in ``candidates`` now
    scored = verify(c, candidates, nodes, attrs, vectors, features)
    if previous is not None:
        reused = previous.pairs_between(nodes, ~unsettled)
        details["reused_pairs"] = len(reused)
        # In (a, b) order as a full build has them, sorted on one int64 key: ~2x faster than on
        # two columns for the 3e7 pairs of 10^6 listings (agglomerate is 2x slower unsorted).
        key = (pl.col("a").cast(pl.Int64) * (1 << 32) + pl.col("b")).alias("_key")
        scored = pl.concat([scored, reused.cast(scored.schema)]).sort(key)
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
    return Clustering(frame, nodes, scored, labels, details, ivf)


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
        {"_first": firsts, S.PRODUCT_ID: ["p" + hex_digest(x) for x in firsts.to_list()]},
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
    reps = result.nodes[S.LISTING_ID].rechunk()
    # One chunk each before gathering: a gather from a two-chunk string column took 8x longer.
    ids = pl.concat([reps, frame[S.LISTING_ID]], rechunk=True)  # node reps, then every listing
    columns = [
        reps.gather(np.concatenate([a, frame_nodes[exact]])[order]).alias(S.LISTING_A),
        ids.gather(np.concatenate([b, len(reps) + exact])[order]).alias(S.LISTING_B),
    ]
    del a, b
    rest = [
        (S.JACCARD, 1.0, pl.Float64),
        (S.COSINE, 1.0, pl.Float64),
        (S.LINK_SCORE, 1.0, pl.Float64),
        (S.SIGNAL, "exact", pl.String),
        (S.ACCEPTED, True, pl.Boolean),
        (S.VETO_REASON, None, pl.String),
    ]
    sources = {name: scored[name] for name, _, _ in rest if name != S.LINK_SCORE}
    sources[S.LINK_SCORE] = scored["score"].alias(S.LINK_SCORE)
    if consume:
        result.scored = scored = None
    for name, exact_value, dtype in rest:
        filler = pl.repeat(exact_value, len(exact), dtype=dtype, eager=True).alias(name)
        both = pl.concat([sources.pop(name).cast(dtype), filler], rechunk=True)
        columns.append(both.gather(order))
        del both
    return pl.DataFrame(columns)


def run(
    cfg: PairsieveConfig,
    listings: pl.DataFrame | Path,
    out_dir: Path,
    encoder: Encoder | None = None,
    previous: PreviousClustering | None = None,
    previous_build: Path | None = None,
) -> StageResult:
    """The cluster stage: write ``products.parquet``, ``pairs.parquet`` and
    ``id_changes.parquet`` into ``out_dir``, reusing ``previous``'s pairs between unchanged
    titles when given, and carrying product ids over from the build folder ``previous_build``
    (`lineage.record`; without one every product is first seen now)."""
    frame = (
        read_catalog(str(listings), cfg.ingest)
        if not isinstance(listings, pl.DataFrame)
        else listings
    )
    result = cluster_listings(cfg, frame, encoder, previous=previous)
    products = products_frame(result)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    io.write_parquet(products, out_dir / S.PRODUCTS_FILE)
    outputs = {"products": S.PRODUCTS_FILE, "pairs": S.PAIRS_FILE}
    if result.ivf is not None:
        outputs.update(result.ivf.write(out_dir))
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
    result = StageResult(
        stage="cluster",
        rows_in=len(frame),
        rows_out=len(products),
        timings=details.pop("timings"),
        outputs=outputs,
        details=details,
    )
    return lineage.record(result, out_dir, previous_build)
