"""Day-2 clustering: reuse the previous build's judged pairs between listings that did not change.

Candidate generation and judging are most of clustering's work, and a daily build changes a
few percent of the catalog. A node (one distinct title) is *settled* when its representative
listing was in the previous build with the same title and brand and no listing that left or
changed shared its title: then every previous pair between two settled nodes is still the pair
a full build would judge, and is reused as it was recorded (`pairs.parquet`, with its
`link_score`). Only pairs touching an unsettled node (new titles, new representatives) are
generated, by the same four signals over the whole catalog, and judged. Average linkage then
runs over all pairs as in a full build, so a new copy can join an old product and two old
products can merge through it.

What differs from a full build (measured in benchmarks/RESULTS.md, "incremental"): a settled
pair keeps the score of the build that judged it (the judge's word weights come from that
build's catalog); two settled nodes are never paired anew (a code block or LSH bucket that
shrank below `cluster.max_bucket` pairs only its unsettled members); and an old node gains a new
node as embedding neighbour only when the new node finds the old one among its own nearest
neighbours. Above `cluster.knn_exact_max` titles the kNN index is IVF: it is built on the previous
build's centroids while they fit (`knn.centroids_fit`), sparing their training, and each
unchanged title goes to the list it went to then (`knn.IvfLayout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster.judge import INFORMATIVE
from pairsieve.core import io
from pairsieve.core import partitions as parts
from pairsieve.core.contract import load_result
from pairsieve.core.layout import RunLayout
from pairsieve.core.partitions import Span
from pairsieve.core.plans import Plan
from pairsieve.text import attributes as text

if TYPE_CHECKING:
    from pairsieve.core.partitions import Mapper
    from pairsieve.vectors import knn

_NODE = "_node"
STEP = "reusing the previous build's pairs"
REUSE_ROWS = 1 << 22  # previous pairs a task maps onto today's titles (~0.3 GB of rows at most)
# pairs.parquet columns a reused pair needs; written by this version of the cluster stage.
PAIR_COLUMNS = (
    S.LISTING_A,
    S.LISTING_B,
    S.SIGNAL,
    S.JACCARD,
    S.COSINE,
    S.LINK_SCORE,
    S.ACCEPTED,
    S.VETO_REASON,
)


def _identity(listings: pl.DataFrame) -> pl.DataFrame:
    """(listing_id, title, brand): what a listing's pairs were computed from, brand normalised
    as `cluster.nodes.prepare` has it."""
    return listings.select(
        pl.col(S.LISTING_ID).cast(pl.String), S.TITLE, text.brand_expr(listings.columns)
    )


@dataclass(frozen=True)
class PreviousClustering:
    """The previous build's listings, read from its folder, and where its scored pairs are."""

    listings: pl.DataFrame  # listing_id, title, brand (when the catalog has one)
    pairs: Path  # its pairs.parquet (PAIR_COLUMNS are read), a span of rows at a time
    ivf: knn.IvfLayout | None = None  # its kNN index's IVF layout, if it had one

    @staticmethod
    def load(previous: Path, config_hash: str) -> PreviousClustering | str:
        """The previous build's clustering state, or why it cannot be reused (then the stage
        clusters from scratch): a different cluster config, or files from an older version."""
        layout = RunLayout(previous)
        recorded = load_result(layout.stage_dir("cluster"))
        if recorded is None or recorded.config_hash != config_hash:
            return "the previous build was clustered with a different config"
        pairs_path, listings_path = layout.pairs, layout.listings
        if not (pairs_path.exists() and listings_path.exists()):
            return "the previous build lacks ingest/listings.parquet or cluster/pairs.parquet"
        if S.LINK_SCORE not in pl.read_parquet_schema(pairs_path):
            return "the previous build's pairs.parquet has no link_score (older version)"
        from pairsieve.vectors import knn

        present = pl.read_parquet_schema(listings_path)
        columns = [c for c in (S.LISTING_ID, S.TITLE, S.BRAND) if c in present]
        return PreviousClustering(
            pl.read_parquet(listings_path, columns=columns),
            pairs_path,
            knn.IvfLayout.read(layout.stage_dir("cluster")),
        )

    def settled(self, frame: pl.DataFrame, nodes: pl.DataFrame) -> np.ndarray:
        """(n_nodes,) bool: nodes whose previous pairs are still valid (see module docstring).

        ``frame`` and ``nodes`` are `nodes.prepare` and `nodes.node_table` of today's
        catalog (``frame`` keeps the raw title and the normalised brand).
        """
        before = _identity(self.listings)
        today = frame.select(S.LISTING_ID, S.TITLE, S.BRAND)
        same = [S.LISTING_ID, S.TITLE, S.BRAND]
        kept = today.join(before, on=same, how="semi")[S.LISTING_ID]
        rep_kept = nodes[S.LISTING_ID].is_in(kept.implode()).to_numpy()
        gone = before.join(today, on=same, how="anti")
        return rep_kept & ~self._shares_title_with(gone, nodes)

    @staticmethod
    def _shares_title_with(gone: pl.DataFrame, nodes: pl.DataFrame) -> np.ndarray:
        """(n_nodes,) bool: informative nodes whose normalised title and brand a listing that
        left or changed had (the node lost a member its previous pairs may have come from)."""
        keys = gone.select(text.normalize_expr(pl.col(S.TITLE)).alias(S.TITLE_NORM), S.BRAND)
        hit = nodes.join(keys.unique(), on=[S.TITLE_NORM, S.BRAND], how="semi")
        hit = hit.filter(pl.col(INFORMATIVE))[_NODE].to_numpy()
        out = np.zeros(len(nodes), dtype=bool)
        out[hit] = True
        return out

    def pairs_between(
        self, nodes: pl.DataFrame, settled: np.ndarray, cfg: Any, mapper: Mapper
    ) -> pl.LazyFrame:
        """The previous pairs between two settled nodes, as scored node pairs (a < b) with the
        columns `cluster.judge.judge` gives, in the previous file's order. The previous pairs
        are mapped a span of ``REUSE_ROWS`` rows at a time on ``mapper``'s runner, so no
        process holds all of them (3.2e7 at 10^6 listings)."""
        reps = nodes[S.LISTING_ID].filter(pl.Series(settled))
        plan = SettledTitles(str(self.pairs), reps, np.flatnonzero(settled).astype(np.int64))
        folder = plan.write(mapper.folder / "reuse-plan")
        rows = pl.scan_parquet(self.pairs).select(pl.len()).collect().item()
        files = mapper.run(between_span, folder, parts.spans(rows, REUSE_ROWS), cfg, STEP)
        return pl.scan_parquet(files)


