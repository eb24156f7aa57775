"""Mining throughput at 200,000 listings x 100,000 distinct queries, and IVF recall vs exact.

Embedding 300k texts with MiniLM at ~190 texts/s takes ~26 min of both shared cores, so the
full-size run uses seeded random unit vectors (queries = their first clicked listing's vector plus
noise, so positives score like real ones); embedding time is *extrapolated* from the titles/s
measured here on a sample of the same synthetic titles (cache bypassed). Search and filtering run
at full size on the real code paths (`build_retrieval`, `deepen.mine_pairs`).
IVF recall@k against exact search is measured on real PriceRunner embeddings (cached titles and
derived-log queries), because random vectors have no cluster structure and would understate it.

    .venv/bin/python benchmarks/mine.py [--listings 200000] [--queries 100000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.datasets import synth
from pairsieve.datasets.clicklog import derive_clicks
from pairsieve.datasets.pricerunner import load_catalog
from pairsieve.mine import deepen
from pairsieve.mine import stage as mine
from pairsieve.mine.retrieval import Embedded, build_retrieval, embed_inputs, positive_table
from pairsieve.vectors.embed import load_encoder
from pairsieve.vectors.embedding_cache import EmbeddingCache

DIM = 384


def synthetic_inputs(n_listings: int, n_queries: int, folder: Path):
    """Catalog and clicks from the generator, cut to the requested sizes."""
    products = int(n_listings / 4.1) + 1
    opts = synth.SynthOptions(queries_per_product=40.0)
    synth.generate(folder, products, seed=7, options=opts)
    catalog = pl.read_parquet(folder / "catalog.parquet").head(n_listings)
    clicks = pl.read_parquet(folder / "clicks.parquet").join(
        catalog.select(S.LISTING_ID), on=S.LISTING_ID
    )
    queries = clicks.select(S.QUERY).unique().sort(S.QUERY).head(n_queries)
    clicks = clicks.join(queries, on=S.QUERY)
    return catalog, clicks


def random_embedded(catalog: pl.DataFrame, clicks: pl.DataFrame, seed: int) -> Embedded:
    """Unit vectors: listings uniform on the sphere, each query the mean of its clicked
    listings plus noise (so every positive scores well above chance, as real ones do)."""
    rng = np.random.default_rng(seed)
    listing_ids = sorted(catalog[S.LISTING_ID].to_list())
    listings = rng.standard_normal((len(listing_ids), DIM), dtype=np.float32)
    listings /= np.linalg.norm(listings, axis=1, keepdims=True)
    row = pl.DataFrame({S.LISTING_ID: listing_ids}).with_row_index("_r")
    pairs = clicks.select(S.QUERY, S.LISTING_ID).unique().join(row, on=S.LISTING_ID)
    pairs = pairs.sort(S.QUERY, "_r")
    names, starts = np.unique(pairs[S.QUERY].to_numpy(), return_index=True)
    sums = np.add.reduceat(listings[pairs["_r"].to_numpy()], starts, axis=0)  # (q, d)
    sums /= np.linalg.norm(sums, axis=1, keepdims=True)
    queries = sums + 0.05 * rng.standard_normal(sums.shape, dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    ids = pl.Series(S.LISTING_ID, listing_ids)
    return Embedded(names.tolist(), ids, queries.astype(np.float32), listings)


def embedding_rate(titles: list[str], cfg: PairsieveConfig, n: int = 1000) -> dict:
    """Titles/s of the configured encoder on ``n`` synthetic titles, cache bypassed."""
    encoder = load_encoder(cfg.embed)
    encoder.encode(titles[:64])  # warm-up
    started = time.perf_counter()
    encoder.encode(titles[:n])
    seconds = time.perf_counter() - started
    return {"texts": n, "seconds": round(seconds, 2), "texts_per_s": round(n / seconds, 1)}


def full_size(cfg: PairsieveConfig, n_listings: int, n_queries: int, folder: Path) -> dict:
    """Search and filter at full size on random vectors; embedding extrapolated."""
    started = time.perf_counter()
    catalog, clicks = synthetic_inputs(n_listings, n_queries, folder)
    generate_s = time.perf_counter() - started
    embedded = random_embedded(catalog, clicks, cfg.seed)
    cpu = time.process_time()
    started = time.perf_counter()
    retrieval = build_retrieval(embedded, cfg)
    pairs = clicks.select(S.QUERY, S.LISTING_ID).unique()
    positives = positive_table(pairs, embedded)
    products = catalog.select(S.LISTING_ID, pl.col(S.TRUE_PRODUCT_ID).alias(S.PRODUCT_ID))
    info_frame = mine.listing_products(catalog, products)
    mined = deepen.mine_pairs(retrieval, positives, info_frame, cfg.mine, cfg.seed)
    info = retrieval.info
    filter_s = time.perf_counter() - started - info["search_s"] - info["index_s"]
    mine_cpu_s = time.process_time() - cpu
    kept = mined.kept
    reasons = mine.reason_counts(mined.dropped)
    summary = mine.summarise(mined.counts, positives, kept, reasons, cfg.mine)
    rate = embedding_rate(catalog[S.TITLE].to_list(), cfg)
    texts = len(embedded.queries) + len(embedded.listing_ids)
    return {
        "listings": len(embedded.listing_ids),
        "distinct_queries": len(embedded.queries),
        "pairs": positives.height,
        "candidates_considered": summary["considered"],
        "negatives_kept": kept.height,
        "dropped_by_reason": summary["dropped_by_reason"],
        "generate_s": round(generate_s, 1),
        "index": info["index"],
        "index_build_s": round(info["index_s"], 1),
        "search_s": round(info["search_s"], 1),
        "retrieval_rounds": mined.rounds,
        "filter_s": round(filter_s, 1),
        "mine_cpu_s": round(mine_cpu_s, 1),
        "filter_candidates_per_s": round(summary["considered"] / filter_s),
        "embedding_measured": rate,
        "embedding_extrapolated_s": round(texts / rate["texts_per_s"], 1),
        "embedding_extrapolated_s_at_190_per_s": round(texts / 190, 1),
        "load_average_1m_at_end": round(os.getloadavg()[0], 1),
    }


def ivf_recall(cfg: PairsieveConfig, data_root: Path) -> dict:
    """recall@range_max of the IVF index vs exact search on real PriceRunner embeddings."""
    catalog = load_catalog(data_root)
    clicks = derive_clicks(catalog, seed=cfg.seed)
    encoder = load_encoder(cfg.embed)
    cache = EmbeddingCache(cfg.cache_dir, encoder.model_key)
    embedded = embed_inputs(clicks[S.QUERY].unique().to_list(), catalog, encoder, cache)
    k = cfg.mine.search_depth
    rows = np.arange(len(embedded.queries))
    exact_retrieval = build_retrieval(embedded, cfg)
    exact = exact_retrieval.candidates(rows, k).partition_by(S.QUERY, maintain_order=True)
    ivf_retrieval = build_retrieval(embedded, cfg.with_(**{"knn.exact_max": 1000}))
    approx = ivf_retrieval.candidates(rows, k).partition_by(S.QUERY, maintain_order=True)
    exact = [part[S.NEGATIVE_LISTING_ID].to_list() for part in exact]
    approx = [part[S.NEGATIVE_LISTING_ID].to_list() for part in approx]
    exact_info, ivf_info = exact_retrieval.info, ivf_retrieval.info
    hits = sum(len(set(a) & set(e)) for a, e in zip(approx, exact, strict=True))
    return {
        "listings": len(embedded.listing_ids),
        "queries": len(embedded.queries),
        "k": k,
        "nprobe": cfg.knn.nprobe,
        "recall_at_k": round(hits / sum(map(len, exact)), 4),
        "exact": exact_info,
        "ivf": ivf_info,
        "embedding_cache_hits": embedded.stats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listings", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/pairsieve-bench-mine"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    cfg = PairsieveConfig()
    result = {
        "full_size": full_size(cfg, args.listings, args.queries, args.work),
        "ivf_recall_pricerunner": ivf_recall(cfg, args.data_root),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
