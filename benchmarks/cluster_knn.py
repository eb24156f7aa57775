"""The cluster stage's neighbour search, exact against IVF: the same products at what cost?

The cluster stage asks its kNN index only for each title's `cluster.knn_k` nearest neighbours
at cosine `cluster.min_cosine` or more: close neighbours, which an IVF index finds in the lists
its probes visit. This runs `cluster.run` twice per catalog with a warm embedding cache (a first
untimed run fills it): the search exact (`cluster.knn_exact_max` above the titles) and IVF
(`cluster.knn_exact_max=1`, `knn.nlist`/`knn.nprobe` at their defaults). It reports how far the
two partitions agree, each one's pairwise F1 against the truth, and the kNN step's seconds
(`embedding_s`: vectors come from the cache, so it is the index build and search).

    .venv/bin/python benchmarks/cluster_knn.py --data-root ../shared/data \
        [--catalogs pricerunner,...] [--synth 11600] [--work /tmp/ps-cluster-knn]

Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import polars as pl
from harness.catalogs import generated_marketplace

from pairsieve import schemas as S
from pairsieve.cluster import stage as cluster
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS, benchmark
from pairsieve.datasets.scoring import score
from pairsieve.orchestration.stages import stage_config

EVERY_SEARCH_EXACT = 10**9
EVERY_SEARCH_IVF = 1


def clustered(catalog: pl.DataFrame, exact_max: int, out: Path) -> tuple[pl.DataFrame, dict]:
    cfg = stage_config(PairsieveConfig().with_(**{"cluster.knn_exact_max": exact_max}), "cluster")
    started = time.perf_counter()
    result = cluster.run(cfg, cluster.Inputs(catalog.drop(S.TRUE_PRODUCT_ID)), out)
    seconds = time.perf_counter() - started
    products = pl.read_parquet(out / S.PRODUCTS_FILE).select(S.LISTING_ID, S.PRODUCT_ID)
    return products, {"stage_s": seconds, "knn_s": result.timings["embedding_s"]}


def one_catalog(name: str, catalog: pl.DataFrame, work: Path) -> dict:
    clustered(catalog, EVERY_SEARCH_EXACT, work / name / "warm")  # fills the embedding cache
    exact, exact_times = clustered(catalog, EVERY_SEARCH_EXACT, work / name / "exact")
    ivf, ivf_times = clustered(catalog, EVERY_SEARCH_IVF, work / name / "ivf")
    both = exact.join(ivf, on=S.LISTING_ID, suffix="_ivf").join(
        catalog.select(S.LISTING_ID, S.TRUE_PRODUCT_ID), on=S.LISTING_ID
    )
    agreement = score(both[f"{S.PRODUCT_ID}_ivf"], both[S.PRODUCT_ID])
    return {
        "catalog": name,
        "titles": catalog[S.TITLE].n_unique(),
        "agreement": (agreement.pairwise_precision, agreement.pairwise_recall),
        "f1_exact": score(both[S.PRODUCT_ID], both[S.TRUE_PRODUCT_ID]).pairwise_f1,
        "f1_ivf": score(both[f"{S.PRODUCT_ID}_ivf"], both[S.TRUE_PRODUCT_ID]).pairwise_f1,
        "products": (exact[S.PRODUCT_ID].n_unique(), ivf[S.PRODUCT_ID].n_unique()),
        "exact": exact_times,
        "ivf": ivf_times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--catalogs", default=",".join(BENCHMARKS))
    parser.add_argument("--synth", default="", help="Generated catalogs' --products, commas.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-cluster-knn"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    catalogs = [
        (name, lambda n=name: benchmark(n).load(args.data_root))
        for name in filter(None, args.catalogs.split(","))
    ]
    catalogs += [
        (
            f"generated {p}",
            lambda p=int(p): pl.read_parquet(
                generated_marketplace(args.work / f"synth-{p}", p) / "catalog.parquet"
            ),
        )
        for p in filter(None, args.synth.split(","))
    ]
    print(
        "| catalog | distinct titles | IVF against exact: pairwise P / R | products exact / IVF "
        "| pairwise F1 by the truth, exact / IVF | kNN step s, exact / IVF | stage s, exact / IVF |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, load in catalogs:
        found = one_catalog(name.replace(" ", "-"), load(), args.work)
        exact, ivf = found["exact"], found["ivf"]
        print(
            f"| {name} | {found['titles']:,} | {found['agreement'][0]:.4f} / "
            f"{found['agreement'][1]:.4f} | {found['products'][0]:,} / {found['products'][1]:,} "
            f"| {found['f1_exact']:.4f} / {found['f1_ivf']:.4f} | {exact['knn_s']:.1f} / "
            f"{ivf['knn_s']:.1f} | {exact['stage_s']:.1f} / {ivf['stage_s']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
