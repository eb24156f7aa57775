"""Peak memory of ingest as the click log grows (1 M and 5 M rows), and the memory budget check.

Inputs come from the vectorised generator of `benchmarks/ingest.py` (one listing per five click
rows, ~1% planted bad click rows), written as parquet. Each size runs `ingest.run` in a fresh
child process that reports its own peak RSS (``ru_maxrss``) and its RSS after imports, so the
figures exclude the generator and the parent. The report gives MB per million input rows and per
input MB: the figures behind `ingest.memory_need_mb`, which the `ingest.memory_budget_mb` check
uses to stop a build before it swaps.

    .venv/bin/python benchmarks/memory.py [--sizes 1000000 5000000] [--data DIR]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import generate_fast  # noqa: E402 - the sibling benchmark's generator

from pairsieve import ingest  # noqa: E402


def child(clicks: str, catalog: str, out: str) -> None:
    """In a fresh process: ingest, then print its peak RSS and its RSS after imports."""
    import psutil

    from pairsieve.config import PairsieveConfig

    cfg = PairsieveConfig()
    base_mb = psutil.Process().memory_info().rss / 2**20
    started = time.perf_counter()
    result = ingest.run(cfg, clicks, catalog, Path(out))
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {
        "rows_in": result.rows_in,
        "ingest_s": seconds,
        "base_mb": base_mb,
        "peak_mb": peak_mb,
    }
    print(json.dumps(report))


def measure(data: Path, n_clicks: int) -> dict:
    clicks, catalog = generate_fast(data, n_clicks // 5, n_clicks, seed=0)
    input_mb = (clicks.stat().st_size + catalog.stat().st_size) / 2**20
    with tempfile.TemporaryDirectory() as out:
        args = [sys.executable, __file__, "--child", str(clicks), str(catalog), out]
        run = subprocess.run(args, capture_output=True, text=True, check=True)
    report = json.loads(run.stdout.strip().splitlines()[-1])
    estimate_mb = ingest.memory_need_mb(str(clicks), str(catalog))  # what the budget check uses
    return {"n_clicks": n_clicks, "input_mb": input_mb, "estimate_mb": estimate_mb, **report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--data", type=Path, default=Path(tempfile.gettempdir()) / "ps-bench")
    parser.add_argument("--child", nargs=3, metavar=("CLICKS", "CATALOG", "OUT"), help=SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    rows = [measure(args.data, n) for n in args.sizes]
    print("| click rows | listings | input parquet MB | peak RSS MB | RSS after imports MB | "
          "ingest MB (peak - imports) | per 1M input rows | estimate MB | ingest s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        work = r["peak_mb"] - r["base_mb"]
        print(
            f"| {r['n_clicks']:,} | {r['n_clicks'] // 5:,} | {r['input_mb']:,.0f} | "
            f"{r['peak_mb']:,.0f} | {r['base_mb']:,.0f} | {work:,.0f} | "
            f"{work / (r['rows_in'] / 1e6):,.0f} | {r['estimate_mb']:,.0f} | {r['ingest_s']:.1f} |"
        )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared machine)")


if __name__ == "__main__":
    main()
