"""MinHash signatures bit-identical to `datasketch.MinHash`, computed vectorised, and LSH banding.

`datasketch.MinHash.update` hashes one shingle at a time in Python. Here every distinct shingle
of the whole corpus is hashed once (sha1, first 4 bytes little-endian, as datasketch's
`sha1_hash32`), pre-mixed with the MurmurHash3 finalizer and permuted with datasketch's own
affine32 parameters ``a * h + b mod 2**32`` for all permutations at once in numpy, then reduced
to per-document minima. For the same ``seed`` and ``num_perm`` the signatures equal
``datasketch.MinHash(num_perm, seed).update(...)`` value for value (a test checks it).

Banding is a group-by on (band, band hash) over the signature matrix instead of datasketch's
dict-of-lists `MinHashLSH`, so it runs on columnar partitions (docs/scaling.md).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

import numpy as np
import polars as pl
from datasketch import MinHash

from pairsieve.vectors.embedding_cache import EmbeddingCache

log = logging.getLogger(__name__)

_MAX32 = np.uint32(0xFFFFFFFF)
_ROWS_PER_CHUNK = 1 << 19  # shingle rows per permutation block: bounds memory to ~256 MB


def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's permutation parameters (a, b), each (num_perm,) uint32, taken from it."""
    a, b = MinHash(num_perm=num_perm, seed=seed).permutations
    return np.asarray(a, dtype=np.uint32), np.asarray(b, dtype=np.uint32)


def _fmix32(hv: np.ndarray) -> np.ndarray:
    """MurmurHash3 32-bit finalizer (datasketch applies it before the affine permutation)."""
    hv = hv ^ (hv >> np.uint32(16))
    hv = hv * np.uint32(0x85EBCA6B)
    hv = hv ^ (hv >> np.uint32(13))
    hv = hv * np.uint32(0xC2B2AE35)
    return hv ^ (hv >> np.uint32(16))


def sha1_hash32(values: Sequence[str]) -> np.ndarray:
    """(n,) uint32: datasketch's default ``sha1_hash32`` of each UTF-8 string."""
    return np.fromiter(
        (int.from_bytes(hashlib.sha1(v.encode("utf-8")).digest()[:4], "little") for v in values),
        dtype=np.uint32,
        count=len(values),
    )


def shingle_expr(title_norm: pl.Expr, kind: str, size: int) -> pl.Expr:
    """Shingles of a normalised title as a list column: word n-grams or character n-grams."""
    if kind == "word":
        words = title_norm.str.split(" ")
        if size == 1:
            return words.list.unique()
        return (
            words.list.eval(
                pl.concat_str([pl.element().shift(-k) for k in range(size)], separator=" ")
            )
            .list.drop_nulls()
            .list.unique()
        )
    padded = title_norm
    return padded.map_elements(
        lambda t: list({t[i : i + size] for i in range(max(1, len(t) - size + 1))}),
        return_dtype=pl.List(pl.String),
    )


def signatures(shingles: pl.Series, num_perm: int, seed: int) -> np.ndarray:
    """(n, num_perm) uint32 MinHash signatures of n shingle lists (a list[str] Series).

    A document without shingles gets the all-max signature, as an empty datasketch MinHash.
    """
    frame = pl.DataFrame({"doc": np.arange(len(shingles), dtype=np.int64), "s": shingles})
    flat = frame.explode("s").drop_nulls("s")
    distinct = flat.select(pl.col("s").unique(maintain_order=False)).to_series()
    mixed = _fmix32(sha1_hash32(distinct.to_list()))  # (u,) uint32
    lookup = pl.DataFrame({"s": distinct, "h": mixed})
    flat = flat.join(lookup, on="s", how="left").sort("doc")
    docs = flat["doc"].to_numpy()
    hashes = flat["h"].to_numpy().astype(np.uint32)
    a, b = permutations(num_perm, seed)
    out = np.full((len(shingles), num_perm), _MAX32, dtype=np.uint32)
    for start in range(0, len(docs), _ROWS_PER_CHUNK):
        chunk_docs = docs[start : start + _ROWS_PER_CHUNK]
        chunk = hashes[start : start + _ROWS_PER_CHUNK, None]
        permuted = chunk * a[None, :] + b[None, :]  # (m, num_perm) uint32, wraps mod 2**32
        bounds = np.flatnonzero(np.r_[True, chunk_docs[1:] != chunk_docs[:-1]])
        heads = chunk_docs[bounds]  # a document cut by the chunk edge is combined by minimum
        out[heads] = np.minimum(out[heads], np.minimum.reduceat(permuted, bounds, axis=0))
    return out


class SignatureEncoder:
    """MinHash signatures behind the `embed.Encoder` interface, so `embed.embed_texts` caches
    them like vectors: per text, keyed by the shingling, permutations and seed."""

    def __init__(self, shingle_kind: str, shingle_size: int, num_perm: int, seed: int) -> None:
        self.shingling = (shingle_kind, shingle_size)
        self.num_perm, self.seed = num_perm, seed
        self.model_key = f"minhash-v1-{shingle_kind}{shingle_size}-p{num_perm}-s{seed}"

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n, num_perm) uint32 signatures of the texts' shingles."""
        shingles = pl.select(
            shingle_expr(pl.lit(pl.Series(texts, dtype=pl.String)), *self.shingling)
        )
        return signatures(shingles.to_series(), self.num_perm, self.seed)


