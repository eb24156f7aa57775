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
from pathlib import Path

import numpy as np
from harness.clustering import Run

from pairsieve.cluster import judge as cluster_judge
from pairsieve.config import PairsieveConfig
from pairsieve.pair_model import fit as pair_fit
from pairsieve.pair_model import model as pair_model

PROBABILITIES = (0.3, 0.4, 0.5)
LINKS = (0.2, 0.3, 0.4)


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
