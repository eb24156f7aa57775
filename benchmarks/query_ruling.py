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
from pairsieve.mine.filters import _query_rules_out
from pairsieve.text import attributes as text

PLAIN_MARGIN = 0.05


def first_inside(build: Path) -> tuple[pl.DataFrame, dict[str, str], dict[str, str]]:
    """The first kept negative of each pair inside the plain margin, and the titles and truth."""
    kept = pl.read_parquet(build / "mine" / S.NEGATIVES_FILE)
    listings = pl.read_parquet(build / "ingest" / S.LISTINGS_FILE)
    first = (
        kept.sort(S.QUERY, S.POSITIVE_LISTING_ID, S.RANK)
        .group_by(S.QUERY, S.POSITIVE_LISTING_ID, maintain_order=True)
        .first()
        .filter(pl.col(S.SCORE) > (1 - PLAIN_MARGIN) * pl.col(S.POSITIVE_SCORE))
    )
    title = dict(listings.select(S.LISTING_ID, S.TITLE_NORM).iter_rows())
    truth = dict(listings.select(S.LISTING_ID, S.TRUE_PRODUCT_ID).iter_rows())
    return first, title, truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", type=Path, nargs="+")
    args = parser.parse_args()
    print("| build | pairs | first negative inside the margin | not ruled out by the query "
          "| copies among those | copies among the ruled out |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for build in args.builds:
        first, title, truth = first_inside(build)
        negatives = first[S.NEGATIVE_LISTING_ID]
        attributes = {k: text.extract_attributes(title.get(k) or "") for k in negatives.unique()}
        ruled = _query_rules_out(first[S.QUERY], negatives, attributes)
        copy = pl.Series([truth[p] == truth[n] for p, n in first.select(
            S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID).iter_rows()])  # fmt: skip
        pairs = (
            pl.read_parquet(build / "mine" / S.NEGATIVES_FILE)
            .select(S.QUERY, S.POSITIVE_LISTING_ID)
            .n_unique()
        )
        loose, tight = copy.filter(pl.Series(~ruled)), copy.filter(pl.Series(ruled))
        print(f"| {build} | {pairs:,} | {first.height:,} | {loose.len():,} "
              f"({loose.len() / max(first.height, 1):.1%}) | {loose.mean() or 0:.2%} "
              f"| {tight.mean() or 0:.2%} |")  # fmt: skip


if __name__ == "__main__":
    main()