class SignatureCache(EmbeddingCache):
    """Signatures on disk, stored like embeddings (immutable parts, safe to share)."""

    dtype = np.uint32


def _area(threshold_lo: float, threshold_hi: float, b: int, r: int, above: bool) -> float:
    grid = np.linspace(threshold_lo, threshold_hi, 201)
    caught = 1.0 - (1.0 - grid**r) ** b
    return float(np.trapezoid(1.0 - caught if above else caught, grid))


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """Bands b and rows r (b * r <= num_perm) for a Jaccard threshold, as datasketch derives them.

    A pair of Jaccard s collides in at least one band with probability 1 - (1 - s^r)^b, an S-curve
    whose steep part sits near (1/b)^(1/r) (Mining of Massive Datasets, ch. 3.4). Like
    `datasketch.MinHashLSH` with weights (0.5, 0.5), pick the (b, r) minimising the area of false
    positives (collision probability below the threshold) plus false negatives (missed collisions
    above it).
    """
    best, best_error = (1, 1), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            error = 0.5 * _area(0.0, threshold, b, r, False) + 0.5 * _area(
                threshold, 1.0, b, r, True
            )
            if error < best_error:
                best, best_error = (b, r), error
    return best


def band_keys(sig: np.ndarray) -> np.ndarray:
    """(n,) uint64 key of each row of a (n, r) uint32 band (64-bit mix; collisions ~ n^2 / 2^64)."""
    key = np.full(len(sig), np.uint64(0xCBF29CE484222325), dtype=np.uint64)
    for col in sig.T.astype(np.uint64):
        key = (key ^ col) * np.uint64(0x100000001B3)
        key ^= key >> np.uint64(29)
    return key


def pairs_within_groups(
    keys: np.ndarray, max_group: int, wanted: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """All (i, j), i < j, of rows sharing a key, skipping groups larger than ``max_group``; with
    ``wanted`` ((n,) bool), only groups holding a wanted row (a day-2 build's changed titles).

    Returns ((m, 2) int64 pairs, number of skipped oversized groups). A group of s rows yields
    s(s-1)/2 pairs, so a cap keeps one common key (a band of near-empty titles, a word shared by
    thousands) from exploding the candidate set.
    """
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    sizes = np.diff(np.r_[starts, len(keys)])
    keep = (sizes >= 2) & (sizes <= max_group)
    if wanted is not None and len(keys):
        keep &= np.add.reduceat(wanted[order].astype(np.int64), starts) > 0
    skipped = int(np.sum(sizes > max_group))
    group_of = np.repeat(np.arange(len(starts)), sizes)
    members = np.repeat(keep, sizes)
    rows, groups = order[members], group_of[members]
    found = []
    for offset in range(1, min(max_group, len(rows))):
        same = groups[offset:] == groups[:-offset]
        if not same.any():
            break
        found.append(np.stack([rows[:-offset][same], rows[offset:][same]], axis=1))
    if not found:
        return np.empty((0, 2), dtype=np.int64), skipped
    pairs = np.concatenate(found).astype(np.int64)
    pairs.sort(axis=1)
    return pairs, skipped


def lsh_pairs(
    sig: np.ndarray, bands: int, rows: int, max_bucket: int, wanted: np.ndarray | None = None
) -> tuple[np.ndarray, int]:
    """Candidate pairs ((m, 2) int64, i < j, unique) sharing at least one band bucket (one
    holding a ``wanted`` row, when given)."""
    found, skipped = [], 0
    for band in range(bands):
        keys = band_keys(sig[:, band * rows : (band + 1) * rows])
        pairs, n_skipped = pairs_within_groups(keys, max_bucket, wanted)
        found.append(pairs)
        skipped += n_skipped
    return unique_pairs(np.concatenate(found) if found else np.empty((0, 2), np.int64)), skipped


def pair_codes(pairs: np.ndarray) -> np.ndarray:
    """(m,) int64 ``i << 32 | j`` of (m, 2) pairs (indices < 2**31): one sortable key a pair,
    in half the memory of the pair."""
    return (pairs[:, 0].astype(np.int64) << 32) | pairs[:, 1]


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """Distinct rows of an (m, 2) int64 array of i < j pairs, sorted."""
    return distinct_pairs(pair_codes(pairs))


def distinct_codes(codes: np.ndarray) -> np.ndarray:
    """The distinct `pair_codes` of ``codes``, sorted; ``codes`` is sorted in place."""
    # Sort and drop repeats: np.unique's hash path is ~40x slower on millions of int64.
    codes.sort()
    return codes[np.r_[True, codes[1:] != codes[:-1]]] if len(codes) else codes


def distinct_pairs(codes: np.ndarray) -> np.ndarray:
    """The distinct pairs of `pair_codes` as an (m, 2) int64 array, sorted; ``codes`` is sorted
    in place."""
    codes = distinct_codes(codes)
    return np.stack([codes >> 32, codes & 0xFFFFFFFF], axis=1)
