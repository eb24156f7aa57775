"""Ingest benchmark: a generated 1,000,000-listing catalog with 5,000,000 click rows.

Target: under 60 s and under 3 GB peak RSS on the 2-core machine.

The default generator here is a fast vectorised stand-in (numpy indices into small vocabularies,
joined by polars), not the realistic `pairsieve synth` marketplace: ingest cost depends on row
counts, string lengths and the share of repeated and bad rows, not on how realistic titles are.
It plants ~0.3% bad catalog rows (duplicate ids, empty titles) and ~1% bad click rows (unknown
listings, empty queries, non-numeric positions) so every quarantine path runs at scale.

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

import numpy as np
import polars as pl

BRANDS = [
    "Apple", "Samsung", "Sony", "LG", "Philips", "Bosch", "Dell", "HP", "Lenovo", "Asus",
    "Acer", "Canon", "Nikon", "Bose", "JBL", "Xiaomi", "Huawei", "Garmin", "Logitech", "Dyson",
]  # fmt: skip
NOUNS = [
    "Smartphone", "Laptop", "Headphones", "Monitor", "Tablet", "Camera", "Speaker", "Router",
    "Smartwatch", "Keyboard", "Mouse", "Vacuum Cleaner", "Hair Dryer", "Coffee Machine",
    "Television", "Soundbar", "Printer", "Projector", "Microwave", "Kettle",
]  # fmt: skip
CAPACITY = ["32 GB", "64GB", "128 GB", "256GB", "512 GB", "1TB", "500 W", "1200W", "27 inch", ""]
COLOURS = ["Black", "White", "Silver", "Space Grey", "Blue", "Schwarz", "Noir", "Röd", "", ""]
EXTRAS = ["", "", "New", "2024 Model", "Free Shipping", "EU Version", "Refurbished", "Bundle"]
ROW_GROUP = 250_000


def _pick(words: list[str], index: np.ndarray) -> pl.Series:
    return pl.Series(words).gather(pl.Series(index))


def _where(mask: np.ndarray, value: pl.Expr, otherwise: pl.Expr | str) -> pl.Expr:
    return pl.when(pl.Series(mask)).then(value).otherwise(otherwise)


def _padded(prefix: str, numbers: np.ndarray) -> pl.Expr:
    return pl.format(prefix + "{}", pl.Series(numbers).cast(pl.String).str.zfill(8))


def _catalog(n: int, rng: np.random.Generator) -> pl.DataFrame:
    """n listings of n/4 products; titles vary by seller word order, colour and extras."""
    product = np.arange(n) // 4
    frame = pl.DataFrame(
        {
            "brand": _pick(BRANDS, product % len(BRANDS)),
            "noun": _pick(NOUNS, (product // len(BRANDS)) % len(NOUNS)),
            "model": pl.Series((product % 9973).astype(np.int64)).cast(pl.String),
            "cap": _pick(CAPACITY, (product // 7) % len(CAPACITY)),
            "colour": _pick(COLOURS, rng.integers(0, len(COLOURS), n)),
            "extra": _pick(EXTRAS, rng.integers(0, len(EXTRAS), n)),
        }
    )
    code = pl.concat_str(pl.col("brand").str.slice(0, 2).str.to_uppercase(), pl.col("model"))
    usual = pl.concat_str("brand", "noun", code, "cap", "colour", "extra", separator=" ")
    flipped = pl.concat_str("brand", code, "noun", "colour", "cap", separator=" ")
    title = _where(rng.random(n) < 0.5, flipped, usual).str.replace_all(r"\s+", " ")
    bad = rng.random(n)
    return frame.select(
        _where(bad < 0.002, _padded("L", product * 4), _padded("L", np.arange(n))).alias(
            "listing_id"
        ),  # ~0.2% reuse their product's first id: duplicate_listing_id
        _where((bad >= 0.002) & (bad < 0.003), pl.lit("  "), title.str.strip_chars()).alias(
            "title"
        ),  # ~0.1% blank: empty_title
        "brand",
        pl.Series("seller_id", rng.integers(0, 5000, n)).cast(pl.String),
        pl.Series("price", np.round(rng.uniform(5, 2000, n), 2)),
        pl.Series("true_product_id", product).cast(pl.String),
    )


def _clicks(n: int, n_listings: int, rng: np.random.Generator) -> pl.DataFrame:
    """n click rows: Pareto listing popularity, queries typed 4 ways from the product."""
    listing = np.minimum((rng.pareto(1.1, n) * n_listings / 50).astype(np.int64), n_listings - 1)
    product = listing // 4
    frame = pl.DataFrame(
        {
            "brand": _pick(BRANDS, product % len(BRANDS)),
            "noun": _pick(NOUNS, (product // len(BRANDS)) % len(NOUNS)),
            "model": pl.Series((product % 9973).astype(np.int64)).cast(pl.String),
        }
    )
    code = pl.concat_str(pl.col("brand").str.slice(0, 2), pl.col("model"))
    style = rng.integers(0, 4, n)
    query = _where(
        style == 0,
        pl.concat_str("brand", "noun", separator=" ").str.to_lowercase(),
        _where(
            style == 1,
            pl.concat_str("noun", code, separator=" "),
            _where(
                style == 2,
                pl.concat_str("brand", code, separator="  ").str.to_uppercase(),
                code.str.to_lowercase(),
            ),
        ),
    )
    bad = rng.random(n)
    positions = pl.Series(rng.integers(1, 40, n)).cast(pl.String)
    return frame.select(
        _where(bad < 0.001, pl.lit(None, pl.String), query).alias("query"),
        _where((bad >= 0.001) & (bad < 0.006), pl.lit("L99999999x"), _padded("L", listing)).alias(
            "listing_id"
        ),  # ~0.5% unknown_listing
        _where((bad >= 0.006) & (bad < 0.008), pl.lit("top"), pl.lit(positions)).alias(
            "position"
        ),  # ~0.2% bad_value
        pl.format("s{}", pl.Series(rng.integers(0, n // 5, n)).cast(pl.String)).alias("session_id"),
    )


def generate_fast(data: Path, n_listings: int, n_clicks: int, seed: int) -> tuple[Path, Path]:
    """Write catalog and clicks parquet files into ``data`` (reused when already there)."""
    data.mkdir(parents=True, exist_ok=True)
    catalog, clicks = data / f"catalog-{n_listings}.parquet", data / f"clicks-{n_clicks}.parquet"
    rng = np.random.default_rng(seed)
    if not catalog.exists():
        _catalog(n_listings, rng).write_parquet(catalog, row_group_size=ROW_GROUP)
    if not clicks.exists():
        _clicks(n_clicks, n_listings, rng).write_parquet(clicks, row_group_size=ROW_GROUP)
    return clicks, catalog


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
