"""Day-2 mining: keep the previous build's negatives of a query whose inputs did not change.

A query is *reused* (its kept and dropped rows copied from the previous build) when its
clicked listings are the same set, every listing its kept rows rest on (its positives and kept
negatives) is still in the catalog with the same title, those listings are grouped into products
as before (ids may change: only the grouping matters), the mine config is unchanged, and it is
not due for refresh. A query is *refiltered* when those listings are unchanged and either it
only gained clicks or its products were regrouped: its previous candidates (the search's
result, which does not depend on products and, below the ceiling, not on the clicks) are
filtered again against today's positives and products (`mine.refilter.refilter`). Every other
query is mined as in a full build. Safety holds by construction: a reused negative is still of
another product than its positive, the negatives of a pair still come from distinct products,
and a refiltered query passes today's filters.

A listing removed or retitled that a query only retrieved and dropped is *forgotten*
(`PreviousMining.forgetting`): its rows leave the query's previous rows, as if it had never been
retrieved, and a retitled one is a new listing the query has not seen (below). No kept row
rested on it. Sending such queries to mining instead would mine most of them: at 10^6 listings
the 1% of titles a day rewords sit among the dropped candidates of 37% of the queries, and
among the positives or kept negatives of 7%.

Mining deepens a query's search only while a pair is short of negatives, until rank
`mine.range_max`; so a query left short had its search *exhausted*: its candidates are its head
and every listing at or below its ceiling down to that rank. Filtering them again gives what
mining the previous catalog would give whenever mining would search as deep: when the query is
still short (refiltered from the candidates at or below today's ceiling, which a new weaker
click may lower), or when it is no longer short and its ceiling did not drop. A query whose
search was not exhausted is refiltered only when it is not short and its ceiling did not drop
(mining would look deeper otherwise).

What a reused or refiltered query does not see is change elsewhere: a new listing that would
now rank among its candidates, or (reused) a dropped candidate whose product changed (its reason
in `negatives_dropped.parquet` is the one it was dropped for). Reusing only queries whose whole
candidate list is untouched would mine nearly everything again: with 2% new listings a new
listing lands among the candidates of over 90% of queries (the margin sends most queries
hundreds of ranks deep), and each of 200k listings' queries sees ~230 listings of ~50 products,
so the 3% of products a day's clustering regroups touch a third of the queries. Staleness is
bounded instead: each build re-mines the queries whose hash falls in its slot of
`mine.refresh_builds`, so no query's rows are older than that many builds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from pairsieve import schemas as S
from pairsieve.core.contract import load_result
from pairsieve.core.facts import MineFacts
from pairsieve.core.hashing import hex_digest
from pairsieve.core.layout import RunLayout
from pairsieve.mine.filters import short_queries
from pairsieve.mine.judgement import at_density

if TYPE_CHECKING:
    from pairsieve.vectors import knn

_ID = S.LISTING_ID


@dataclass(frozen=True)
class PreviousMining:
    """The previous build's mined rows and the inputs they were mined from. Its dropped rows
    (tens of millions at 10^6 listings) are read lazily: only the rows of the queries a step
    needs, and the reused ones streamed to the new file (`mine.run`)."""

    kept: pl.DataFrame  # with p_copy (`kept_rows`)
    dropped: pl.LazyFrame | pl.DataFrame
    pairs: pl.DataFrame  # query, listing_id
    listings: pl.DataFrame  # listing_id, title, product_id
    ivf: knn.IvfLayout | None = None  # its index's IVF layout, if it had one
    density: float | None = None  # the copy density its kept rows were judged at

    @staticmethod
    def load(previous: Path, config_hash: str) -> PreviousMining | str:
        """The previous build's mining state, or why it cannot be reused (every query is then
        mined): a different mine config or missing files."""
        layout = RunLayout(previous)
        recorded = load_result(layout.stage_dir("mine"))
        if recorded is None or recorded.config_hash != config_hash:
            return "the previous build was mined with a different config"
        files = {
            "kept": layout.negatives,
            "dropped": layout.negatives_dropped,
            "clicks": layout.clicks,
            "listings": layout.listings,
            "products": layout.products,
        }
        if "judgement" in recorded.outputs:
            files["judgement"] = layout.negatives_judgement
        missing = [str(path) for path in files.values() if not path.exists()]
        if missing:
            return f"the previous build lacks {', '.join(missing)}"
        from pairsieve.vectors import knn

        return PreviousMining(
            kept_rows(layout.stage_dir("mine")),
            pl.scan_parquet(files["dropped"]),
            pl.read_parquet(files["clicks"], columns=[S.QUERY, _ID]).unique(),
            titles_and_products(
                pl.read_parquet(files["listings"], columns=[_ID, S.TITLE]),
                pl.read_parquet(files["products"], columns=[_ID, S.PRODUCT_ID]),
            ),
            knn.IvfLayout.read(layout.stage_dir("mine")),
            MineFacts.of(recorded).copy_density,
        )

    def judged_at(self, density: float | None) -> PreviousMining:
        """This state with its kept rows' p_copy as the judgement gives it at today's copy
        ``density`` (`judgement.at_density`), as a full build would write it."""
        if self.density is None or density is None or self.density == density:
            return self
        p_copy = at_density(self.kept[S.P_COPY].to_numpy(), self.density, density)
        shifted = pl.Series(S.P_COPY, p_copy, dtype=pl.Float64).fill_nan(None)
        return replace(self, kept=self.kept.with_columns(shifted), density=density)

    def plan(
        self,
        pairs: pl.DataFrame,
        listings: pl.DataFrame,
        products: pl.DataFrame,
        refresh: tuple[int, int],
    ) -> ReusePlan:
        """What the previous build can do for each of today's queries (module docstring).

        ``pairs``: today's distinct (query, listing_id); ``listings`` / ``products``: today's
        catalog and product ids; ``refresh``: (build number, `mine.refresh_builds`).
        """
        build_number, every = refresh
        today = titles_and_products(listings, products)
        deciding = pl.concat(  # the listings the kept rows rest on: positives, kept negatives
            [
                self.kept.select(S.QUERY, pl.col(S.NEGATIVE_LISTING_ID).alias(_ID)),
                self.pairs.select(S.QUERY, _ID),
            ]
        )
        gone = self.listings.join(today, on=[_ID, S.TITLE], how="anti")[_ID]
        lost = deciding.filter(pl.col(_ID).is_in(gone.implode()))[S.QUERY]
        regrouped = _regrouped_queries(deciding, self.listings, today)
        same_clicks = _clicked_sets(pairs).join(_clicked_sets(self.pairs), on=[S.QUERY, "_set"])
        changed = pl.concat([lost, regrouped]).implode()  # rows no longer right
        slot = build_number % every

        def not_due(queries: pl.Series) -> pl.Series:
            return pl.Series(
                S.QUERY, sorted(q for q in queries.to_list() if refresh_slot(q, every) != slot)
            )

        stayed = same_clicks[S.QUERY]
        regrouped_only = stayed.filter(stayed.is_in(regrouped.implode()))
        refilter = pl.concat([_gained_clicks(pairs, self.pairs), regrouped_only])
        return ReusePlan(
            not_due(stayed.filter(~stayed.is_in(changed))),
            not_due(refilter.filter(~refilter.is_in(lost.implode()))),
            gone,
        )

    def forgetting(self, gone: pl.Series) -> PreviousMining:
        """This state without the dropped rows of the listings ``gone`` (removed or retitled
        since), which reused and refiltered queries then never retrieved (module docstring)."""
        forgotten = ~pl.col(S.NEGATIVE_LISTING_ID).is_in(gone.implode())
        return replace(self, dropped=self.dropped.lazy().filter(forgotten))

    def candidates_of(self, queries: pl.Series) -> pl.DataFrame:
        """(query, negative_listing_id, score, rank): the listings the previous build retrieved
        for ``queries`` (each pair of a query has a row for every one of them)."""
        columns = [S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK]
        kept, dropped = self.rows_of(queries)
        both = pl.concat([kept.select(columns), dropped.select(columns)])
        return both.unique([S.QUERY, S.NEGATIVE_LISTING_ID]).sort(S.QUERY, S.RANK)

    def exhausted(self, queries: pl.Series, num_negatives: int) -> pl.Series:
        """Those of ``queries`` left short in the previous build: mining stops deepening a short
        query only at rank `mine.range_max`, so their search was exhausted (module docstring)."""
        chosen = pl.col(S.QUERY).is_in(queries.implode())
        pairs = self.pairs.filter(chosen).select(S.QUERY, pl.col(_ID).alias(S.POSITIVE_LISTING_ID))
        return short_queries(pairs, self.kept.filter(chosen), num_negatives)

    def rows_of(self, queries: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The previous (kept, dropped) rows of ``queries``."""
        kept, dropped = self.lazy_rows_of(queries)
        return kept.collect(), dropped.collect()

    def lazy_rows_of(self, queries: pl.Series) -> tuple[pl.LazyFrame, pl.LazyFrame]:
        """`rows_of`, not yet read."""
        chosen = pl.col(S.QUERY).is_in(queries.implode())
        return self.kept.lazy().filter(chosen), self.dropped.lazy().filter(chosen)


