"""End-to-end build of PriceRunner with its derived click log, per embedding backend.

For each backend: a cold build (empty cache) timed stage by stage, its clustering scored against
the ground truth, then a warm rebuild into a fresh folder with the same cache, which must embed
nothing. The stages run in process, as the flow's tasks do, so timings exclude Prefect start-up.

    .venv/bin/python benchmarks/build.py [--backends torch onnx-int8] [--data-root ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import polars as pl

from pairsieve.config import load_config
from pairsieve.datasets import clicklog, pricerunner
from pairsieve.datasets.scoring import score
from pairsieve.orchestration import steps
from pairsieve.schemas import TRUE_PRODUCT_ID
from pairsieve.vectors.embed import embed_partition


def cpu_seconds() -> float:
    """User + system CPU of this process (all threads) and its finished children."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


STAGES = ("ingest", "embed", "cluster", "mine", "shards", "report")


def run_stage(stage: str, cfg, data: Path, run_dir: Path, previous: Path | None = None) -> int:
    """Run one stage of an in-process build of ``data`` (its clicks and catalog parquet), as the
    flow's task would; returns the texts embedded (0 for every stage but embed)."""
    if stage == "ingest":
        clicks, catalog = str(data / "clicks.parquet"), str(data / "catalog.parquet")
        steps.ingest_step(cfg, [clicks], [catalog], run_dir)
    elif stage == "embed":
        partitions = steps.embedding_partitions(cfg, run_dir)
        embedded = sum(embed_partition(path, cfg).texts for path in partitions)
        steps.clear_embedding_partitions(run_dir)
        return embedded
    elif stage in ("cluster", "mine"):
        getattr(steps, f"{stage}_step")(cfg, run_dir, previous)
    else:
        getattr(steps, f"{stage}_step")(cfg, run_dir)
    return 0


def build(cfg, data: Path, run_dir: Path, previous: Path | None = None) -> dict:
    """Run every stage (product ids carried over from ``previous`` if given); return wall and CPU
    seconds per stage and texts embedded (CPU is the fair figure when other work shares the
    cores)."""
    timings, cpu, embedded = {}, {}, 0
    started, cpu_started = time.perf_counter(), cpu_seconds()
    for stage in STAGES:
        mark, cpu_mark = time.perf_counter(), cpu_seconds()
        embedded += run_stage(stage, cfg, data, run_dir, previous)
        timings[stage], cpu[stage] = time.perf_counter() - mark, cpu_seconds() - cpu_mark
    timings["total"], cpu["total"] = time.perf_counter() - started, cpu_seconds() - cpu_started
    return {
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
        "embedded": embedded,
    }


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
