"""Shard placement mapped over partitions of the rows, against the same rows placed as one
partition: seconds, rows placed, and the peak resident memory of the process that places a
partition (each partition in a fresh spawned process, as on a worker).

    .venv/bin/python benchmarks/placement.py --rows 4000000 --products 1000000 \
        --partition-rows 1048576

The rows are the synthetic Zipf-like rows `shards.py` plans (`harness.shard_rows`: 5 negatives, ~2
rows per query); blocks of 32, no per-product cap. Both arms run in this process one after the
other, the one-partition arm first.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from harness.shard_rows import synthetic_rows

from pairsieve.config import build_config
from pairsieve.shards import placement


def _measured(fn, plan, span, cfg):
    """``fn`` on its span, and this process's peak resident bytes."""
    result = fn(plan, span, cfg)
    return result, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def fresh_processes(peaks: list[int]):
    """A map that runs each span in a fresh spawned process and adds its peak to ``peaks``."""

    def map_spans(fn, plan, spans, cfg, step):
        results = []
        for span in spans:
            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(1, mp_context=context) as pool:
                result, peak = pool.submit(_measured, fn, plan, span, cfg).result()
            peaks.append(peak)
            results.append(result)
        return results

    return map_spans


def arm(rows: placement.Rows, partition_rows: int, folder: Path) -> dict:
    cfg = build_config({}, {"shards.batch_size": 32, "shards.max_rows_per_product": None})
    peaks: list[int] = []
    started = time.perf_counter()
    placed = placement.place_mapped(rows, cfg, folder, fresh_processes(peaks), partition_rows)
    return {
        "partitions": placed.partitions,
        "seconds": time.perf_counter() - started,
        "placed": len(placed.order),
        "unplaced": len(placed.unplaced),
        "peak_gib": max(peaks) / 2**30,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--products", type=int, default=1_000_000)
    parser.add_argument("--partition-rows", type=int, default=placement.PARTITION_ROWS // 2)
    args = parser.parse_args()
    rows = placement.Rows(*synthetic_rows(args.rows, args.products))
    with tempfile.TemporaryDirectory() as tmp:
        for name, size in (("one partition", args.rows), ("mapped", args.partition_rows)):
            figures = arm(rows, size, Path(tmp) / name)
            print(
                f"{name:14s}: {figures['partitions']} partition(s), {figures['seconds']:7.1f} s, "
                f"placed {figures['placed']:,} of {args.rows:,} "
                f"({figures['placed'] / args.rows:.2%}), unplaced {figures['unplaced']:,}, "
                f"peak of a placing process {figures['peak_gib']:.2f} GiB"
            )


if __name__ == "__main__":
    main()