@dataclass(frozen=True)
class ReusePlan:
    """Today's queries the previous build serves: ``reused`` keep their rows as they are;
    ``refiltered`` only gained clicks or were regrouped, so their previous candidates are
    filtered again against today's positives and products (`mine.refilter.refilter` leaves to mining
    those that mining would search deeper). ``gone``: the listings removed or retitled since,
    whose rows those queries forget (`PreviousMining.forgetting`)."""

    reused: pl.Series
    refiltered: pl.Series
    gone: pl.Series


def kept_rows(mine_dir: Path) -> pl.DataFrame:
    """A mined build's kept negatives (`negatives.parquet` in ``mine_dir``) with the p_copy its
    judgement file gives them, null where it has none (or where there is no such file: the
    margin was not judged)."""
    kept = pl.read_parquet(mine_dir / S.NEGATIVES_FILE)
    judgement = mine_dir / S.NEGATIVES_JUDGEMENT_FILE
    if not judgement.is_file():
        return kept.with_columns(pl.lit(None, pl.Float64).alias(S.P_COPY))
    keys = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID]
    return kept.join(pl.read_parquet(judgement), on=keys, how="left", maintain_order="left")


def titles_and_products(listings: pl.DataFrame, products: pl.DataFrame) -> pl.DataFrame:
    """(listing_id, title, product_id) of a build's catalog; product_id null if unclustered."""
    return listings.select(_ID, S.TITLE).join(
        products.select(_ID, S.PRODUCT_ID), on=_ID, how="left"
    )


