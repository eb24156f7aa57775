"""How close is `pairsieve audit`'s false-negative rate to the truth, on datasets whose truth is
known?

For each catalog with within-shop truth (PriceRunner, Altosight, Alaska cameras; the two-shop
catalogs say nothing of pairs inside a shop, so their true rate is unknown), a click log is
derived with `datasets.clicklog.derive_clicks` and three datasets in sentence-transformers'
n-tuple layout (anchor, positive, negative_1..5) are made from its (query, clicked title) pairs:

* ``planted-10`` and ``planted-30``: exactly 10% / 30% of all negatives are other titles of the
  positive's product (drawn at random, seeded, among rows whose product has another title); the
  rest are the positive's nearest titles of other products by the bundled MiniLM (hard negatives
  that are truly different);
* ``st-mined``: sentence-transformers' own `mine_hard_negatives` (`harness.audit_data.st_dataset`,
  as ``audit.py`` mines: no margin, only the positive's own text skipped).

Each is audited as a user would (`pairsieve.audits.stage.run` with the catalog, no truth column),
and its estimate (the mean ``p_same``), interval and cluster count are set beside the share of
negatives whose ground-truth product is the positive's.

    cd benchmarks && ../.venv/bin/python audit_estimate.py --data-root ../../shared/data \
        [--catalogs pricerunner,altosight] [--work /tmp/ps-audit-estimate]

Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import polars as pl
from harness.audit_data import NUM_NEGATIVES, WITHIN_SHOP_TRUTH, st_dataset, with_truth

from pairsieve import schemas as S
from pairsieve.audits import stage as audit
from pairsieve.config import PairsieveConfig
from pairsieve.datasets import clicklog
from pairsieve.datasets.benchmarks import benchmark
from pairsieve.labels.pairs import ROWS, audit_pairs
from pairsieve.report import stage as report
from pairsieve.vectors.embed import embed_texts, load_encoder, shared_cache

PLANTED = (0.10, 0.30)
NEIGHBOURS = 64  # nearest titles searched for the hard negatives of other products


def clicked_pairs(catalog: pl.DataFrame, clicks: pl.DataFrame) -> pl.DataFrame:
    """(anchor, positive, true_product_id): the log's distinct (query, clicked title)."""
    return (
        clicks.select(S.QUERY, S.LISTING_ID)
        .unique()
        .join(catalog.select(S.LISTING_ID, S.TITLE, S.TRUE_PRODUCT_ID), on=S.LISTING_ID)
        .select(
            pl.col(S.QUERY).alias(S.ANCHOR), pl.col(S.TITLE).alias(S.POSITIVE), S.TRUE_PRODUCT_ID
        )
        .unique([S.ANCHOR, S.POSITIVE])
        .sort(S.ANCHOR, S.POSITIVE)
    )


def hard_negatives(
    titles: pl.DataFrame, rows: pl.DataFrame, cfg: PairsieveConfig
) -> list[list[str]]:
    """Per row, its positive's ``NUM_NEGATIVES`` nearest titles of other products (cosine of
    the bundled encoder, exact search)."""
    import faiss

    encoder = load_encoder(cfg.embed, cfg.cache_dir)
    cache = shared_cache(cfg.cache_dir, encoder.model_key)
    texts = titles[S.TITLE].to_list()
    vectors, _ = embed_texts(texts, encoder, cache)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    position = {t: i for i, t in enumerate(texts)}
    product = titles[S.TRUE_PRODUCT_ID].to_list()
    queries = vectors[[position[t] for t in rows[S.POSITIVE].to_list()]]
    _, found = index.search(queries, NEIGHBOURS)
    out = []
    for own, hits in zip(rows[S.TRUE_PRODUCT_ID].to_list(), found.tolist(), strict=True):
        others = [texts[h] for h in hits if h >= 0 and product[h] != own]
        out.append(others[:NUM_NEGATIVES])
    return out


