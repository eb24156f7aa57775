"""Which pairs to ask a person about: a sample stratified by ``p_same``.

A few hundred answers teach most where the model is unsure, so the sample is stratified by the
pair's ``p_same`` and each stratum gets labels in proportion to its pairs times the spread of its
answers (Neyman allocation, with the model's own p as the guess of that spread): a stratum of
sure "different" pairs, the bulk of any catalog, gets few labels, the uncertain middle many.
A build's sample is also split by what pairsieve did with the pair (`build_groups`), so that the
precision of its merges, a few percent of the pairs, is measured too, and the pairs a veto held
apart, which decide whether that veto holds on this catalog, are asked about.
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
# A build's pairs fall in three groups (`build_groups`): kept apart, merged, and held apart by a
# veto although the pair model would accept them. The last are few, and they decide which vetoes
# labels lift (`labels.adapt`): with a quarter of the labels, adapting to 300 simulated labels
# gained Alaska's cameras 0.199 pairwise F1 on average, against 0.103 with none set aside.
BUILD_SHARES = (0.35, 0.4, 0.25)
# p_same edges of the strata: finer near both ends, where most pairs sit.
EDGES = (0.0, 0.02, 0.1, 0.3, 0.5, 0.7, 0.9, 0.98, 1.0)
_MIN_SPREAD = 0.1  # a stratum whose p all sit at 0 or 1 still gets some labels
_MIN_PER_STRATUM = 2  # two labels give a variance


def strata(p: np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """(m,) int64 stratum of each ``p_same`` (index into the `EDGES` intervals), and with
    ``group`` (0, 1, ...: e.g. kept apart, merged) one set of strata per group."""
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


def _by_group(
    sizes: np.ndarray, spread: np.ndarray, n: int, shares: tuple[float, ...]
) -> np.ndarray:
    """`allocate` within each group of strata, ``shares`` of the labels to each; what a group
    cannot use goes to the others, first to first."""
    k = len(EDGES) - 1
    room = [int(sizes[g * k : (g + 1) * k].sum()) for g in range(len(shares))]
    want = [min(int(n * share), space) for share, space in zip(shares, room, strict=True)]
    for g, space in enumerate(room):
        want[g] += min(space - want[g], n - sum(want))
    return np.concatenate(
        [
            allocate(sizes[g * k : (g + 1) * k], spread[g * k : (g + 1) * k], want[g])
            for g in range(len(shares))
        ]
    )


def draw(
    pairs: pl.DataFrame,
    n: int,
    seed: int,
    by: str | None = None,
    shares: tuple[float, ...] = (0.5, 0.5),
) -> pl.DataFrame:
    """A stratified sample of ``n`` rows of ``pairs`` (columns ``pair_id`` and ``p_same`` at
    least), with ``stratum`` and ``weight`` added, sorted by stratum then draw order. ``by``
    names an integer column (0, 1, ...) that splits every stratum into groups, and ``shares``
    says what part of the labels each group gets: the merged pairs of a build, few but what
    precision is about, get labels of their own."""
    p = pairs["p_same"].to_numpy().astype(np.float64)
    which = strata(p, None if by is None else pairs[by].to_numpy())
    k = (len(EDGES) - 1) * (1 if by is None else len(shares))
    sizes = np.bincount(which, minlength=k)
    with np.errstate(invalid="ignore"):
        mean = np.bincount(which, weights=p, minlength=k) / np.maximum(sizes, 1)
    spread = np.sqrt(mean * (1 - mean))
    taken = allocate(sizes, spread, n) if by is None else _by_group(sizes, spread, n, shares)
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


def build_groups(merged: np.ndarray, vetoed: np.ndarray, score: np.ndarray, accept: float):
    """(m,) int64 group of a build's pairs: 1 merged, 2 vetoed but scoring at least the pair
    model's ``accept`` probability, 0 the rest."""
    held_apart = vetoed & (score >= accept)
    return np.where(merged, 1, np.where(held_apart, 2, 0)).astype(np.int64)


def stratum_sizes(p: np.ndarray, group: np.ndarray | None = None) -> np.ndarray:
    """(strata,) pairs per stratum of a population's ``p_same`` (and ``group``)."""
    return np.bincount(strata(p, group), minlength=2 * (len(EDGES) - 1))
