"""Day-2 mining: keep the previous build's negatives of a query whose inputs did not change.

A query's mined rows depend on its positives, the listings it retrieved (their titles and
product ids) and the config. A query is *reused* (its kept and dropped rows copied from the
previous build) when its clicked listings are the same set, every listing among its positives
and previous candidates is still in the catalog with the same title, those listings are grouped
into products as before (ids may change: only the grouping decides the filter), the mine config
is unchanged, and it is not due for refresh; every other query is mined as in a full build.
Safety holds by construction: a reused negative is still a listing of another product than its
positive, as the grouping of the two did not change.

What a reused query misses is new listings: one that would now rank among its candidates enters
its negatives only when the query is mined again. With 2% new listings a new listing lands among
the candidates of most queries (the margin sends many queries hundreds of ranks deep), so exact
reuse would mine nearly everything again; instead staleness is bounded: each build re-mines the
queries whose hash falls in its slot of `mine.refresh_builds`, so no query's negatives are older
than that many builds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.stage import load_result

_ID = S.LISTING_ID


@dataclass(frozen=True)
class PreviousMining:
    """The previous build's mined rows and the inputs they were mined from."""

    kept: pl.DataFrame
    dropped: pl.DataFrame
    pairs: pl.DataFrame  # query, listing_id
    listings: pl.DataFrame  # listing_id, title, product_id

    @staticmethod
    def load(previous: Path, config_hash: str) -> PreviousMining | str:
        """The previous build's mining state, or why it cannot be reused (every query is then
        mined): a different mine config or missing files."""
        recorded = load_result(previous / "mine")
        if recorded is None or recorded.config_hash != config_hash:
            return "the previous build was mined with a different config"
        files = {
            "kept": previous / "mine" / S.NEGATIVES_FILE,
            "dropped": previous / "mine" / S.NEGATIVES_DROPPED_FILE,
            "clicks": previous / "ingest" / S.CLICKS_FILE,
            "listings": previous / "ingest" / S.LISTINGS_FILE,
            "products": previous / "cluster" / S.PRODUCTS_FILE,
        }
        missing = [str(path) for path in files.values() if not path.exists()]
        if missing:
            return f"the previous build lacks {', '.join(missing)}"
        listings = pl.read_parquet(files["listings"], columns=[_ID, S.TITLE]).join(
            pl.read_parquet(files["products"], columns=[_ID, S.PRODUCT_ID]), on=_ID, how="left"
        )
        return PreviousMining(
            pl.read_parquet(files["kept"]),
            pl.read_parquet(files["dropped"]),
            pl.read_parquet(files["clicks"], columns=[S.QUERY, _ID]).unique(),
            listings,
        )

    def reusable_queries(
        self,
        pairs: pl.DataFrame,
        listings: pl.DataFrame,
        products: pl.DataFrame,
        refresh: tuple[int, int],
    ) -> pl.Series:
        """Today's queries whose previous rows are still right (see module docstring).

        ``pairs``: today's distinct (query, listing_id); ``listings`` / ``products``: today's
        catalog and product ids; ``refresh``: (build number, `mine.refresh_builds`).
        """
        build_number, every = refresh
        today = listings.select(_ID, S.TITLE).join(
            products.select(_ID, S.PRODUCT_ID), on=_ID, how="left"
        )
        seen = pl.concat(
            [
                frame.select(S.QUERY, pl.col(column).alias(_ID))
                for frame, column in (
                    (self.kept, S.NEGATIVE_LISTING_ID),
                    (self.dropped, S.NEGATIVE_LISTING_ID),
                    (self.pairs, _ID),
                )
            ]
        ).unique()
        touched = _touched_queries(seen, self.listings, today)
        same_clicks = _clicked_sets(pairs).join(_clicked_sets(self.pairs), on=[S.QUERY, "_set"])
        candidates = same_clicks.filter(~pl.col(S.QUERY).is_in(touched.implode()))[S.QUERY]
        slot = build_number % every
        return pl.Series(
            S.QUERY, sorted(q for q in candidates.to_list() if refresh_slot(q, every) != slot)
        )

    def rows_of(self, queries: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The previous (kept, dropped) rows of ``queries``."""
        chosen = pl.col(S.QUERY).is_in(queries.implode())
        return self.kept.filter(chosen), self.dropped.filter(chosen)


def refresh_slot(query: str, every: int) -> int:
    """The build (modulo ``every``) in which ``query`` is mined again even when unchanged."""
    return int(S.stable_hash(query), 16) % every


def _touched_queries(seen: pl.DataFrame, before: pl.DataFrame, today: pl.DataFrame) -> pl.Series:
    """Queries with a listing (among ``seen``: query, listing_id) that left or changed title, or
    whose listings are grouped into products differently from before. Only the grouping matters
    to the filter (same product as a positive, one negative per product), so a product that
    merely changed id, or changes among listings a query never saw, leave it alone."""
    own = pl.col(_ID)  # an unclustered listing is its own product
    rows = seen.join(
        before.select(_ID, S.TITLE, pl.col(S.PRODUCT_ID).fill_null(own).alias("_old")),
        on=_ID,
        how="left",
    ).join(
        today.select(
            _ID, pl.col(S.TITLE).alias("_title"), pl.col(S.PRODUCT_ID).fill_null(own).alias("_new")
        ),
        on=_ID,
        how="left",
    )
    per_query = rows.group_by(S.QUERY).agg(
        (pl.col("_title").is_null() | (pl.col("_title") != pl.col(S.TITLE))).any().alias("_gone"),
        pl.col("_old").n_unique().alias("_old"),
        pl.col("_new").n_unique().alias("_new"),
        pl.struct("_old", "_new").n_unique().alias("_both"),
    )
    regrouped = (pl.col("_old") != pl.col("_both")) | (pl.col("_new") != pl.col("_both"))
    return per_query.filter(pl.col("_gone") | regrouped)[S.QUERY]


def _clicked_sets(pairs: pl.DataFrame) -> pl.DataFrame:
    """(query, _set): each query's clicked listings as one sorted string."""
    return pairs.group_by(S.QUERY).agg(pl.col(_ID).sort().str.join("\x1f").alias("_set"))
