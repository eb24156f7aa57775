"""Rows for shard placement at any scale, without a build: Zipf-like product popularity (weight
~ 1/rank^0.8), five negatives drawn the same way, two rows per query on average.
"""

from __future__ import annotations

import numpy as np


def synthetic_rows(n: int, n_products: int, seed: int = 0):
    """(positive, negatives, groups, keys) of ``n`` rows over ``n_products`` products: each row's
    product, its five negatives' products, its query group and its hash key."""
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, n_products + 1) ** 0.8
    weights /= weights.sum()
    positive = rng.choice(n_products, n, p=weights).astype(np.int64)
    negatives = rng.choice(n_products, (n, 5), p=weights).astype(np.int64)
    groups = rng.integers(0, n // 2, n)
    keys = rng.integers(0, 2**63, n).astype(np.uint64)
    return positive, negatives, groups, keys
