"""End-to-end build of PriceRunner with its derived click log, per embedding backend.

For each backend: a cold build (empty cache) timed stage by stage, its clustering scored against
the ground truth, then a warm rebuild into a fresh folder with the same cache, which must embed
nothing. The stages run in process, as the flow's tasks do, so timings exclude Prefect start-up.

    .venv/bin/python benchmarks/build.py [--backends torch onnx-int8] [--data-root ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import polars as pl
from harness.stages import build

from pairsieve.config import load_config
from pairsieve.datasets import clicklog, pricerunner
from pairsieve.datasets.scoring import score
from pairsieve.schemas import TRUE_PRODUCT_ID


def quality(run_dir: Path) -> dict:
    products = pl.read_parquet(run_dir / "cluster" / "products.parquet")
    truth = pl.read_parquet(
        run_dir / "ingest" / "listings.parquet", columns=["listing_id", TRUE_PRODUCT_ID]
    )
    joined = products.join(truth, on="listing_id")
    result = score(joined["product_id"], joined[TRUE_PRODUCT_ID])
    return {"pairwise_f1": round(result.pairwise_f1, 4), "bcubed_f1": round(result.bcubed_f1, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["torch", "onnx-int8"])
    parser.add_argument(
        "--data-root", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pairsieve-build-bench-"))
    catalog = pricerunner.load_catalog(args.data_root)
    data = work / "data"
    data.mkdir()
    catalog.write_parquet(data / "catalog.parquet")
    clicklog.derive_clicks(catalog, seed=13).write_parquet(data / "clicks.parquet")
    results = {}
    for backend in args.backends:
        cfg = load_config(
            None,
            {
                "embed.backend": backend,
                "cache_dir": str(work / f"cache-{backend}"),
                "ingest.truth_column": TRUE_PRODUCT_ID,
            },
        )
        cold = build(cfg, data, work / f"{backend}-cold")
        warm = build(cfg, data, work / f"{backend}-warm")
        results[backend] = {"cold": cold, "warm": warm, **quality(work / f"{backend}-cold")}
        print(backend, json.dumps(results[backend]), flush=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
