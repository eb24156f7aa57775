"""Synthetic marketplace benchmark: time and peak memory of `pairsieve synth` at ~1M listings.

Target: 1,000,000 listings well under a minute, memory bounded by the chunk, not the
total. The baseline, run in the same process, is the floor any generator pays: reading the
written parquet back and writing it again with the project's settings.

    .venv/bin/python benchmarks/synth.py --products 233500 --chunk-size 50000
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import polars as pl

from pairsieve.core.io import write_parquet
from pairsieve.datasets.synth import SynthOptions, generate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--products", type=int, default=233_500, help="~4.3 listings each")
    parser.add_argument("--chunk-size", type=int, default=50_000)
    parser.add_argument("--queries-per-product", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        options = SynthOptions(queries_per_product=args.queries_per_product)
        summary = generate(out / "synth", args.products, args.seed, args.chunk_size, options)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        started = time.perf_counter()
        for name in ("catalog", "clicks"):
            write_parquet(pl.read_parquet(out / "synth" / f"{name}.parquet"), out / f"{name}.pq")
        baseline = time.perf_counter() - started
        sizes = {p.name: p.stat().st_size for p in (out / "synth").iterdir()}
    rows = summary.listings + summary.click_rows
    print(
        json.dumps(
            {
                "products": summary.products,
                "listings": summary.listings,
                "click_rows": summary.click_rows,
                "chunk_size": args.chunk_size,
                "seconds": round(summary.seconds, 2),
                "listings_per_s": round(summary.listings / summary.seconds),
                "peak_rss_mb_during_generate": round(peak_mb),
                "baseline_read_rewrite_s": round(baseline, 2),
                "ratio_to_baseline": round(summary.seconds / baseline, 1),
                "rows_per_s": round(rows / summary.seconds),
                "bytes": sizes,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