def planted(
    titles: pl.DataFrame, rows: pl.DataFrame, hard: list[list[str]], rate: float, seed: int
) -> pl.DataFrame:
    """The rows with ``NUM_NEGATIVES`` negatives each, ``rate`` of all negatives replaced by
    another title of the positive's product (at random among the rows that have one)."""
    rng = np.random.default_rng(seed)
    by_product = titles.group_by(S.TRUE_PRODUCT_ID).agg(pl.col(S.TITLE).sort())
    same = dict(
        zip(by_product[S.TRUE_PRODUCT_ID].to_list(), by_product[S.TITLE].to_list(), strict=True)
    )
    negatives = [list(h) for h in hard]
    positives, products = rows[S.POSITIVE].to_list(), rows[S.TRUE_PRODUCT_ID].to_list()
    slots = [
        (r, k)
        for r, (pos, prod) in enumerate(zip(positives, products, strict=True))
        if len(negatives[r]) == NUM_NEGATIVES and any(t != pos for t in same.get(prod, []))
        for k in range(NUM_NEGATIVES)
    ]
    total = NUM_NEGATIVES * sum(len(n) == NUM_NEGATIVES for n in negatives)
    chosen = rng.choice(len(slots), size=min(round(rate * total), len(slots)), replace=False)
    for slot in sorted(chosen.tolist()):
        r, k = slots[slot]
        copies = [t for t in same[products[r]] if t != positives[r]]
        negatives[r][k] = copies[rng.integers(len(copies))]
    keep = [len(n) == NUM_NEGATIVES for n in negatives]
    frame = rows.with_columns(pl.Series("_negs", negatives)).filter(pl.Series(keep))
    return frame.select(
        S.ANCHOR,
        S.POSITIVE,
        *(
            pl.col("_negs").list.get(i).alias(S.negative_column(i + 1))
            for i in range(NUM_NEGATIVES)
        ),
    )


def audit_one(cfg: PairsieveConfig, dataset: Path, catalog: Path, out: Path) -> dict:
    """The audit's figures beside the truth, and the mean p_same of true and of false pairs
    (over the audit's distinct pairs, each counted as often as the dataset holds it)."""
    started = time.perf_counter()
    audit.run(cfg, audit.Inputs(dataset, catalog), out)
    seconds = time.perf_counter() - started
    figures = report.load_report(out)["audit"]["figures"]
    pairs = with_truth(audit_pairs(out), catalog)
    rows, truth = pairs[ROWS].to_numpy(), pairs["label"].to_numpy()
    p = pairs[S.P_SAME].to_numpy()

    def mean_p(mask: np.ndarray) -> float:
        return float((p * rows)[mask].sum() / rows[mask].sum()) if mask.any() else 0.0

    return {
        "estimate": figures["false_negative_rate"],
        "interval": figures.get("false_negative_rate_ci"),
        "by_cluster": figures["false_negative_rate_by_cluster"],
        "truth": float((truth * rows).sum() / rows.sum()),
        "p_true": mean_p(truth),
        "p_false": mean_p(~truth),
        "negatives": figures["negatives"],
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--catalogs", default=",".join(WITHIN_SHOP_TRUTH))
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-audit-estimate"))
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    cfg = PairsieveConfig().with_(seed=args.seed)
    print(
        "| catalog | dataset | negatives | true rate | estimate (mean p_same) | 95% interval "
        "| error | by clusters | mean p_same: true pairs | other pairs | audit s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.catalogs.split(","):
        work = args.work / name
        work.mkdir(parents=True, exist_ok=True)
        catalog = benchmark(name).load(args.data_root)
        catalog_path = work / "catalog.parquet"
        catalog.write_parquet(catalog_path)
        clicks = clicklog.derive_clicks(catalog, seed=args.seed)
        clicks_path = work / "clicks.parquet"
        clicks.write_parquet(clicks_path)
        rows = clicked_pairs(catalog, clicks)
        titles = catalog.select(S.TITLE, S.TRUE_PRODUCT_ID).unique(S.TITLE).sort(S.TITLE)
        hard = hard_negatives(titles, rows, cfg)
        datasets = {}
        for rate in PLANTED:
            label = f"planted-{round(100 * rate)}"
            datasets[label] = work / f"{label}.parquet"
            planted(titles, rows, hard, rate, args.seed).write_parquet(datasets[label])
        datasets["st-mined"], _ = st_dataset(catalog_path, clicks_path, work / "st-mined.parquet")
        for label, path in datasets.items():
            found = audit_one(cfg, path, catalog_path, work / f"audit-{label}")
            lo, hi = found["interval"] or (float("nan"), float("nan"))
            print(
                f"| {name} | {label} | {found['negatives']:,} | {found['truth']:.3f} | "
                f"**{found['estimate']:.3f}** | {lo:.3f} – {hi:.3f} | "
                f"{found['estimate'] - found['truth']:+.3f} | {found['by_cluster']:.3f} | "
                f"{found['p_true']:.3f} | {found['p_false']:.3f} | {found['seconds']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
