"""Cluster-stage throughput: MinHash path on a generated catalog, vs datasketch in a loop.

    python benchmarks/cluster.py --listings 1000000            # MinHash path (no embeddings)
    python benchmarks/cluster.py --listings 20000 --embedding  # + embedding path, cold and warm
    python benchmarks/cluster.py --listings 100000 --stage-out DIR  # cluster.run only + sha256s

The MinHash path is signatures + LSH + code blocks + judging + clustering
(`cluster.use_embeddings = false`). The baseline is `datasketch.MinHash.update` in a Python
loop over the same word shingles for a sample, scaled to the same listing count (ratio).
Peak RSS is read from the kernel (ru_maxrss) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import polars as pl
from datasketch import MinHash

from pairsieve.cluster import candidates, linkage, nodes, pairs_file
from pairsieve.cluster import stage as cluster
from pairsieve.cluster.neighbours import scratch_mapper
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.datasets.scoring import score
from pairsieve.datasets.synth import catalog_chunk
from pairsieve.vectors import minhash


def generated_catalog(listings: int, seed: int) -> pl.DataFrame:
    products = max(1, int(listings / 4.3))
    return catalog_chunk(0, products, products, seed).head(listings)


def datasketch_loop_seconds(titles: list[str], num_perm: int, seed: int) -> float:
    """datasketch.MinHash.update per word shingle, one MinHash per title."""
    started = time.perf_counter()
    for title in titles:
        m = MinHash(num_perm=num_perm, seed=seed)
        for word in set(title.split(" ")):
            m.update(word.encode("utf-8"))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listings", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=20_000, help="datasketch loop sample")
    parser.add_argument("--embedding", action="store_true")
    parser.add_argument(
        "--stage-out",
        type=Path,
        help="only run the cluster stage into this folder; print timings and output sha256s",
    )
    args = parser.parse_args()
    catalog = generated_catalog(args.listings, seed=0)
    cfg = PairsieveConfig().with_(**{"cluster.use_embeddings": False})
    if args.stage_out:
        stage_only(cfg, catalog.drop(cluster.S.TRUE_PRODUCT_ID), args.stage_out)
        return
    truth = catalog.select(cluster.S.LISTING_ID, cluster.S.TRUE_PRODUCT_ID)
    started = time.perf_counter()
    with scratch_mapper() as mapper:
        result = cluster.cluster_listings(cfg, catalog.drop(cluster.S.TRUE_PRODUCT_ID), mapper)
    path_s = time.perf_counter() - started
    titles = result.frame[cluster.S.TITLE_NORM].to_list()
    started = time.perf_counter()
    shingles = pl.select(minhash.shingle_expr(pl.lit(pl.Series(titles)), "word", 1)).to_series()
    minhash.signatures(shingles, cfg.cluster.num_perm, cfg.seed)
    ours_sig_s = time.perf_counter() - started
    loop_s = datasketch_loop_seconds(titles[: args.sample], cfg.cluster.num_perm, cfg.seed)
    loop_scaled = loop_s * len(titles) / min(len(titles), args.sample)
    ordered = result.frame.join(truth, on=cluster.S.LISTING_ID, how="left")
    scores = score(result.listing_labels(), ordered[cluster.S.TRUE_PRODUCT_ID])
    report = {
        "listings": len(catalog),
        "minhash_path_s": round(path_s, 1),
        "stage_timings_s": result.details["timings"],
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "signatures_vectorised_s": round(ours_sig_s, 2),
        "datasketch_loop_s_scaled": round(loop_scaled, 1),
        "signature_speedup": round(loop_scaled / ours_sig_s, 1),
        "candidate_pairs": result.details["candidate_pairs"],
        "synthetic_pairwise_f1": scores.pairwise_f1,
        "synthetic_bcubed_f1": scores.bcubed_f1,
    }
    if args.embedding:
        report.update(embedding_throughput(catalog.drop(cluster.S.TRUE_PRODUCT_ID)))
    print(json.dumps(report, indent=2))


# The steps of `cluster.run`, timed in wall and CPU seconds by `stage_only` (CPU seconds
# count every thread and the forked workers of `parallel.in_processes`; other agents
# share the cores, so wall time alone misleads).
STEPS = {
    "attributes": (("nodes", "prepare"), ("nodes", "node_table"), ("candidates", "common_codes")),
    "code_blocks": (("candidates", "code_block_pairs"),),
    "signatures_lsh": (("candidates", "minhash_pairs"),),
    "combine_judge": (("candidates", "combine_candidates"), ("stage", "judge")),
    "agglomerate": (("linkage", "agglomerate"),),
    "write": (("stage", "products_frame"), ("pairs_file", "write_pairs")),
}
MODULES = {
    "stage": cluster,
    "nodes": nodes,
    "candidates": candidates,
    "linkage": linkage,
    "pairs_file": pairs_file,
}


def _cpu_seconds() -> float:
    """CPU seconds of this process (all threads) and of its finished child processes."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _timed_steps() -> tuple[dict[str, list[float]], list[tuple[object, str, object]]]:
    """Wrap the step functions of `pairsieve.cluster.stage` (and its parquet writer) to sum their
    [wall, cpu] seconds; returns the sums and the originals to restore."""
    sums: dict[str, list[float]] = {step: [0.0, 0.0] for step in [*STEPS, "write"]}
    saved = []

    def wrap(step: str, fn):  # noqa: ANN001, ANN202
        def timed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            wall, cpu = time.perf_counter(), _cpu_seconds()
            try:
                return fn(*args, **kwargs)
            finally:
                sums[step][0] += time.perf_counter() - wall
                sums[step][1] += _cpu_seconds() - cpu

        return timed

    for step, names in STEPS.items():
        for module, name in names:
            saved.append((MODULES[module], name, getattr(MODULES[module], name)))
            setattr(MODULES[module], name, wrap(step, getattr(MODULES[module], name)))
    saved.append((cluster, "io", cluster.io))
    cluster.io = argparse.Namespace(**vars(io))
    cluster.io.write_parquet = wrap("write", io.write_parquet)
    return sums, saved


