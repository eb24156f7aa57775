"""Candidate pairs of title nodes, from four signals: exact title, a shared model code, MinHash
LSH over the titles' words, and kNN over their sentence embeddings; a caller may add pairs it
wants judged (``requested``).

Each signal only proposes pairs; the judge (`cluster.judge`) decides them. With a previous
build (`cluster.reuse`), only pairs touching a node whose title changed are generated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import lsh
from pairsieve.cluster.neighbours import knn_pairs
from pairsieve.cluster.reuse import touching
from pairsieve.config import PairsieveConfig
from pairsieve.core.partitions import Mapper
from pairsieve.errors import PairsieveError
from pairsieve.text import attributes as text
from pairsieve.text import match
from pairsieve.vectors import minhash
from pairsieve.vectors.minhash import pair_codes

if TYPE_CHECKING:
    from pairsieve.vectors import knn
    from pairsieve.vectors.embed import Encoder
SIGNAL_ORDER = ("exact", "code", "minhash", "embedding", "requested")
# Every signal a pair can carry (the signals that proposed it, joined in `SIGNAL_ORDER`) as an
# enum: four bytes a pair against sixteen as a string, at 3e7 candidate pairs for 10^6 listings.
SIGNAL_TYPE = pl.Enum(
    [
        "+".join(name for bit, name in enumerate(SIGNAL_ORDER) if mask & (1 << bit))
        for mask in range(1, 1 << len(SIGNAL_ORDER))
    ]
)
NODE = "_node"  # a listing's node column in the clustering's listings frame


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
    return minhash.distinct_pairs(np.concatenate(found)), int(np.sum(sizes > max_block))


def minhash_pairs(
    cfg: PairsieveConfig,
    titles: pl.Series,
    mapper: Mapper,
    wanted: np.ndarray | None = None,
) -> tuple[np.ndarray, int, int]:
    """Node pairs colliding in at least one LSH band of their MinHash signatures (a band bucket
    holding a ``wanted`` node, when given), buckets skipped, and signatures computed: those of
    texts seen before come from the cache in ``cfg.cache_dir``. With a cache, the signatures
    and the banding are maps on ``mapper``'s runner (`cluster.lsh`), which read the signatures
    from the cache; without one they are computed and banded here."""
    from pairsieve.vectors.embed import embed_texts

    if cfg.cache_dir:
        return lsh.minhash_pairs_mapped(cfg, titles, wanted, mapper)
    c, encoder = cfg.cluster, lsh.signature_encoder(cfg)
    step = lsh.SIGNATURES_STEP
    sig, stats = embed_texts(titles.to_list(), encoder, None, lsh.SIGNATURE_PARTITION, step)
    bands, rows = minhash.lsh_params(c.lsh_threshold, c.num_perm)
    pairs, skipped = minhash.lsh_pairs(sig, bands, rows, c.max_bucket, wanted)
    return pairs, skipped, stats.encoded


_SEARCH_CHUNK = 1 << 22  # a signal's codes looked up at a time: a bounded index array


def combine_candidates(found: dict[str, np.ndarray]) -> pl.DataFrame:
    """One row per distinct node pair (a < b) with the signals that proposed it ("code+minhash"),
    sorted by (a, b), from each signal's `pair_codes`; signals are named in `SIGNAL_ORDER`.

    The distinct pairs come from one sort of every signal's codes; a pair's signals are then
    found by binary search in each signal's codes, so nothing the size of all proposals is
    held twice (3e7 pairs at 10^6 listings).
    """
    parts = [(name, codes) for name, codes in found.items() if len(codes)]
    if not parts:
        return pl.DataFrame(schema={"a": pl.Int64, "b": pl.Int64, S.SIGNAL: SIGNAL_TYPE})
    codes = minhash.distinct_codes(np.concatenate([c for _, c in parts]))
    mask = np.zeros(len(codes), dtype=np.uint8)
    for name, signal_codes in parts:
        for lo in range(0, len(signal_codes), _SEARCH_CHUNK):
            at = np.searchsorted(codes, signal_codes[lo : lo + _SEARCH_CHUNK])
            mask[at] |= 1 << SIGNAL_ORDER.index(name)
    # SIGNAL_TYPE lists the signal sets in mask order: the set of mask m is category m - 1.
    signals = pl.Series(SIGNAL_TYPE.categories).cast(SIGNAL_TYPE)
    b = codes & 0xFFFFFFFF
    codes >>= 32  # the codes become the first ends, in place
    return pl.DataFrame(
        {"a": codes, "b": b, S.SIGNAL: signals.gather(pl.Series(mask, dtype=pl.UInt8) - 1)}
    )


def _embed(
    cfg: PairsieveConfig, titles: list[str], encoder: Encoder | None
) -> tuple[np.ndarray, dict]:
    from pairsieve.vectors.embed import embed_texts, load_encoder, shared_cache

    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    vectors, stats = embed_texts(titles, encoder, shared_cache(cfg.cache_dir, encoder.model_key))
    return vectors, {"embedded": stats.encoded, "embedding_cache_hits": stats.cache_hits}


@dataclass(frozen=True)
class FromPrevious:
    """What a previous build spares the search for candidates: which nodes still need their
    pairs generated (``unsettled``; None: every node, as in a full build) and its kNN index's
    IVF layout, whose training is spared while its centroids fit."""

    unsettled: np.ndarray | None = None
    ivf: knn.IvfLayout | None = None


def embedding_candidates(
    cfg: PairsieveConfig,
    nodes: pl.DataFrame,
    encoder: Encoder | None,
    spared: FromPrevious,
    mapper: Mapper,
) -> tuple[np.ndarray, np.ndarray, knn.IvfLayout | None, dict]:
    """kNN pairs touching an unsettled node, the node vectors, the index's `knn.IvfLayout`
    (built on the previous one while its centroids fit), and what was embedded and trained;
    the search is mapped with ``mapper`` (`cluster.neighbours`)."""
    from pairsieve.core.hashing import text_keys
    from pairsieve.vectors import knn

    unsettled, previous = spared.unsettled, spared.ivf
    titles = nodes[S.TITLE].to_list()
    vectors, details = _embed(cfg, titles, encoder)
    rows = None if unsettled is None else np.flatnonzero(unsettled)
    keys = text_keys(titles) if len(titles) > cfg.cluster.knn_exact_max else None  # IVF only
    pairs, index = knn_pairs(cfg, vectors, mapper, rows, previous, keys)
    layout = None if keys is None else index.layout(keys)
    if layout is not None:
        details["ivf_centroids"] = knn.centroid_source(index.centroids, previous)
    return touching(pairs, unsettled), vectors, layout, details


@dataclass
class Candidates:
    """The candidate pairs of a catalog's nodes and what finding them produced."""

    pairs: pl.DataFrame  # a, b, signal (`combine_candidates`)
    by_signal: dict[str, int]  # pairs each signal proposed
    vectors: np.ndarray | None  # node embeddings (None on the MinHash path)
    ivf: knn.IvfLayout | None  # the kNN index's IVF layout, if it had one
    details: dict[str, Any]
    timings: dict[str, float]


