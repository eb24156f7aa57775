"""Listings -> product ids: candidates, judging with vetoes, clustering without chaining.

Measured on PriceRunner: connected components over any single similarity signal score
pairwise F1 0.001-0.10, because one bridge pair chains "iPhone 8 64GB" to "iPhone 8 256GB" to
"iPhone 8 Plus", and titles such as "washing machine" glue unrelated products. So:

1. Listings with the same normalised title form one *node* (unless the title is
   low-information, see `text.Attributes.informative`; those stay single listings).
2. Candidate node pairs come from four signals: exact title, MinHash LSH over shingles, a shared
   model-code core ("ue55nu8000" ~ "ue55nu8000txxu" ~ "55nu8000", blocked so very common codes
   are skipped), and faiss kNN over sentence embeddings of the raw titles.
3. Each candidate is scored (word Jaccard, cosine) and vetoed when extracted attributes conflict
   (model code, capacity/size, generation, variant word, number); the reason is recorded. An
   unvetoed pair is accepted by the learned judge (`pair_model`: a logistic regression over
   pair features, shipped as coefficients), whose probability is the pair's linkage score.
4. Accepted pairs are merged by constrained average linkage (`agglomerate`): two clusters merge
   only when the mean score over *all* their cross pairs reaches `link_threshold` and no cross
   pair is vetoed, in descending linkage order. A single bridge pair cannot chain two products.
   Clusters never merge across components of the accepted graph, so a build links groups of
   components as separate tasks (`link_groups`).
5. A product id is ``"p" + hex_digest(smallest member listing_id)``: a function of the members
   only, so shuffled input yields byte-identical output.

Measured with the defaults (benchmarks/RESULTS.md, "cluster"): PriceRunner pairwise F1 0.629
(P 0.694, R 0.575), B-cubed F1 0.812 (P 0.886); Abt-Buy pairwise F1 0.803 (P 0.911), where
connected components over the same candidates score 0.000-0.058 pairwise F1.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import candidates, labelled, lineage, pairs_file
from pairsieve.cluster.judge import (
    best_cosines,
    judge,
    judge_mapped,
    judging,
    pair_cosines,
    resolved_link_threshold,
    uses_pair_model,
)
from pairsieve.cluster.link_groups import agglomerate_mapped
from pairsieve.cluster.nodes import nodes_of
from pairsieve.cluster.reuse import PreviousClustering, touching
from pairsieve.config import PairsieveConfig
from pairsieve.core import io, memory
from pairsieve.core.contract import Source, StageResult, read_source
from pairsieve.core.hashing import hex_digest
from pairsieve.core.layout import RunLayout
from pairsieve.core.partitions import Mapper, MapSpans, map_here
from pairsieve.labels.adapt import Setting
from pairsieve.pair_model.calibration import load_calibration

if TYPE_CHECKING:
    from pairsieve.vectors import knn
    from pairsieve.vectors.embed import Encoder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inputs:
    """What clustering reads: the listings (ingest's listings.parquet, or a frame with
    listing_id and title), optionally listing pairs (``listing_a``, ``listing_b``) to judge
    besides the candidates, so that each gets its ``p_same`` in ``pairs.parquet``, label
    files whose answers tune the clustering to this catalog (`cluster.labelled`), and the
    folder of the last published build, whose product ids carry over (`lineage.record`;
    without one every product is first seen now)."""

    listings: Source
    requested: pl.DataFrame | None = None
    labels: tuple[Path, ...] = ()
    previous_build: Path | None = None

    @classmethod
    def of(cls, layout: RunLayout) -> Inputs:
        return cls(layout.listings)


_NODE = candidates.NODE
_PARTITIONS = "_partitions"  # the mapped steps' plans and parts until the stage ends


# --- the stage -----------------------------------------------------------------------------------


@dataclass(eq=False)
class Clustering:
    """Everything one clustering run computed, for writing and for evaluation.

    ``frame``: listings (sorted by id) with their node; ``nodes``: one row per node;
    ``scored``: every judged candidate node pair; ``node_labels``: (n_nodes,) cluster label;
    ``ivf``: the kNN index's `knn.IvfLayout`, kept for the next build (None when exact).
    """

    frame: pl.DataFrame
    nodes: pl.DataFrame
    scored: pl.DataFrame
    node_labels: np.ndarray
    details: dict
    ivf: knn.IvfLayout | None = None

    def listing_labels(self) -> np.ndarray:
        """(n_listings,) int64 cluster label per listing, in ``frame`` order."""
        return self.node_labels[self.frame[_NODE].to_numpy()]

    def components(self, signal: str | None) -> np.ndarray:
        """Baseline: connected components over candidates carrying ``signal`` (None = exact only).

        Listings with the same normalised title are always connected, as every baseline that
        hashes or embeds titles puts identical texts together.
        """
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        n = len(self.nodes)
        pairs = self.scored.filter(pl.col(S.SIGNAL).cast(pl.String).str.contains(signal or "^$"))
        same_title = (
            self.frame.group_by(S.TITLE_NORM)
            .agg(pl.col(_NODE).min().alias("a"), pl.col(_NODE).alias("b"))
            .explode("b")
            .select("a", "b")
        )
        edges = pl.concat([pairs.select("a", "b"), same_title.cast(pl.Int64)])
        graph = coo_matrix(
            (np.ones(len(edges)), (edges["a"].to_numpy(), edges["b"].to_numpy())), shape=(n, n)
        )
        _, labels = connected_components(graph, directed=False)
        return labels[self.frame[_NODE].to_numpy()]


@dataclass
class _Judgement:
    """Listings, nodes and judged candidate pairs (a query: on disk when judging was
    mapped), before linkage; when tuning to labels, ``rejudge`` judges the same candidates
    again (`labelled.Rejudge`)."""

    frame: pl.DataFrame
    nodes: pl.DataFrame
    scored: pl.LazyFrame
    rejudge: labelled.Rejudge | None
    ivf: knn.IvfLayout | None
    by_signal: dict[str, int]
    details: dict
    timings: dict[str, float]


@dataclass(frozen=True)
class Extras:
    """What a clustering may be given besides the catalog, the config and the map (see
    `cluster_listings`)."""

    encoder: Encoder | None = None
    features: dict[str, np.ndarray] | None = None  # filled with the pair features, when given
    previous: PreviousClustering | None = None
    requested: pl.DataFrame | None = None
    label_files: tuple[Path, ...] = ()


def _judge(
    cfg: PairsieveConfig, listings: pl.DataFrame, extras: Extras, mapper: Mapper
) -> _Judgement:
    """Nodes, candidates and their judging (see `cluster_listings`). When tuning to labels,
    every pair is judged afresh and can be judged again (``rejudge``); otherwise nothing
    judging read is kept."""
    c = cfg.cluster
    tuning = bool(extras.label_files)
    encoder, features, previous, requested = (
        extras.encoder,
        extras.features,
        extras.previous,
        extras.requested,
    )
    timings: dict[str, float] = {}
    started = time.perf_counter()
    frame, nodes, attrs = nodes_of(listings, c.max_bucket, c.rare_word_share)
    timings["attributes_s"] = time.perf_counter() - started
    details: dict = {"titles": len(nodes)}
    unsettled = None  # a full build generates every pair
    if previous is not None and not tuning:
        settled = previous.settled(frame, nodes)
        unsettled = ~settled
        details["settled_nodes"] = int(settled.sum())
    spared = candidates.FromPrevious(unsettled, None if previous is None else previous.ivf)
    found = candidates.generate(cfg, nodes, attrs, encoder, spared, mapper)
    details.update(found.details)
    timings.update(found.timings)
    vectors, ivf = found.vectors, found.ivf
    candidate_pairs, by_signal = found.pairs, found.by_signal
    del found
    if requested is not None:
        asked = touching(candidates.node_pairs(frame, requested), unsettled)
        by_signal["requested"] = len(asked)
        candidate_pairs = candidates.with_requested(candidate_pairs, asked)
    cosine = None if vectors is None else pair_cosines(candidate_pairs, vectors)
    del vectors  # read for the cosines only
    context = judging(c, nodes, attrs, best_cosines(candidate_pairs, cosine, len(attrs)))
    if features is not None:  # the pair features of every pair, gathered here
        scored = judge(context, cosine, candidate_pairs, features).lazy()
    else:
        if not tuning:
            del attrs  # the context holds what judging reads of them
        scored = pl.scan_parquet(judge_mapped(cfg, context, cosine, candidate_pairs, mapper))
    del context
    if not tuning:
        del cosine  # rejudge reads it when tuning
    if unsettled is not None:
        reused = previous.pairs_between(nodes, ~unsettled, cfg, mapper)
        details["reused_pairs"] = reused.select(pl.len()).collect().item()
        scored = _with_reused(scored, reused)

    kept = labelled.Rejudge(c, candidate_pairs, nodes, attrs, cosine) if tuning else None
    return _Judgement(frame, nodes, scored, kept, ivf, by_signal, details, timings)


def _with_reused(scored: pl.LazyFrame, reused: pl.LazyFrame) -> pl.LazyFrame:
    """The judged pairs and the previous build's pairs between unchanged titles, in (a, b)
    order as a full build has them: sorted on one int64 key, ~2x faster than on two columns for
    the 3e7 pairs of 10^6 listings (agglomerate is 2x slower unsorted)."""
    key = (pl.col("a").cast(pl.Int64) * (1 << 32) + pl.col("b")).alias("_key")
    return pl.concat([scored, reused.cast(scored.collect_schema())]).sort(key)


def cluster_listings(
    cfg: PairsieveConfig, listings: pl.DataFrame, mapper: Mapper, extras: Extras = Extras()
) -> Clustering:
    """Cluster a catalog frame (see module docstring); ``cfg.cluster.use_embeddings`` = False
    runs the MinHash path alone (no encoder needed). Of the ``extras``: ``features``, when
    given, receives the learned judge's pair features (rows of ``Clustering.scored``), for
    refitting it. With
    ``previous``, pairs between unchanged titles are reused from it and only pairs touching the
    others are generated and judged (`cluster.reuse`). ``requested`` listing pairs are judged
    as candidates too (those touching a changed title, with ``previous``). ``label_files``
    tune the vetoes and thresholds to the answers in them (`cluster.labelled`); every pair is
    then judged afresh, as a lifted veto changes pairs ``previous`` settled. ``mapper`` maps
    the kNN search over partitions of titles (`cluster.neighbours`), the judging over
    spans of candidates (`cluster.judge`), the linkage over groups of components
    (`cluster.link_groups`) and the reuse of ``previous``'s pairs over spans of them
    (`cluster.reuse`), on a runner or here (`Mapper.local`)."""
    c = cfg.cluster
    started = time.perf_counter()
    label_files, tuning = extras.label_files, bool(extras.label_files)
    judged = _judge(cfg, listings, extras, mapper)
    details, timings = judged.details, judged.timings
    counts = judged.nodes["count"].to_numpy()
    setting = Setting(c.accept_probability, resolved_link_threshold(c), c.unjudged_weight)
    if label_files:
        scored = judged.scored.collect()
        tuned = labelled.tune(c, label_files, judged.frame, counts, scored, judged.rejudge)
        scored, details["labels"], setting = tuned.scored, tuned.details, tuned.setting
    # what a label sample of this build groups pairs by
    details["accept_probability"] = setting.accept_probability
    # rejudge holds every title's attributes, the cosines and the candidate pairs: GBs at 10^6
    # listings that the linkage does not need; the judged pairs are read after they go.
    judged = replace(judged, rejudge=None)
    memory.release()
    if not tuning:
        scored = judged.scored.collect()
    timings["judge_s"] = time.perf_counter() - started - sum(timings.values())
    labels, details["linkage"] = agglomerate_mapped(counts, scored, setting, mapper, cfg)
    timings["agglomerate_s"] = time.perf_counter() - started - sum(timings.values())
    details.update(_judged(scored, judged.by_signal))
    details["timings"] = {k: round(v, 3) for k, v in timings.items()}
    return Clustering(judged.frame, judged.nodes, scored, labels, details, judged.ivf)


def _judged(scored: pl.DataFrame, by_signal: dict[str, int]) -> dict:
    """What the judging decided: candidates per signal, pairs, accepted, vetoes by reason
    (counted from the one column: dropping the unvetoed rows of the whole table would copy
    every column of the vetoed ones, ~0.5 GiB at 10^6 listings)."""
    vetoes = scored[S.VETO_REASON].drop_nulls().value_counts().iter_rows()
    return {
        "candidates_by_signal": by_signal,
        "candidate_pairs": len(scored),
        "accepted_pairs": int(scored[S.ACCEPTED].sum()),
        "vetoes": dict(sorted(vetoes)),
    }


def products_frame(result: Clustering) -> pl.DataFrame:
    """products.parquet: listing_id, product_id, cluster_size, canonical_title, method."""
    frame = result.frame.with_columns(pl.Series("_label", result.listing_labels()))
    accepted = result.scored.filter(pl.col(S.ACCEPTED))
    same = (
        result.node_labels[accepted["a"].to_numpy()] == result.node_labels[accepted["b"].to_numpy()]
    )
    inside = accepted.filter(pl.Series(same)).sort(
        "score", "a", "b", descending=[True, False, False]
    )
    ends = [inside.select(pl.col(end).alias(_NODE), S.SIGNAL) for end in ("a", "b")]
    best_signal = (
        pl.concat(ends)
        .group_by(_NODE, maintain_order=True)
        .agg(pl.col(S.SIGNAL).first().cast(pl.String).str.split("+").list.first())
        .rename({S.SIGNAL: "_edge_method"})
    )
    frame = frame.join(best_signal.cast({_NODE: pl.UInt32}), on=_NODE, how="left")
    canonical = (
        frame.group_by("_label", S.TITLE_NORM)
        .agg(pl.len().alias("_n"), pl.col(S.TITLE).sort_by(S.LISTING_ID).first())
        .sort("_n", S.TITLE_NORM, descending=[True, False])
        .group_by("_label", maintain_order=True)
        .agg(pl.col(S.TITLE).first().alias(S.CANONICAL_TITLE))
    )
    out = frame.join(canonical, on="_label", how="left").with_columns(
        pl.col(S.LISTING_ID).min().over("_label").alias("_first"),
        pl.len().over("_label").cast(pl.Int64).alias(S.CLUSTER_SIZE),
    )
    # One hash per product, not per listing.
    firsts = out["_first"].unique()
    ids = pl.DataFrame(
        {"_first": firsts, S.PRODUCT_ID: ["p" + hex_digest(x) for x in firsts.to_list()]},
        schema={"_first": pl.String, S.PRODUCT_ID: pl.String},
    )
    out = out.join(ids, on="_first", how="left").with_columns(
        pl.when(pl.col(S.CLUSTER_SIZE) == 1)
        .then(pl.lit("singleton"))
        .when(pl.col("_edge_method").is_not_null())
        .then(pl.col("_edge_method"))
        .otherwise(pl.lit("exact"))
        .alias(S.METHOD),
    )
    return out.select(S.LISTING_ID, S.PRODUCT_ID, S.CLUSTER_SIZE, S.CANONICAL_TITLE, S.METHOD).sort(
        S.LISTING_ID
    )


def run(
    cfg: PairsieveConfig,
    inputs: Inputs,
    out_dir: Path,
    *,
    encoder: Encoder | None = None,
    previous: PreviousClustering | None = None,
    map_spans: MapSpans = map_here,
) -> StageResult:
    """The cluster stage: write ``products.parquet``, ``pairs.parquet`` and
    ``id_changes.parquet`` into ``out_dir``, reusing ``previous``'s pairs between unchanged
    titles when given, and carrying product ids over from ``inputs.previous_build``.
    ``map_spans`` maps the heavy steps' partitions (default: here, one after the other)."""
    frame = read_source(inputs.listings, "listings", S.CATALOG_REQUIRED)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    mapper = Mapper(out_dir / _PARTITIONS, map_spans)
    try:
        extras = Extras(
            encoder=encoder,
            previous=previous,
            requested=inputs.requested,
            label_files=inputs.labels,
        )
        result = cluster_listings(cfg, frame, mapper, extras)
    finally:
        shutil.rmtree(out_dir / _PARTITIONS, ignore_errors=True)
    products = products_frame(result)
    io.write_parquet(products, out_dir / S.PRODUCTS_FILE)
    outputs = {"products": S.PRODUCTS_FILE, "pairs": S.PAIRS_FILE}
    if result.ivf is not None:
        outputs.update(result.ivf.write(out_dir))
    found = result.details
    calibration = load_calibration() if uses_pair_model(cfg.cluster) else None
    pairs_file.write_pairs(result, calibration, out_dir / S.PAIRS_FILE)
    del result
    details = {**found, **_product_counts(products)}
    result = StageResult(
        stage="cluster",
        rows_in=len(frame),
        rows_out=len(products),
        timings=details.pop("timings"),
        outputs=outputs,
        details=details,
    )
    return lineage.record(result, out_dir, inputs.previous_build)


def _product_counts(products: pl.DataFrame) -> dict[str, object]:
    """How many products, the largest one's listings, and listings per clustering method."""
    sizes = products.group_by(S.PRODUCT_ID).len()
    return {
        "products": len(sizes),
        "largest_cluster": int(sizes["len"].max()) if len(sizes) else 0,
        "methods": dict(sorted(products[S.METHOD].value_counts().iter_rows())),
    }
