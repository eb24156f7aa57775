"""One clustering run of a labelled catalog (`Run`: its candidate pairs, their features, labels
and scores against the truth) and the leave-one-catalog-out measurement built on such runs:
which catalogs fit and which is measured, the thresholds picked on the fitted ones, table cells;
and where a run's true pairs went (`recall_row`).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np
import polars as pl

from harness import tfidf
from pairsieve import schemas as S
from pairsieve.cluster import linkage
from pairsieve.cluster import stage as cluster
from pairsieve.cluster.neighbours import scratch_mapper
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS
from pairsieve.datasets.scoring import score

# PriceRunner's categories in half A of a category split (`Run.category`, `Run.listing_half`)
HALF_A = ("Mobile Phones", "TVs", "CPUs", "Digital Cameras", "Microwaves")
# what `best_thresholds` picks from: accept_probability, link_threshold
PROBABILITIES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
LINKS = (0.1, 0.2, 0.3, 0.4, 0.5)


class Run:
    """One clustering run's candidates, features, labels and category per node. With
    ``source_column`` (a two-shop catalog, whose truth only links listings across shops), a
    candidate pair is labelled only across shops and scoring counts cross-shop pairs."""

    def __init__(
        self,
        cfg: PairsieveConfig,
        catalog: pl.DataFrame,
        source_column: str | None = None,
        requested: pl.DataFrame | None = None,
    ) -> None:
        started = time.perf_counter()
        self.features: dict[str, np.ndarray] = {}
        truth = dict(zip(catalog[S.LISTING_ID], catalog[S.TRUE_PRODUCT_ID], strict=True))
        hidden = catalog.drop(S.TRUE_PRODUCT_ID, S.TRUE_PRODUCT_NAME, strict=False)
        with scratch_mapper() as mapper:
            extras = cluster.Extras(features=self.features, requested=requested)
            self.result = cluster.cluster_listings(cfg, hidden, mapper, extras)
        self.seconds = time.perf_counter() - started
        ids = self.result.frame[S.LISTING_ID].to_list()
        self.truth = [truth[x] for x in ids]
        nodes = self.result.frame["_node"].to_numpy()
        self.node_truth = _majority(nodes, self.truth)
        self.scored = scored = self.result.scored
        self.a, self.b = scored["a"].to_numpy(), scored["b"].to_numpy()
        self.label = self.node_truth[self.a] == self.node_truth[self.b]
        self.labelled = np.ones(len(self.a), dtype=bool)
        self.source = None
        if source_column is not None:
            shop = dict(zip(catalog[S.LISTING_ID], catalog[source_column], strict=True))
            self.source = np.asarray([shop[x] for x in ids], dtype=object)
            node_source = _majority(nodes, self.source.tolist())
            self.labelled = node_source[self.a] != node_source[self.b]
        self.vetoed = scored[S.VETO_REASON].is_not_null().to_numpy()
        self.category = None
        if S.CATEGORY in catalog.columns:
            cats = dict(zip(catalog[S.LISTING_ID], catalog[S.CATEGORY], strict=True))
            self.listing_half = np.isin([cats[x] for x in ids], HALF_A)
            self.category = _majority(nodes, [cats[x] in HALF_A for x in ids])

    def exact_pairs(self) -> tuple[int, int]:
        """(one product, all) over the labelled pairs of listings with identical normalised
        titles (one node), which are never scored: pairs of equal group keys, counted as
        sum(k * (k - 1)) / 2 over group sizes k, less the pairs inside one shop when labels
        only cross shops."""
        frame = pl.DataFrame(
            {
                "node": self.result.frame["_node"],
                "truth": [str(t) for t in self.truth],
                "shop": [""] * len(self.truth) if self.source is None else self.source.tolist(),
            }
        )

        def pairs(keys: list[str]) -> int:
            k = frame.group_by(keys).len()["len"].cast(pl.Int64)
            return int((k * (k - 1)).sum() // 2)

        within = self.source is not None
        total = pairs(["node"]) - (pairs(["node", "shop"]) if within else 0)
        same = pairs(["node", "truth"]) - (pairs(["node", "truth", "shop"]) if within else 0)
        return same, total

    def soften(self, reasons: tuple[str, ...]) -> None:
        """Take the vetoes ``reasons`` as evidence instead of a decision: each becomes a 0/1
        feature of the pair model (``veto_<reason>``) and stops blocking merges."""
        reason = self.scored[S.VETO_REASON]
        for name in reasons:
            self.features[f"veto_{name}"] = (reason == name).fill_null(False).to_numpy()
        soft = reason.is_in(list(reasons)).fill_null(False)
        kept = pl.when(soft).then(None).otherwise(reason).alias(S.VETO_REASON)
        self.scored = self.scored.with_columns(kept)
        self.vetoed = self.scored[S.VETO_REASON].is_not_null().to_numpy()

    def matrix(self, names: tuple[str, ...]) -> np.ndarray:
        return np.column_stack([self.features[n].astype(np.float64) for n in names])

    def scores(
        self,
        p: np.ndarray,
        accept: float,
        link: float,
        mask: np.ndarray | None = None,
        unjudged: float = 1.0,
    ):
        """Scores of clustering with pair probabilities ``p`` (listings in ``mask`` only),
        unjudged pairs weighing ``unjudged`` in the average linkage."""
        scored = self.scored.with_columns(
            pl.Series("score", p), pl.Series(S.ACCEPTED, ~self.vetoed & (p >= accept))
        )
        counts = self.result.nodes["count"].to_numpy()
        labels = linkage.agglomerate(counts, scored, link, unjudged)
        listing = labels[self.result.frame["_node"].to_numpy()]
        return self._score(listing, mask)

    def _score(self, listing: np.ndarray, mask: np.ndarray | None):
        truth = np.asarray(self.truth, dtype=object)
        source = self.source
        if mask is not None:
            listing, truth = listing[mask], truth[mask]
            source = None if source is None else source[mask]
        return score(listing.tolist(), truth.tolist(), source)

    def rule_scores(self, mask: np.ndarray | None = None):
        """Scores of the rule judge's clusters (this run was made with it)."""
        return self._score(np.asarray(self.result.listing_labels(), dtype=object), mask)


