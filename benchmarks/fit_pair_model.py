"""Refit the learned pair model (src/pairsieve/pair_model/model.json); measure how it generalises.

Labels: PriceRunner's ground truth (a candidate node pair is positive when both titles' majority
product is the same). Pairs an attribute vetoes are left out, as vetoes stay hard at run time.
The fit is the package's own (`pairsieve.pair_model.fit`): ridge logistic regression on
standardised features, stored on the raw scale.

Generalisation checks, printed as markdown:
- category split: fit the coefficients and pick (accept_probability, link_threshold) on five
  PriceRunner categories, measure on the other five, both ways, beside the rule judge;
- zero-shot: the model fitted on all of PriceRunner, applied unchanged to Abt-Buy.

Usage: python benchmarks/fit_pair_model.py --data-root /work/shared/data [--write]
(without --write the shipped model.json is left untouched; the measurement always runs).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import judge as cluster_judge
from pairsieve.cluster import linkage
from pairsieve.cluster import stage as cluster
from pairsieve.cluster.neighbours import scratch_mapper
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.scoring import score
from pairsieve.pair_model import fit as pair_fit
from pairsieve.pair_model import model as pair_model

HALF_A = ("Mobile Phones", "TVs", "CPUs", "Digital Cameras", "Microwaves")
PROBABILITIES = (0.3, 0.4, 0.5)
LINKS = (0.2, 0.3, 0.4)


class Run:
    """One clustering run's candidates, features, labels and category per node. With
    ``source_column`` (a two-shop catalog, whose truth only links listings across shops), a
    candidate pair is labelled only across shops and scoring counts cross-shop pairs."""

    def __init__(
        self, cfg: PairsieveConfig, catalog: pl.DataFrame, source_column: str | None = None
    ) -> None:
        started = time.perf_counter()
        self.features: dict[str, np.ndarray] = {}
        truth = dict(zip(catalog[S.LISTING_ID], catalog[S.TRUE_PRODUCT_ID], strict=True))
        hidden = catalog.drop(S.TRUE_PRODUCT_ID, S.TRUE_PRODUCT_NAME, strict=False)
        with scratch_mapper() as mapper:
            extras = cluster.Extras(features=self.features)
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


def fit_run(run: Run, names: tuple[str, ...], pairs: np.ndarray | None = None):
    keep = ~run.vetoed & run.labelled if pairs is None else ~run.vetoed & run.labelled & pairs
    return pair_fit.fit(run.matrix(names)[keep], run.label[keep], names)


def _row(s) -> str:
    return (
        f"{s.pairwise_precision:.3f} | {s.pairwise_recall:.3f} | **{s.pairwise_f1:.3f}** | "
        f"{s.bcubed_precision:.3f} | {s.bcubed_recall:.3f} | **{s.bcubed_f1:.3f}**"
    )


def category_split(run: Run, names: tuple[str, ...]) -> list[str]:
    """Markdown rows: fit on one half of the categories (coefficients, accept_probability and
    link_threshold), measure on the other half, beside the rule judge on that half."""
    rows = []
    for fit_half, other in (("A", "B"), ("B", "A")):
        pair_half = (run.category == "True") if fit_half == "A" else (run.category == "False")
        in_fit = pair_half[run.a] & pair_half[run.b]
        model = fit_run(run, names, in_fit)
        p = model.probability(run.features)
        fit_mask = run.listing_half if fit_half == "A" else ~run.listing_half
        best = max(
            ((t, k) for t in PROBABILITIES for k in LINKS),
            key=lambda tk: run.scores(p, tk[0], tk[1], fit_mask).pairwise_f1,
        )
        measured = run.scores(p, best[0], best[1], ~fit_mask)
        rows.append(f"| {fit_half} | {other} | learned ({best[0]}, {best[1]}) | {_row(measured)} |")
        rows.append(
            f"| {fit_half} | {other} | rule (defaults) | {_row(run.rule_scores(~fit_mask))} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--write", action="store_true", help="overwrite model.json")
    args = parser.parse_args()
    from pairsieve.datasets import abtbuy, pricerunner

    base = PairsieveConfig()
    rule = base.with_(**{"cluster.judge": "rule"})
    pr = pricerunner.load_catalog(args.data_root)
    ab = abtbuy.load_catalog(args.data_root)
    lines = [
        "| fit on | measured on | judge (accept_p, link) | pair P | pair R | pair F1 "
        "| B3 P | B3 R | B3 F1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    run_pr, run_ab = Run(rule, pr), Run(rule, ab)
    names = tuple(run_pr.features)
    model = fit_run(run_pr, names)
    print(f"coefficients: {dict(zip(names, model.coef.round(3).tolist(), strict=True))}")
    print(f"PriceRunner run {run_pr.seconds:.0f} s, Abt-Buy {run_ab.seconds:.0f} s")
    print("\n".join([*lines, *category_split(run_pr, names)]))
    p_ab = model.probability(run_ab.features)
    ab_learned = run_ab.scores(
        p_ab, base.cluster.accept_probability, cluster_judge.resolved_link_threshold(base.cluster)
    )
    print(f"| PriceRunner (all) | Abt-Buy | learned (defaults) | {_row(ab_learned)} |")
    print(f"| - | Abt-Buy | rule (defaults) | {_row(run_ab.rule_scores())} |")
    if args.write:
        pair_fit.write(model, fitted_pairs=int((~run_pr.vetoed).sum()))
        print(f"wrote {pair_model.MODEL_FILE}")


if __name__ == "__main__":
    main()
