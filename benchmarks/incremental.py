"""Day-2 incremental build against the full build it follows.

A synthetic marketplace (`pairsieve.datasets.synth`) is split into day 1 and day 2: day 2 adds
``--new-share`` of the listings (picked by a hash of the listing id, so some are new copies of
day-1 products and some belong to products never seen) and the last ``--new-clicks`` of the click
log (one more day of a rolling log: both 2% by default).
Day 1 is built cold (empty embedding cache: the full build), day 2 with ``previous`` = day 1 and
the same cache, each stage in process as the flow's tasks run it (no Prefect start-up).
``--phase day1`` stops after day 1 (its figures saved in the work folder) and ``--phase day2``
builds day 2 against them later, so a long cold build and the code it is compared with need not
share one process.

    .venv/bin/python benchmarks/incremental.py --products 4650 [--new-share 0.02] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
from pathlib import Path

import polars as pl
from harness.stages import build

from pairsieve import schemas as S
from pairsieve.config import load_config
from pairsieve.datasets import synth


def split_days(source: Path, new_share: float, new_clicks: float, folder: Path) -> dict[str, int]:
    """Write day1/ and day2/ catalog + clicks from the generated files in ``source``: day 2 adds
    ``new_share`` of the listings and the last ``new_clicks`` of the click log."""
    catalog = pl.read_parquet(source / "catalog.parquet")
    clicks = pl.read_parquet(source / "clicks.parquet")
    new = (pl.col(S.LISTING_ID).hash(seed=7) % 10_000) < int(new_share * 10_000)
    day1_catalog = catalog.filter(~new)
    cut = clicks[S.TS].quantile(1 - new_clicks)
    day1_clicks = clicks.filter(
        (pl.col(S.TS) <= cut) & pl.col(S.LISTING_ID).is_in(day1_catalog[S.LISTING_ID].implode())
    )
    days = {"day1": (day1_catalog, day1_clicks), "day2": (catalog, clicks)}
    for name, (day_catalog, day_clicks) in days.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        day_catalog.write_parquet(folder / name / "catalog.parquet")
        day_clicks.write_parquet(folder / name / "clicks.parquet")
    day1_products = set(day1_catalog[S.TRUE_PRODUCT_ID])
    added = catalog.filter(new)
    return {
        "day1_listings": day1_catalog.height,
        "day2_listings": catalog.height,
        "new_listings": added.height,
        "new_listings_of_day1_products": int(added[S.TRUE_PRODUCT_ID].is_in(day1_products).sum()),
        "day1_click_rows": day1_clicks.height,
        "day2_click_rows": clicks.height,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=4_650)
    parser.add_argument("--new-share", type=float, default=0.02, help="new listings on day 2")
    parser.add_argument(
        "--new-clicks", type=float, default=0.02, help="share of the click log day 2 adds"
    )
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--phase", choices=["day1", "day2", "all"], default="all")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="pairsieve-incremental-"))
    cfg = load_config(None, {"cache_dir": str(work / "cache"), "seed": args.seed})
    saved = work / "day1.json"
    if args.phase != "day2":
        if not (work / "generated" / "catalog.parquet").exists():
            synth.generate(work / "generated", args.products, seed=args.seed)
        sizes = split_days(work / "generated", args.new_share, args.new_clicks, work)
        full = build(cfg, work / "day1", work / "build1")
        saved.write_text(json.dumps({"sizes": sizes, "full_build": full}))
        print(json.dumps({"sizes": sizes, "full_build": full}, indent=2), flush=True)
        if args.phase == "day1":
            return
    shutil.rmtree(work / "build2", ignore_errors=True)  # a finished build would be skipped
    day2 = build(cfg, work / "day2", work / "build2", previous=work / "build1")
    day1 = json.loads(saved.read_text())  # read last: day 2 needs only day 1's mine stage
    sizes, full = day1["sizes"], day1["full_build"]
    changes = pl.read_parquet(work / "build2" / "cluster" / "id_changes.parquet")
    result = {
        **sizes,
        "full_build": full,
        "day2_build": day2,
        "day2_over_full": round(day2["seconds"]["total"] / full["seconds"]["total"], 4),
        "day2_over_full_cpu": (
            round(day2["cpu_seconds"]["total"] / full["cpu_seconds"]["total"], 4)
            if "cpu_seconds" in full  # day-1 figures saved by an older version lack it
            else None
        ),
        "id_changes": dict(changes.group_by("change").len().sort("change").iter_rows()),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
