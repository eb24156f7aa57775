"""Peak memory of ingest as the click log grows (1 M and 5 M rows), with and without the catalog.

Two series, inputs from the vectorised generator `ingest.py` uses (`harness.fast_inputs`: Pareto
listing popularity, queries typed four ways per product, ~1% planted bad click rows), as parquet:

- **same catalog** (the headline): 1 M and 5 M click rows against one catalog of ``--listings``
  listings, so the only thing that grows is the number of raw click rows. If ingest streams the
  click log, peak memory should barely move: what ingest must keep (the catalog, one row per
  distinct (query, listing) pair, the quarantined rows) is bounded by the catalog, not the log.
- **catalog grows too**: one listing per five click rows (1 M -> 200 k listings, 5 M -> 1 M), the
  shape of the earlier benchmark, where what must be kept grows with the input.

Each run is `ingest.run` in a fresh child process that reports its own peak RSS (``VmHWM``)
and its RSS after imports, so the figures exclude the generator and the parent.

    .venv/bin/python benchmarks/memory.py [--sizes 1000000 5000000] [--listings 200000]
        [--series same grow] [--data DIR]
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

from harness.fast_inputs import generate_fast

from pairsieve.core.memory import ingest_need_mb
from pairsieve.ingest import rules
from pairsieve.ingest import stage as ingest


def _peak_rss_mb() -> float:
    """This process's peak RSS. Linux keeps ``ru_maxrss`` across exec, so a child forked from a
    parent that had just generated 5M rows reported the parent's size; ``VmHWM`` starts afresh
    with the new program."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(clicks: str, catalog: str, out: str) -> None:
    """In a fresh process: ingest, then print its peak RSS and its RSS after imports."""
    import psutil

    from pairsieve.config import PairsieveConfig

    cfg = PairsieveConfig()
    base_mb = psutil.Process().memory_info().rss / 2**20
    started, cpu = time.perf_counter(), time.process_time()
    result = ingest.run(cfg, ingest.Inputs(clicks, catalog), Path(out))
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    peak_mb = _peak_rss_mb()
    details = result.details
    report = {
        "rows_in": details["clicks"]["rows_in"],
        "pairs": details["clicks"]["rows_out"],
        "listings": details["catalog"]["rows_out"],
        "quarantined": sum(
            n for reason, n in result.dropped_by_reason.items() if reason != rules.AGGREGATED
        ),
        "ingest_s": seconds,
        "cpu_s": cpu,
        "base_mb": base_mb,
        "peak_mb": peak_mb,
    }
    print(json.dumps(report))


def measure(data: Path, n_listings: int, n_clicks: int) -> dict:
    # One folder per catalog size: the generator names click files by row count only.
    clicks, catalog = generate_fast(data / f"L{n_listings}", n_listings, n_clicks, seed=0)
    input_mb = clicks.stat().st_size / 2**20
    with tempfile.TemporaryDirectory() as out:
        args = [sys.executable, __file__, "--child", str(clicks), str(catalog), out]
        run = subprocess.run(args, capture_output=True, text=True, check=True)
    report = json.loads(run.stdout.strip().splitlines()[-1])
    estimate_mb = ingest_need_mb(str(clicks), str(catalog))  # what the budget check uses
    return {"n_clicks": n_clicks, "input_mb": input_mb, "estimate_mb": estimate_mb, **report}


def _table(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(
        "| click rows | listings kept | (query, listing) pairs kept | quarantined | clicks "
        "parquet MB | peak RSS MB | RSS after imports MB | ingest MB (peak - imports) | vs first "
        "| estimate MB | ingest s (CPU s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    first = rows[0]["peak_mb"] - rows[0]["base_mb"]
    for r in rows:
        work = r["peak_mb"] - r["base_mb"]
        print(
            f"| {r['rows_in']:,} | {r['listings']:,} | {r['pairs']:,} | {r['quarantined']:,} | "
            f"{r['input_mb']:,.0f} | {r['peak_mb']:,.0f} | {r['base_mb']:,.0f} | {work:,.0f} | "
            f"{work / first:.2f}x | {r['estimate_mb']:,.0f} | "
            f"{r['ingest_s']:.1f} ({r['cpu_s']:.1f}) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--listings", type=int, default=200_000, help="catalog of the same series")
    parser.add_argument("--series", nargs="+", choices=("same", "grow"), default=["same", "grow"])
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "ps-memory")
    parser.add_argument("--child", nargs=3, metavar=("CLICKS", "CATALOG", "OUT"), help=SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    print(f"load average at start {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if "same" in args.series:
        rows = [measure(args.data, args.listings, n) for n in args.sizes]
        _table(f"same catalog ({args.listings:,} listings), click rows grow", rows)
    if "grow" in args.series:
        rows = [measure(args.data, n // 5, n) for n in args.sizes]
        _table("catalog grows too (one listing per five click rows)", rows)
    print(f"\nload average at end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared)")


if __name__ == "__main__":
    main()
