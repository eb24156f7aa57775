"""Which pairs to ask a person about: a sample stratified by ``p_same``.

A few hundred answers teach most where the model is unsure, so the sample is stratified by the
pair's ``p_same`` and each stratum gets labels in proportion to its pairs times the spread of its
answers (Neyman allocation, with the model's own p as the guess of that spread): a stratum of
sure "different" pairs, the bulk of any catalog, gets few labels, the uncertain middle many.
A build's sample is also split by whether pairsieve merged the pair, half the labels to the
merged side, so that the precision of the merges, a few percent of the pairs, is measured too.
Every label carries its weight (the inverse of its inclusion probability), so estimates over all
pairs stay unbiased (`pairsieve.labels.estimate`).

The draw is deterministic and does not depend on row order: within a stratum, pairs are taken
by a seeded hash of their ``pair_id``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pairsieve.core.hashing import seeded_keys

PAIR_ID = "pair_id"
STRATUM = "stratum"
WEIGHT = "weight"
# p_same edges of the strata: finer near both ends, where most pairs sit.
EDGES = (0.0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98, 1.0)
_MIN_SPREAD = 0.1  # a stratum whose p all sit at 0 or 1 still gets some labels
_MIN_PER_STRATUM = 2  # two labels give a variance


def strata(p: np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """(m,) int64 stratum of each ``p_same`` (index into the `EDGES` intervals), and with
    ``group`` (0/1: merged by pairsieve or not) one set of strata per group."""
    inner = np.asarray(EDGES[1:-1])
    which = np.searchsorted(inner, np.asarray(p, dtype=np.float64), side="right").astype(np.int64)
    return which if group is None else which + (len(EDGES) - 1) * np.asarray(group, np.int64)


def allocate(sizes: np.ndarray, spread: np.ndarray, n: int) -> np.ndarray:
    """Labels per stratum: ``n`` split in proportion to size x spread (largest remainders),
    at least `_MIN_PER_STRATUM` where a stratum has that many pairs (when ``n`` allows), never
    more than it has."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if n >= sizes.sum():
        return sizes.copy()
    out = np.minimum(sizes, _MIN_PER_STRATUM)
    if out.sum() > n:  # too few labels for the minimum: all by size and spread
        out = np.zeros_like(sizes)
    left = n - int(out.sum())
    while left > 0:
        room = sizes - out
        share = np.where(room > 0, sizes * np.maximum(spread, _MIN_SPREAD), 0.0)
        if share.sum() == 0:
            break
        want = left * share / share.sum()
        take = np.minimum(np.floor(want).astype(np.int64), room)
        if take.sum() == 0:  # fewer labels left than strata with room: largest remainders
            order = np.argsort(-(want - np.floor(want)), kind="stable")
            take = np.zeros_like(out)
            take[order[:left][room[order[:left]] > 0]] = 1
        out += take
        left = n - int(out.sum())
    return out


def _halves(sizes: np.ndarray, spread: np.ndarray, n: int) -> np.ndarray:
    """`allocate` within each group, half the labels to each (what one group cannot use goes
    to the other)."""
    k = len(sizes) // 2
    merged = min(n // 2, int(sizes[k:].sum()))
    rest = min(n - merged, int(sizes[:k].sum()))
    merged = min(n - rest, int(sizes[k:].sum()))
    return np.concatenate(
        [allocate(sizes[:k], spread[:k], rest), allocate(sizes[k:], spread[k:], merged)]
    )


def draw(pairs: pl.DataFrame, n: int, seed: int, by: str | None = None) -> pl.DataFrame:
    """A stratified sample of ``n`` rows of ``pairs`` (columns ``pair_id`` and ``p_same`` at
    least), with ``stratum`` and ``weight`` added, sorted by stratum then draw order. ``by``
    names a 0/1 column that splits every stratum in two (whether pairsieve merged the pair), and
    half the labels go to each side: the merged pairs, few but what precision is about, get
    labels of their own."""
    p = pairs["p_same"].to_numpy().astype(np.float64)
    which = strata(p, None if by is None else pairs[by].to_numpy())
    k = 2 * (len(EDGES) - 1)
    sizes = np.bincount(which, minlength=k)
    with np.errstate(invalid="ignore"):
        mean = np.bincount(which, weights=p, minlength=k) / np.maximum(sizes, 1)
    spread = np.sqrt(mean * (1 - mean))
    taken = allocate(sizes, spread, n) if by is None else _halves(sizes, spread, n)
    table = pl.DataFrame(
        {STRATUM: np.arange(k), "_take": taken, WEIGHT: sizes / np.maximum(taken, 1)}
    )
    return (
        pairs.with_columns(
            pl.Series(STRATUM, which),
            pl.Series("_key", seeded_keys(pairs[PAIR_ID].to_list(), seed)),
        )
        .sort(STRATUM, "_key", PAIR_ID)
        .with_columns(pl.int_range(pl.len()).over(STRATUM).alias("_rank"))
        .join(table, on=STRATUM, how="left", maintain_order="left")
        .filter(pl.col("_rank") < pl.col("_take"))
        .drop("_key", "_rank", "_take")
    )


def stratum_sizes(p: np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """(strata,) pairs per stratum of a population's ``p_same`` (and ``group``)."""
    return np.bincount(strata(p, group), minlength=2 * (len(EDGES) - 1))
