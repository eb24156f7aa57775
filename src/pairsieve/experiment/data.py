"""What an experiment reads from a build: the corpus, the training rows and the held-out queries.

Relevance is product-level: a held-out query is answered by every listing of the product it
clicked, not only by the listing it clicked. The product of a listing comes from a ground-truth
column of the catalog when the build kept one (`ingest.truth_column`), otherwise from pairsieve's
own product ids, which the results then say.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.core.hashing import label_int
from pairsieve.core.layout import RunLayout
from pairsieve.errors import PairsieveError

RELEVANT = "relevant_product"  # the product key a listing answers for (truth or pairsieve's)


@dataclass(frozen=True)
class ExperimentData:
    """The inputs every arm shares.

    `corpus`: listing_id, title, relevant_product (str), one row per catalog listing.
    `train`: the build's train rows (anchor, positive, negative_1..k, label) with their
    positive_listing_id and negative_listing_ids, in shard order.
    `queries`: query (text), relevant_product, one row per (held-out query, clicked product).
    `relevance`: where relevant_product came from, in words.
    """

    corpus: pl.DataFrame
    train: pl.DataFrame
    queries: pl.DataFrame
    relevance: str
    truth_column: str | None

    def labels_by(self, product_of_listing: pl.DataFrame) -> pl.Series:
        """The train rows' label column recomputed from another listing -> product map
        (listing_id, relevant_product): the oracle's ids instead of pairsieve's. A listing
        without a product is a product of its own."""
        products = dict(product_of_listing.iter_rows())
        rows = zip(
            self.train[S.POSITIVE_LISTING_ID], self.train[S.NEGATIVE_LISTING_IDS], strict=True
        )
        labels = [
            [label_int(str(products.get(lid) or f"\0{lid}")) for lid in (positive, *negatives)]
            for positive, negatives in rows
        ]
        return pl.Series(S.LABEL, labels, dtype=pl.List(pl.Int64))


def _split_files(layout: RunLayout, split: str) -> tuple[list[Path], list[Path]]:
    """(data files, meta files) of a split, as the manifest lists them."""
    if not layout.manifest.exists():
        raise PairsieveError(
            "not_a_build",
            "no shards manifest: --run must be a finished build folder",
            file=str(layout.manifest),
        )
    entries = json.loads(layout.manifest.read_text())["files"].get(split, [])
    data = [layout.shards / e["name"] for e in entries if not e["meta"]]
    meta = [layout.shards / e["name"] for e in entries if e["meta"]]
    return data, meta


def _rows(layout: RunLayout, split: str) -> pl.DataFrame:
    """A split's data and meta columns side by side (the files are row-aligned)."""
    data, meta = _split_files(layout, split)
    if not data:
        return pl.DataFrame()
    frame = pl.concat([pl.read_parquet(f) for f in data], how="vertical")
    info = pl.concat([pl.read_parquet(f) for f in meta], how="vertical")
    return pl.concat(
        [frame, info.select(S.QUERY_ID, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_IDS)],
        how="horizontal",
    )


def _corpus(layout: RunLayout, truth_column: str | None) -> tuple[pl.DataFrame, str]:
    listings = pl.read_parquet(layout.listings)
    if truth_column:
        if truth_column not in listings.columns:
            raise PairsieveError(
                "missing_column",
                f"the build's listings have no {truth_column!r}; build with "
                f'--set ingest.truth_column="{truth_column}"',
                file=str(layout.listings),
                column=truth_column,
            )
        relevant = listings.select(S.LISTING_ID, pl.col(truth_column).cast(pl.String))
        source = f"ground truth ({truth_column})"
    else:
        products = pl.read_parquet(layout.products, columns=[S.LISTING_ID, S.PRODUCT_ID])
        relevant = products.select(S.LISTING_ID, pl.col(S.PRODUCT_ID).cast(pl.String))
        source = "pairsieve's product ids (no ground truth given: --truth-column)"
    corpus = listings.select(S.LISTING_ID, S.TITLE).join(
        relevant.rename({relevant.columns[1]: RELEVANT}), on=S.LISTING_ID, how="left"
    )
    return corpus.sort(S.LISTING_ID), source


def load(run_dir: Path, truth_column: str | None = None) -> ExperimentData:
    """The experiment's inputs from a finished build folder.

    Raises:
        PairsieveError: not a build, no held-out split (build with shards.eval_fraction > 0),
            no train rows, or the truth column missing from the build's listings.
    """
    layout = RunLayout(run_dir)
    train = _rows(layout, "train")
    held_out = _rows(layout, "eval")
    if held_out.is_empty():
        raise PairsieveError(
            "no_eval_split",
            "the build has no held-out products to measure on; rebuild with "
            "--set shards.eval_fraction=0.2",
            file=str(layout.manifest),
            knob="shards.eval_fraction",
        )
    if train.is_empty():
        raise PairsieveError(
            "nothing_to_train", "the build has no train rows", file=str(layout.manifest)
        )
    corpus, source = _corpus(layout, truth_column)
    queries = (
        held_out.select(S.ANCHOR, S.POSITIVE_LISTING_ID)
        .join(
            corpus.select(S.LISTING_ID, RELEVANT),
            left_on=S.POSITIVE_LISTING_ID,
            right_on=S.LISTING_ID,
        )
        .select(pl.col(S.ANCHOR).alias(S.QUERY), RELEVANT)
        .unique()
        .sort(S.QUERY, RELEVANT)
    )
    return ExperimentData(corpus, train, queries, source, truth_column)
