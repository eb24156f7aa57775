"""Mining's exact deep scan (`knn.scan_below`) against its own matrix product.

The scan scores every listing for each query left short by the margin, then keeps the best
``head`` listings, the best ``depth`` below the query's ceiling and the count above it. Its floor
is the matrix product; the ratio to it is the selection's overhead. ``--previous FILE`` also times
another version of `pairsieve/knn.py` (e.g. ``git show REV:src/pairsieve/knn.py > FILE``) on the
same inputs and checks whether both return identical arrays (a query's scores can differ in the
last bit with the shape of the matrix product it is part of, and so can the order of near ties).

    .venv/bin/python benchmarks/scan.py [--listings 200000] [--queries 600] [--previous FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time

import numpy as np

from pairsieve.vectors import knn


def inputs(n: int, m: int, dim: int = 384, seed: int = 0):
    """Unit listing vectors, queries near random listings, and ceilings that put 100 to 4,000
    listings above each query's margin (the spread the synthetic day-2 queries show)."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = vectors[rng.integers(0, n, m)] + 0.4 * rng.standard_normal((m, dim)).astype(
        np.float32
    )
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    above = rng.integers(100, 4_000, m)
    scores = queries @ vectors.T
    ceilings = np.array([-np.partition(-scores[r], a)[a] for r, a in enumerate(above)])
    return vectors, queries, ceilings.astype(np.float32)


def timed(fn, *args):
    started = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listings", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--previous", help="another knn.py to time on the same inputs")
    args = parser.parse_args()
    vectors, queries, ceilings = inputs(args.listings, args.queries)
    previous = None
    if args.previous:
        spec = importlib.util.spec_from_file_location("knn_previous", args.previous)
        previous = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(previous)
    for module in (knn, previous) if previous else (knn,):  # compile outside the timings
        module.scan_below(vectors, queries[:2], ceilings[:2], 50, 200)
    cells = args.listings * args.queries
    product_s, _ = timed(lambda: queries @ vectors.T)
    results = {"listings": args.listings, "queries": args.queries, "product_s": product_s}
    for depth in (200, 800):
        scan_s, scanned = timed(knn.scan_below, vectors, queries, ceilings, 50, depth)
        row = {"scan_s": scan_s, "ns_per_score": scan_s / cells * 1e9}
        row["over_product"] = scan_s / product_s
        if previous is not None:
            before_s, before = timed(previous.scan_below, vectors, queries, ceilings, 50, depth)
            row["previous_s"] = before_s
            row["speedup"] = before_s / scan_s
            row["identical"] = all(
                np.array_equal(a, b) for a, b in zip(before, scanned, strict=True)
            )
        results[f"depth_{depth}"] = row
    results["load_average_1m"] = os.getloadavg()[0]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
