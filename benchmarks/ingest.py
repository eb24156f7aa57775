"""Ingest benchmark: a generated 1,000,000-listing catalog with 5,000,000 click rows.

Target: under 60 s and under 3 GB peak RSS on the 2-core machine.

The default generator (`harness.fast_inputs`) is a fast vectorised stand-in (numpy indices into
small vocabularies, joined by polars), not the realistic `pairsieve synth` marketplace: ingest cost
depends on row counts, string lengths and the share of repeated and bad rows, not on how realistic
titles are. It plants ~0.3% bad catalog rows (duplicate ids, empty titles) and ~1% bad click rows
(unknown listings, empty queries, non-numeric positions) so every quarantine path runs at scale.

Ingest runs in a child process so its peak RSS (``ru_maxrss`` of the child) excludes the
generator. As a baseline the same child first reads both parquet files into memory with polars
(no validation); the report gives ingest time as a ratio to that plain read.

    .venv/bin/python benchmarks/ingest.py [--generator fast|synth] [--listings N] [--clicks N]

``--generator synth`` uses the realistic streaming `pairsieve.datasets.synth.generate` (sized to
~N listings and >= N click rows; no planted bad rows, slower to generate).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from argparse import SUPPRESS
from pathlib import Path

import polars as pl
from harness.fast_inputs import generate_fast


def generate_synth(data: Path, n_listings: int, n_clicks: int, seed: int) -> tuple[Path, Path]:
    """The realistic `pairsieve synth` marketplace sized to ~n_listings and >= n_clicks rows."""
    from pairsieve.datasets import synth

    folder = data / f"synth-{n_listings}-{n_clicks}-{seed}"
    catalog, clicks = folder / "catalog.parquet", folder / "clicks.parquet"
    if not (catalog.exists() and clicks.exists()):
        # Measured on the 235k-product run: 4.27 listings per product and 1.21 click rows per
        # search session; 3% headroom so the click target is reached.
        n_products = round(n_listings / 4.27)
        qpp = 1.03 * n_clicks / (n_products * 1.21)
        synth.generate(
            folder, n_products, seed=seed, options=synth.SynthOptions(queries_per_product=qpp)
        )
    return clicks, catalog


def child(clicks: str, catalog: str, out: str) -> None:
    """Run in a fresh process: the plain-read baseline, then ingest; print timings as JSON."""
    from pairsieve.config import PairsieveConfig
    from pairsieve.ingest import stage as ingest

    started = time.perf_counter()
    pl.read_parquet(clicks).height + pl.read_parquet(catalog).height
    baseline = time.perf_counter() - started
    started = time.perf_counter()
    inputs = ingest.Inputs(clicks, catalog)
    inputs.fingerprint()
    fingerprint = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    result = ingest.run(PairsieveConfig(), inputs, Path(out))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    summary = {
        "baseline_s": baseline,
        "fingerprint_s": fingerprint,
        "ingest_s": seconds,
        "ingest_cpu_s": cpu,
    }
    print(json.dumps({**summary, "result": result.to_json()}))


def _report(generator: str, report: dict, rss_mb: float, cpu_s: float) -> None:
    result, seconds = report["result"], report["ingest_s"]
    clicks, catalog = result["details"]["clicks"], result["details"]["catalog"]
    print(
        f"{generator}: {catalog['rows_in']:,} listings + {clicks['rows_in']:,} click rows "
        f"= {result['rows_in']:,} rows in {seconds:.1f} s wall ({result['rows_in'] / seconds:,.0f}"
        f" rows/s); plain parquet read {report['baseline_s']:.1f} s (ingest/read "
        f"{seconds / report['baseline_s']:.1f}x); fingerprint {report['fingerprint_s']:.1f} s; "
        f"child peak RSS {rss_mb:,.0f} MB"
    )
    print(
        f"  CPU: ingest {report['ingest_cpu_s']:.1f} s (all threads), whole child {cpu_s:.1f} s; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)"
    )
    print(f"  kept: {catalog['rows_out']:,} listings, {clicks['rows_out']:,} (query, listing) rows")
    print(f"  dropped: {json.dumps(result['dropped_by_reason'])}")
    print(f"  timings: {json.dumps(result['timings'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listings", type=int, default=1_000_000)
    parser.add_argument("--clicks", type=int, default=5_000_000)
    parser.add_argument("--generator", choices=("fast", "synth"), default="fast")
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "ps-bench")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", nargs=3, metavar=("CLICKS", "CATALOG", "OUT"), help=SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return

    started = time.perf_counter()
    make = generate_fast if args.generator == "fast" else generate_synth
    clicks, catalog = make(args.data, args.listings, args.clicks, args.seed)
    print(f"data ready in {time.perf_counter() - started:.1f} s: {clicks}, {catalog}")
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, __file__, "--child", str(clicks), str(catalog), out]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(proc.stderr)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    _report(args.generator, report, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)


if __name__ == "__main__":
    main()
