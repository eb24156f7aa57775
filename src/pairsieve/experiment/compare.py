"""Paired bootstrap intervals for the difference between two arms, over queries and seeds.

Both arms are scored on the same held-out queries, so the difference is taken query by query
(pairing removes the spread between easy and hard queries from the interval). Seeds are
resampled too, so an interval also carries the spread from training noise: a gap that one seed
shows and another does not gets a wide interval. An arm without training (zero-shot) has one
score per query, paired with every seed of the other arm.
"""

from __future__ import annotations

import numpy as np

BOOTSTRAP_DRAWS = 2000
LEVEL = 0.95
CHUNK = 100


def paired_difference(
    arm: np.ndarray, baseline: np.ndarray, seed: int = 0, draws: int = BOOTSTRAP_DRAWS
) -> tuple[float, tuple[float, float]]:
    """Mean of `arm - baseline` and its 95% percentile interval.

    `arm` and `baseline` are (seeds, queries) float arrays of one metric, seeds in the same
    order (row s of both trained with seed s) and queries in the same order; a baseline of one
    row is paired with every row of `arm`. Each draw resamples seeds and queries with
    replacement, independently.
    """
    arm, baseline = np.atleast_2d(arm), np.atleast_2d(baseline)
    if arm.shape[1] != baseline.shape[1]:
        raise ValueError(f"arms scored on different queries: {arm.shape} vs {baseline.shape}")
    diff = arm - baseline  # broadcasts a one-row baseline over the seeds
    n_seeds, n_queries = diff.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, n_seeds, size=(draws, n_seeds))
    queries = rng.integers(0, n_queries, size=(draws, n_queries))
    means = np.concatenate(
        [  # CHUNK draws at a time: (chunk, seeds, queries) stays small for large query sets
            diff[seeds[i : i + CHUNK, :, None], queries[i : i + CHUNK, None, :]].mean(axis=(1, 2))
            for i in range(0, draws, CHUNK)
        ]
    )
    tail = (1 - LEVEL) / 2
    lo, hi = np.quantile(means, [tail, 1 - tail])
    return float(diff.mean()), (float(lo), float(hi))
