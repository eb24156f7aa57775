"""Stable hashes: every id, cache key, sample and order that must not change between runs.

Python's ``hash`` is salted per process, so pairsieve never uses it for anything that is written
down. Everything here is blake2b (for strings) or splitmix64's mixing function (for uint64
arrays), with fixed byte order, so product ids, cache keys, shard order and synthetic data come
out the same on every machine, process and version. The values are pinned by golden tests:
changing any function here changes artifacts users already hold.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import polars as pl

_GOLDEN_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_INT63 = 0x7FFF_FFFF_FFFF_FFFF
SEPARATOR = "\x1f"  # joins the parts of a composite key (a unit separator never in a title)


def hex_digest(text: str, n_bytes: int = 8) -> str:
    """Hex blake2b of ``text``: the readable ids (products, queries) are built from it."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=n_bytes).hexdigest()


def text_key(text: str) -> int:
    """Unsigned 64-bit key of a string: the first 8 bytes of its blake2b, big-endian."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """(n,) uint64 `text_key` of each text: the embedding and signature caches' keys."""
    return np.fromiter((text_key(t) for t in texts), dtype=np.uint64, count=len(texts))


def column_keys(values: pl.Series) -> pl.Series:
    """`text_key` of every string of a column (null stays null), hashing each distinct value
    once."""
    distinct = values.drop_nulls().unique().sort()
    keys = pl.Series("_k", text_keys(distinct.to_list()), dtype=pl.UInt64)
    lookup = pl.DataFrame({"_v": distinct, "_k": keys})
    return values.to_frame("_v").join(lookup, on="_v", how="left", maintain_order="left")["_k"]


def seeded_key(seed: int, *parts: str) -> int:
    """`text_key` of the seed and parts joined: a seeded priority that does not depend on input
    order (held-out products, row order in shards)."""
    return text_key(SEPARATOR.join((str(seed), *parts)))


def seeded_keys(ids: Sequence[str], seed: int) -> np.ndarray:
    """(n,) uint64 `seeded_key` of each id: the root keys of the synthetic data's draws."""
    return text_keys([SEPARATOR.join((str(seed), i)) for i in ids])


def label_int(product_id: str) -> int:
    """The non-negative int64 a shard's ``label`` column carries for a product id."""
    return text_key(product_id) & _INT63


def avalanche64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser alone: a bijection of uint64 in which every input bit flips about
    half the output bits. For combining keys: ``avalanche64(acc ^ key)`` (wraps silently)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64)
        x = (x ^ (x >> np.uint64(30))) * _MIX_1
        x = (x ^ (x >> np.uint64(27))) * _MIX_2
        return x ^ (x >> np.uint64(31))


def splitmix64(x: np.ndarray) -> np.ndarray:
    """One splitmix64 step: the golden-gamma increment, then `avalanche64`. For counter-based
    random streams, where consecutive counters (0, 1, 2 ...) must give unrelated outputs; the
    increment keeps 0 from mapping to 0."""
    with np.errstate(over="ignore"):
        return avalanche64(np.asarray(x, dtype=np.uint64) + _GOLDEN_GAMMA)
