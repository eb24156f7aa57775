"""Which of a build's hard negatives the query itself rules out, and how often the rest are copies.

    .venv/bin/python benchmarks/query_ruling.py /tmp/ps-exp/pricerunner/build [BUILD ...]

For each build (`benchmarks/experiment.py`'s, with a truth column), the first kept negative of
every pair that scores inside the plain 5% margin, split by whether the query's own attributes
conflict with the negative's title (`mine.query_must_rule_out`'s test), with the share of each
part that is the positive's product by the truth. Run on builds made with the ruling off, it
says what the ruling would drop; on builds made with it on, the second row is empty.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.mine.filters import _attributes_of, query_rules_out

PLAIN_MARGIN = 0.05


def first_negatives(build: Path) -> pl.DataFrame:
    """The first kept negative of each pair."""
    kept = pl.read_parquet(build / "mine" / S.NEGATIVES_FILE)
    return (
        kept.sort(S.QUERY, S.POSITIVE_LISTING_ID, S.RANK)
        .group_by(S.QUERY, S.POSITIVE_LISTING_ID, maintain_order=True)
        .first()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", type=Path, nargs="+")
    args = parser.parse_args()
    print("| build | pairs | first negative inside the margin | not ruled out by the query "
          "| copies among those | copies among the ruled out |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for build in args.builds:
        listings = pl.read_parquet(build / "ingest" / S.LISTINGS_FILE)
        every = first_negatives(build)
        inside = (1 - PLAIN_MARGIN) * pl.col(S.POSITIVE_SCORE)
        first = every.filter(pl.col(S.SCORE) > inside)
        negatives = first[S.NEGATIVE_LISTING_ID]
        ruled = query_rules_out(first[S.QUERY], negatives, _attributes_of(listings, negatives))
        truth = dict(listings.select(S.LISTING_ID, S.TRUE_PRODUCT_ID).iter_rows())
        copy = pl.Series([truth[p] == truth[n] for p, n in first.select(
            S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID).iter_rows()])  # fmt: skip
        pairs = every.height
        loose, tight = copy.filter(pl.Series(~ruled)), copy.filter(pl.Series(ruled))
        print(f"| {build} | {pairs:,} | {first.height:,} | {loose.len():,} "
              f"({loose.len() / max(first.height, 1):.1%}) | {loose.mean() or 0:.2%} "
              f"| {tight.mean() or 0:.2%} |")  # fmt: skip


if __name__ == "__main__":
    main()