def _majority(nodes: np.ndarray, values: list) -> np.ndarray:
    """(n_nodes,) most frequent value per node (ties: smallest)."""
    frame = pl.DataFrame({"n": nodes, "v": [str(v) for v in values]})
    top = (
        frame.group_by("n", "v")
        .len()
        .sort("n", "len", "v", descending=[False, True, False])
        .group_by("n", maintain_order=True)
        .agg(pl.col("v").first())
        .sort("n")
    )
    return np.asarray(top["v"].to_list(), dtype=object)


def held_out_splits(names: list[str]) -> list[tuple[list[str], str]]:
    """(the catalogs fitted on, the catalog measured) for each catalog in turn."""
    return [([n for n in names if n != held], held) for held in names]


def best_thresholds(
    runs, fitted_on, probability: dict, min_precision: float, unjudged: tuple[float, ...]
) -> tuple[float, float, float]:
    """(accept_probability, link_threshold, unjudged_weight) with the best mean pairwise F1
    over ``fitted_on`` (pair probabilities ``probability[name]``) among those keeping every one
    of them at ``min_precision`` (all combinations when none does)."""
    grid = []
    for accept, link, weight in itertools.product(PROBABILITIES, LINKS, unjudged):
        scores = [runs[n].scores(probability[n], accept, link, unjudged=weight) for n in fitted_on]
        precise = min(s.pairwise_precision for s in scores) >= min_precision
        f1 = float(np.mean([s.pairwise_f1 for s in scores]))
        grid.append((precise, f1, accept, link, weight))
    best = max(grid)
    return best[2], best[3], best[4]


def score_cells(s) -> str:
    """Pairwise P, R, F1 and B-cubed F1 of a score, as markdown table cells."""
    pair = f"{s.pairwise_precision:.3f} | {s.pairwise_recall:.3f} | **{s.pairwise_f1:.3f}**"
    return f"{pair} | {s.bcubed_f1:.3f}"


def benchmark_run(cfg: PairsieveConfig, bench, data_root: Path, tfidf_k: int = 0) -> Run:
    """The clustering run of one benchmark catalog, truth hidden; a two-shop catalog's pairs are
    labelled and scored across shops only. With ``tfidf_k``, each title's TF-IDF top-k
    neighbours (`harness.tfidf`) are judged besides the candidates."""
    catalog = bench.load(data_root)
    requested = tfidf.listing_pairs(catalog, tfidf_k) if tfidf_k else None
    return Run(cfg, catalog, S.SELLER_ID if bench.cross_source else None, requested)


def true_node_pairs(run: Run) -> int:
    """Pairs of distinct nodes of one product (by each node's majority truth); across shops
    only when the truth links listings across shops alone."""
    frame = pl.DataFrame({"truth": [str(t) for t in run.node_truth]})
    if run.source is None:
        k = frame.group_by("truth").len()["len"].cast(pl.Int64)
        return int((k * (k - 1)).sum() // 2)
    nodes = run.result.frame["_node"].to_numpy()
    order = np.argsort(nodes, kind="stable")
    first = np.r_[True, nodes[order][1:] != nodes[order][:-1]]
    shop = run.source[order][first]
    frame = frame.with_columns(pl.Series("shop", [str(s) for s in shop]))
    k = frame.group_by("truth").len()["len"].cast(pl.Int64)
    within = frame.group_by("truth", "shop").len()["len"].cast(pl.Int64)
    return int((k * (k - 1)).sum() // 2 - (within * (within - 1)).sum() // 2)


def recall_row(cfg: PairsieveConfig, name: str, data_root: Path, tfidf_k: int = 0) -> dict:
    """One catalog clustered under ``cfg``, truth hidden: its pairwise scores, where its true
    pairs went (candidates, or held apart by `low_information`), the pairs judged and the
    seconds taken (with ``tfidf_k``, finding the TF-IDF top-k pairs included)."""
    started = time.perf_counter()
    run = benchmark_run(cfg, BENCHMARKS[name], data_root, tfidf_k)
    scores = run.rule_scores()
    true = run.label & run.labelled
    reason = run.scored[S.VETO_REASON].cast(pl.String).fill_null("").to_numpy()
    total = true_node_pairs(run)
    return {
        "catalog": name,
        "pairwise_p": round(scores.pairwise_precision, 4),
        "pairwise_r": round(scores.pairwise_recall, 4),
        "pairwise_f1": round(scores.pairwise_f1, 4),
        "true_node_pairs": total,
        "candidate_recall": round(int(true.sum()) / max(total, 1), 4),
        "true_held_low_information": int((true & (reason == "low_information")).sum()),
        "pairs_judged": len(run.a),
        "seconds": round(time.perf_counter() - started, 1),
    }