@dataclass(frozen=True)
class SettledTitles(Plan):
    """What every span of the previous pairs is mapped with: the previous build's pairs file,
    and today's settled titles as their representative listing ids and node numbers."""

    pairs: str
    reps: pl.Series
    node: np.ndarray


def between(plan: SettledTitles, rows: pl.DataFrame) -> pl.DataFrame:
    """The ``rows`` of the previous pairs (PAIR_COLUMNS) whose two listings represent two
    distinct settled titles, as node pairs (a < b) with their recorded judgement."""
    at_a = positions(rows[S.LISTING_A], plan.reps)
    at_b = positions(rows[S.LISTING_B], plan.reps)
    keep = (at_a >= 0) & (at_b >= 0) & (at_a != at_b)
    a, b = plan.node[at_a[keep]], plan.node[at_b[keep]]
    return rows.filter(pl.Series(keep)).select(
        pl.Series("a", np.minimum(a, b)),
        pl.Series("b", np.maximum(a, b)),
        S.SIGNAL,
        S.JACCARD,
        S.COSINE,
        pl.col(S.LINK_SCORE).alias("score"),
        S.ACCEPTED,
        S.VETO_REASON,
    )


def between_span(plan: str, span: Span, cfg: Any) -> str:
    """A mapped span: `between` of the previous pairs at rows ``span``, into a file beside the
    plan folder named by the span (a retried span writes the same file again)."""
    titles = parts.held(plan, SettledTitles.read)
    rows = (
        pl.scan_parquet(titles.pairs)
        .select(list(PAIR_COLUMNS))
        .slice(span[0], span[1] - span[0])
        .collect()
    )
    path = Path(plan).parent / f"reused-{span[0]:010d}.parquet"
    return str(io.write_parquet(between(titles, rows), path))


def positions(values: pl.Series, table: pl.Series) -> np.ndarray:
    """(n,) int64 index of each of ``values`` in ``table`` (distinct strings), -1 if absent.

    Joins on two independent 64-bit hashes of each string rather than on the strings: mapping
    33 M previous pairs' listing ids took 27 s by string joins. Two distinct strings share both
    hashes with odds of 2^-128 (the embedding cache trusts one 64-bit key per text)."""

    def keys(strings: pl.Series) -> pl.DataFrame:
        return pl.DataFrame({"_h1": strings.hash(seed=1), "_h2": strings.hash(seed=2)})

    lookup = keys(table).with_row_index("_i")
    hits = keys(values).join(lookup, on=["_h1", "_h2"], how="left", maintain_order="left")
    return hits["_i"].fill_null(-1).to_numpy().astype(np.int64)


def touching(pairs: np.ndarray, unsettled: np.ndarray | None) -> np.ndarray:
    """The (m, 2) node pairs with at least one unsettled end (all of them when None)."""
    if unsettled is None:
        return pairs
    return pairs[unsettled[pairs[:, 0]] | unsettled[pairs[:, 1]]]
