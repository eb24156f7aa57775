"""Random judged-pair graphs for the linkage tests."""

from __future__ import annotations

import numpy as np
import polars as pl

from pairsieve import schemas as S


def random_graph(seed: int) -> tuple[np.ndarray, pl.DataFrame]:
    """Listings per node and judged pairs of a random graph: tied scores, listing counts,
    vetoes, repeated and reversed pairs (distinct pairs for odd seeds, as `judge` produces
    them), two-node components."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    m = int(rng.integers(1, 4 * n))
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = a != b
    a, b = a[keep], b[keep]
    if seed % 2:  # distinct pairs, as `judge` produces them
        key = np.unique(np.minimum(a, b) * n + np.maximum(a, b))
        a, b = key // n, key % n
    veto = rng.random(len(a)) < 0.15
    accepted = ~veto & (rng.random(len(a)) < 0.7)
    scored = pl.DataFrame(
        {
            "a": a.astype(np.int64),
            "b": b.astype(np.int64),
            "score": rng.choice([0.5, 2 / 3, 0.75, 0.8, 0.9, 1.0], len(a)),
            S.ACCEPTED: accepted,
            S.VETO_REASON: pl.Series(
                [("bytes_conflict" if v else None) for v in veto], dtype=pl.String
            ),
        }
    )
    counts = rng.integers(1, 4, n).astype(np.uint32)
    return counts, scored
