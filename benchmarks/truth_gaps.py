"""What a two-shop catalog's truth says of the cross-shop pairs pairsieve merges.

A match-list truth (Walmart-Amazon's ``gt.csv``, Abt-Buy's mapping) names the record pairs that
are one product; every other record is scored as a product of its own. Where the list misses
matches, a right merge counts as an error, and pairwise precision measures the list as much as
the clustering. This script clusters the catalog with the defaults (truth hidden) and sorts
every predicted cross-shop pair by what the truth knows of its two records:

* ``true``: the truth matches them;
* ``a match of one record is in the cluster``: the truth matches one of them to another record
  of the same cluster (a shop that lists one product twice: only one copy is in the list);
* ``one record has no match``, ``neither record has a match``: the truth names no match for
  one or both records at all;
* ``both matched elsewhere``: each record's match lies outside the cluster.

Then it prints a seeded sample of the ``neither record has a match`` pairs, to be judged by eye:
the share of them that are one product by their titles is what the list misses.

    cd benchmarks && ../.venv/bin/python truth_gaps.py --data-root ../../shared/data \
        [--catalog walmart-amazon] [--sample 30] [--seed 3]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import stage as cluster
from pairsieve.cluster.neighbours import scratch_mapper
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS

KINDS = (
    "true",
    "a match of one record is in the cluster",
    "one record has no match",
    "neither record has a match",
    "both matched elsewhere",
)


def cross_shop_pairs(catalog: pl.DataFrame, predicted: np.ndarray) -> pl.DataFrame:
    """Every pair of listings from two shops with one predicted product: their titles, true
    products and whether the truth matches each to anything (a product in two shops)."""
    frame = catalog.select(S.LISTING_ID, S.TITLE, S.SELLER_ID, S.TRUE_PRODUCT_ID).with_columns(
        pl.Series("predicted", predicted),
        (pl.col(S.SELLER_ID).n_unique().over(S.TRUE_PRODUCT_ID) > 1).alias("matched"),
    )
    shops = sorted(frame[S.SELLER_ID].unique().to_list())
    if len(shops) != 2:
        raise SystemExit(f"need a two-shop catalog, found shops {shops}")
    left, right = (frame.filter(pl.col(S.SELLER_ID) == shop) for shop in shops)
    return left.join(right, on="predicted", suffix="_right")


def kind_of(pairs: pl.DataFrame) -> pl.DataFrame:
    """``pairs`` with the `KINDS` entry of each."""
    truth, other = pl.col(S.TRUE_PRODUCT_ID), pl.col(f"{S.TRUE_PRODUCT_ID}_right")
    mates_here = pairs.group_by("predicted").agg(
        truth.unique().alias("left_products"), other.unique().alias("right_products")
    )
    pairs = pairs.join(mates_here, on="predicted")
    left_mate = pl.col("matched") & truth.is_in(pl.col("right_products"))
    right_mate = pl.col("matched_right") & other.is_in(pl.col("left_products"))
    kind = (
        pl.when(truth == other)
        .then(pl.lit(KINDS[0]))
        .when(left_mate | right_mate)
        .then(pl.lit(KINDS[1]))
        .when(pl.col("matched") ^ pl.col("matched_right"))
        .then(pl.lit(KINDS[2]))
        .when(~pl.col("matched") & ~pl.col("matched_right"))
        .then(pl.lit(KINDS[3]))
        .otherwise(pl.lit(KINDS[4]))
    )
    return pairs.with_columns(kind.alias("kind")).drop("left_products", "right_products")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--catalog", default="walmart-amazon")
    parser.add_argument("--sample", type=int, default=30)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()

    catalog = BENCHMARKS[args.catalog].load(args.data_root)
    hidden = catalog.drop(S.TRUE_PRODUCT_ID, S.TRUE_PRODUCT_NAME, strict=False)
    with scratch_mapper() as mapper:
        result = cluster.cluster_listings(PairsieveConfig(), hidden, mapper)
    order = dict(zip(result.frame[S.LISTING_ID], result.listing_labels(), strict=True))
    predicted = np.asarray([order[x] for x in catalog[S.LISTING_ID]])
    pairs = kind_of(cross_shop_pairs(catalog, predicted))

    counts = Counter(pairs["kind"].to_list())
    print(f"{args.catalog}: {len(pairs):,} predicted cross-shop pairs\n")
    print("| what the truth knows of the pair | pairs | share |\n|---|---|---|")
    for kind in KINDS:
        print(f"| {kind} | {counts[kind]:,} | {counts[kind] / max(len(pairs), 1):.3f} |")

    unmatched = pairs.filter(pl.col("kind") == KINDS[3])
    sample = unmatched.sample(min(args.sample, len(unmatched)), seed=args.seed)
    print(f"\n{len(sample)} of the {len(unmatched):,} pairs whose records have no match:\n")
    for number, row in enumerate(sample.iter_rows(named=True), 1):
        print(f"{number:3d}. {row[S.TITLE]}\n     {row[f'{S.TITLE}_right']}")


if __name__ == "__main__":
    main()