def with_requested(pairs: pl.DataFrame, requested: np.ndarray) -> pl.DataFrame:
    """``pairs`` plus the (m, 2) node pairs a caller asked to have judged (an audit's positive
    and negative), named by the signal ``requested``, one row per pair, sorted by (a, b)."""
    low, high = requested.min(axis=1), requested.max(axis=1)
    keep = low != high
    asked = pl.DataFrame(
        {"a": low[keep].astype(np.int64), "b": high[keep].astype(np.int64), "_asked": True}
    ).unique(["a", "b"])
    both = pairs.join(asked, on=["a", "b"], how="full", coalesce=True)
    found = pl.col(S.SIGNAL).cast(pl.String)
    signal = (
        pl.when(pl.col("_asked").is_null())
        .then(found)
        .when(found.is_null())
        .then(pl.lit("requested"))
        .otherwise(found + "+requested")
    )
    both = both.with_columns(signal.cast(SIGNAL_TYPE).alias(S.SIGNAL))
    return both.drop("_asked").sort("a", "b")


def listing_nodes(frame: pl.DataFrame) -> pl.DataFrame:
    """(listing_id as a string, its node as int64) of the clustering's listings ``frame``."""
    return frame.select(pl.col(S.LISTING_ID).cast(pl.String), pl.col(NODE).cast(pl.Int64))


def node_pairs(frame: pl.DataFrame, pairs: pl.DataFrame) -> np.ndarray:
    """(m, 2) node indexes of listing pairs (``listing_a``, ``listing_b``) of ``frame``.

    Raises:
        PairsieveError: ``unknown_listing`` when a pair names a listing ``frame`` lacks.
    """
    node_of = listing_nodes(frame)
    ends = []
    for column in (S.LISTING_A, S.LISTING_B):
        found = pairs.select(pl.col(column).cast(pl.String).alias(S.LISTING_ID)).join(
            node_of, on=S.LISTING_ID, how="left", maintain_order="left"
        )
        missing = found.filter(pl.col(NODE).is_null())
        if missing.height:
            raise PairsieveError(
                "unknown_listing",
                f"a requested pair names listing {missing[S.LISTING_ID][0]!r}, not in the listings",
                column=column,
            )
        ends.append(found[NODE].to_numpy())
    return np.column_stack(ends) if ends[0].size else np.zeros((0, 2), dtype=np.int64)


def generate(
    cfg: PairsieveConfig,
    nodes: pl.DataFrame,
    attrs: list[text.Attributes],
    encoder: Encoder | None,
    spared: FromPrevious,
    mapper: Mapper,
) -> Candidates:
    """Every signal's pairs touching a node ``spared`` leaves unsettled, combined; ``mapper``
    maps the signatures the cache lacks and the kNN search (`cluster.neighbours`)."""
    c = cfg.cluster
    unsettled = spared.unsettled
    started = time.perf_counter()
    details: dict[str, Any] = {}
    found: dict[str, np.ndarray] = {}
    code, details["code_blocks_skipped"] = code_block_pairs(attrs, c.max_bucket, unsettled)
    found["code"] = pair_codes(touching(code, unsettled))
    match_text = pl.Series([" ".join(sorted(a.words)) for a in attrs], dtype=pl.String)
    lsh, details["lsh_buckets_skipped"], details["signatures_computed"] = minhash_pairs(
        cfg, match_text, mapper, unsettled
    )
    found["minhash"] = pair_codes(touching(lsh, unsettled))
    del code, lsh
    timings = {"minhash_s": time.perf_counter() - started}
    vectors = ivf = None
    if c.use_embeddings:
        embedded, vectors, ivf, embed_details = embedding_candidates(
            cfg, nodes, encoder, spared, mapper
        )
        found["embedding"] = pair_codes(embedded)
        del embedded
        details.update(embed_details)
        timings["embedding_s"] = time.perf_counter() - started - timings["minhash_s"]
    by_signal = {k: len(v) for k, v in found.items()}
    pairs = combine_candidates(found)
    return Candidates(pairs, by_signal, vectors, ivf, details, timings)