def refresh_slot(query: str, every: int) -> int:
    """The build (modulo ``every``) in which ``query`` is mined again even when unchanged."""
    return int(hex_digest(query), 16) % every


def _regrouped_queries(
    deciding: pl.DataFrame, before: pl.DataFrame, today: pl.DataFrame
) -> pl.Series:
    """Queries whose listings in ``deciding`` (query, listing_id) are grouped into products
    differently from before: a kept negative joined a positive's product, or two negatives now
    share one. Only the grouping matters, so a product that merely changed id leaves a query
    alone."""
    own = pl.col(_ID)  # an unclustered listing is its own product
    rows = deciding.join(
        before.select(_ID, pl.col(S.PRODUCT_ID).fill_null(own).alias("_old")), on=_ID, how="left"
    ).join(today.select(_ID, pl.col(S.PRODUCT_ID).fill_null(own).alias("_new")), on=_ID, how="left")
    per_query = rows.group_by(S.QUERY).agg(
        pl.col("_old").n_unique(),
        pl.col("_new").n_unique(),
        pl.struct("_old", "_new").n_unique().alias("_both"),
    )
    regrouped = (pl.col("_old") != pl.col("_both")) | (pl.col("_new") != pl.col("_both"))
    return per_query.filter(regrouped)[S.QUERY]


def _gained_clicks(today: pl.DataFrame, before: pl.DataFrame) -> pl.Series:
    """Queries that kept every listing clicked before and gained more (both (query, listing))."""
    had = before.group_by(S.QUERY).len("_had")
    kept = today.join(before, on=[S.QUERY, _ID]).group_by(S.QUERY).len("_kept")
    now = today.group_by(S.QUERY).len("_now")
    counts = now.join(had, on=S.QUERY).join(kept, on=S.QUERY)
    gained = (pl.col("_kept") == pl.col("_had")) & (pl.col("_now") > pl.col("_had"))
    return counts.filter(gained)[S.QUERY]


def _clicked_sets(pairs: pl.DataFrame) -> pl.DataFrame:
    """(query, _set): each query's clicked listings as one sorted string."""
    return pairs.group_by(S.QUERY).agg(pl.col(_ID).sort().str.join("\x1f").alias("_set"))
