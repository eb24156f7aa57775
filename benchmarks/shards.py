"""Shards stage at scale: product-disjoint planning time and placement, and the whole stage.

    .venv/bin/python benchmarks/shards.py --rows 1000000 --products 250000

Synthetic Zipf-like rows (`harness.shard_rows`: product weight ~ 1/rank^0.8, 5 negatives drawn the
same way, two rows per query on average). Baseline, in the same process: the same greedy fed in
round-robin order (every product's first row, then every second row ...), which front-loads the
diverse rows and leaves head products to the end. Then the full `shards.run` (polars joins, hashing,
planning, parquet writes) on generated tables of the same size.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import polars as pl
from harness.shard_rows import synthetic_rows

from pairsieve import schemas as S
from pairsieve.config import build_config
from pairsieve.shards import batching
from pairsieve.shards import stage as shards


def round_robin_plan(positive, negatives, groups, keys, batch_size):
    """Baseline: the same greedy, streaming rows round-robin over products."""
    original = batching.spread_order
    n = len(positive)
    batching.spread_order = lambda p, k: np.lexsort(
        (np.arange(n), k, batching._occurrence(p, k))
    ).astype(np.int64)
    try:
        return batching.plan_product_disjoint(positive, negatives, groups, keys, batch_size)
    finally:
        batching.spread_order = original


def timed(fn, *args):
    started = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - started


def stage_tables(positive, negatives, groups):
    n = len(positive)
    listing = [f"L{p}" for p in range(int(max(positive.max(), negatives.max())) + 1)]
    queries = [f"query {g}" for g in groups.tolist()]
    return {
        "clicks": pl.DataFrame({S.QUERY: queries, S.LISTING_ID: [listing[p] for p in positive]}),
        "listings": pl.DataFrame({S.LISTING_ID: listing, S.TITLE: [f"title {x}" for x in listing]}),
        "products": pl.DataFrame({S.LISTING_ID: listing, S.PRODUCT_ID: [f"P{x}" for x in listing]}),
        "negatives": pl.DataFrame(
            {
                S.QUERY: np.repeat(queries, 5),
                S.POSITIVE_LISTING_ID: np.repeat([listing[p] for p in positive], 5),
                S.NEGATIVE_LISTING_ID: [listing[p] for p in negatives.ravel()],
                S.RANK: np.tile(np.arange(1, 6), n),
                S.SCORE: np.full(5 * n, 0.5),
                S.POSITIVE_SCORE: np.full(5 * n, 0.9),
            }
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--products", type=int, default=250_000)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    rows = synthetic_rows(args.rows, args.products)
    plan, plan_s = timed(batching.plan_product_disjoint, *rows, args.batch_size)
    base, base_s = timed(round_robin_plan, *rows, args.batch_size)
    for name, result, seconds in (("planner", plan, plan_s), ("round-robin", base, base_s)):
        placed = len(result.order)
        print(f"{name:12s}: {seconds:6.1f} s, placed {placed:,} of {args.rows:,}", end="")
        print(f" ({placed / args.rows:.2%}), unplaced {len(result.unplaced):,}")
    tables = stage_tables(*rows[:3])
    cfg = build_config({}, {"shards.batch_size": args.batch_size, "mine.num_negatives": 5})
    with tempfile.TemporaryDirectory() as out:
        result, stage_s = timed(shards.run, cfg, shards.Inputs(**tables), out)
    print(f"shards.run: {stage_s:6.1f} s, {result.summary()}")
    print(f"timings: {result.timings}, plan_s: {result.details['plan_s']}")


if __name__ == "__main__":
    main()