def stage_only(cfg: PairsieveConfig, catalog: pl.DataFrame, out: Path) -> None:
    """`cluster.run` alone (same results check: compare the printed sha256s across versions)."""
    sums, saved = _timed_steps()
    started, cpu_started = time.perf_counter(), _cpu_seconds()
    try:
        result = cluster.run(cfg, cluster.Inputs(catalog), out)
    finally:
        for module, name, fn in saved:
            setattr(module, name, fn)
    report = {
        "listings": len(catalog),
        "stage_s": round(time.perf_counter() - started, 1),
        "stage_cpu_s": round(_cpu_seconds() - cpu_started, 1),
        "steps_wall_cpu_s": {k: [round(w, 1), round(c, 1)] for k, (w, c) in sums.items()},
        # The "MinHash path": every step but writing the parquet files.
        "minhash_path_wall_cpu_s": [
            round(sum(v[i] for k, v in sums.items() if k != "write"), 1) for i in (0, 1)
        ],
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "stage_timings_s": result.timings,
        "candidate_pairs": result.details["candidate_pairs"],
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        # The largest forked worker (its pages are shared with the parent until written).
        "worker_peak_rss_gb": round(
            resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20, 2
        ),
        "sha256": {p.name: io.sha256_file(p) for p in sorted(out.glob("*.parquet"))},
    }
    print(json.dumps(report, indent=2))


def embedding_throughput(catalog: pl.DataFrame) -> dict[str, float]:
    """Full clustering with embeddings, cold (empty cache) then warm, in listings/s."""
    from pairsieve.vectors.embed import load_encoder

    out = {}
    with tempfile.TemporaryDirectory() as cache:
        cfg = PairsieveConfig().with_(cache_dir=cache)
        encoder = load_encoder(cfg.embed)
        for label in ("cold", "warm"):
            started = time.perf_counter()
            with scratch_mapper() as mapper:
                cluster.cluster_listings(cfg, catalog, mapper, cluster.Extras(encoder=encoder))
            out[f"embedding_path_{label}_listings_per_s"] = round(
                len(catalog) / (time.perf_counter() - started), 1
            )
    return out


if __name__ == "__main__":
    main()
