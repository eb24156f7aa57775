"""What `pairsieve clean` does to sentence-transformers' own mined negatives, by the truth.

For each shared catalog a click log is derived (`datasets.clicklog.derive_clicks`, seeded), its
(query, clicked title) pairs are mined by sentence-transformers' `mine_hard_negatives` without a
margin (`harness.audit_data.st_dataset`: n-tuple, five negatives a row, only the positive's own
text skipped), and the result is cleaned as a user would clean it
(`pairsieve.cleaning.stage.run` with the catalog; the truth column is never read). Before and
after: the share of negatives whose ground-truth product is the positive's, the rows kept, and
whether the columns are the same plus `label`.

    cd benchmarks && ../.venv/bin/python clean.py --data-root ../../shared/data \
        [--catalogs pricerunner,altosight] [--work /tmp/ps-clean]

Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import polars as pl
from harness.audit_data import negative_copy_share, st_dataset, truth_of_titles

from pairsieve import schemas as S
from pairsieve.cleaning import stage as clean
from pairsieve.config import PairsieveConfig
from pairsieve.datasets import clicklog
from pairsieve.datasets.benchmarks import BENCHMARKS, benchmark
from pairsieve.orchestration.stages import stage_config


def one_catalog(name: str, args: argparse.Namespace) -> dict:
    work = args.work / name
    work.mkdir(parents=True, exist_ok=True)
    catalog = benchmark(name).load(args.data_root)
    catalog_path, clicks_path = work / "catalog.parquet", work / "clicks.parquet"
    catalog.write_parquet(catalog_path)
    clicklog.derive_clicks(catalog, seed=args.seed).write_parquet(clicks_path)
    mined, _ = st_dataset(catalog_path, clicks_path, work / "st-mined.parquet")
    cfg = stage_config(PairsieveConfig().with_(seed=args.seed), "clean")
    started = time.perf_counter()
    result = clean.run(cfg, clean.Inputs(mined, catalog_path), work / "clean")
    seconds = time.perf_counter() - started
    before = pl.read_parquet(mined)
    after = pl.read_parquet(work / "clean" / clean.DATASET_DIR / mined.name)
    truth = truth_of_titles(catalog)
    share_before, negatives = negative_copy_share(before, truth)
    share_after, _ = negative_copy_share(after, truth)
    figures = result.details
    return {
        "catalog": name,
        "rows": before.height,
        "negatives": negatives,
        "copies_before": share_before,
        "copies_after": share_after,
        "rows_kept": after.height / before.height,
        "replaced": figures["negatives_replaced"] / negatives,
        "dropped": figures["negatives_dropped"],
        "columns_kept": after.columns == [*before.columns, S.LABEL],
        "estimate_before": figures["false_negative_rate_before"],
        "estimate_after": figures["false_negative_rate_after"],
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--catalogs", default=",".join(BENCHMARKS))
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-clean"))
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    print(
        "| catalog | rows | negatives | copies before (truth) | copies after (truth) | rows kept "
        "| negatives replaced | negatives dropped | columns + label | audit estimate before → "
        "after | clean s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.catalogs.split(","):
        found = one_catalog(name, args)
        print(
            f"| {name} | {found['rows']:,} | {found['negatives']:,} | "
            f"{found['copies_before']:.2%} | **{found['copies_after']:.2%}** | "
            f"{found['rows_kept']:.1%} | {found['replaced']:.1%} | {found['dropped']:,} | "
            f"{'yes' if found['columns_kept'] else 'no'} | {found['estimate_before']:.3f} → "
            f"{found['estimate_after']:.3f} | {found['seconds']:.0f} |",
            flush=True,
        )
        (args.work / f"{name}.json").write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
