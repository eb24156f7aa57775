"""Leave-one-catalog-out: how pairsieve's same-product judgement carries to a catalog it was not
fitted on.

For each of the five benchmark catalogs, the pair model's coefficients are fitted on the other
four (their candidate pairs pooled, each catalog weighted equally) and (accept_probability,
link_threshold) are picked on those four: the pair with the best mean pairwise F1 among those
keeping pairwise precision at least ``--min-precision`` on each of them. Then the fifth is
measured, beside today's default (the shipped verifier.json and default thresholds) on the same
candidates. Two-shop catalogs (Abt-Buy, Walmart-Amazon) are scored on cross-shop pairs and
contribute only cross-shop pairs as training labels: their truth says nothing inside a shop.

No catalog's labels are seen while it is measured (`held_out_splits`, tested).

``--soft-vetoes low_information,pixels_conflict`` takes those attribute vetoes as features of
the pair model instead of decisions (``all``: every veto), to measure what the hard rules cost.

``--set cluster.min_cosine=0.65`` changes the candidates of every catalog (and today's default
is measured on them too).

Usage: python benchmarks/transfer.py --data-root ../shared/data [--soft-vetoes R,...] [--set K=V]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from fit_verifier import Run, fit  # noqa: E402 - the sibling benchmark's run and fit

from pairsieve import schemas as S
from pairsieve.cluster import verifier
from pairsieve.cluster.verify import resolved_link_threshold
from pairsieve.config import PairsieveConfig, parse_override
from pairsieve.datasets.benchmarks import BENCHMARKS

PROBABILITIES = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
LINKS = (0.1, 0.2, 0.3, 0.4, 0.5)


def held_out_splits(names: list[str]) -> list[tuple[list[str], str]]:
    """(the catalogs fitted on, the catalog measured) for each catalog in turn."""
    return [([n for n in names if n != held], held) for held in names]


def pooled_model(runs: dict[str, Run], fitted_on: list[str], names: tuple[str, ...]):
    """The pair model fitted on the labelled, unvetoed pairs of ``fitted_on``, each catalog
    weighing the same in total."""
    xs, ys, ws = [], [], []
    for name in fitted_on:
        run = runs[name]
        keep = ~run.vetoed & run.labelled
        xs.append(run.matrix(names)[keep])
        ys.append(run.label[keep])
        ws.append(np.full(int(keep.sum()), 1.0 / max(int(keep.sum()), 1)))
    weight = np.concatenate(ws)
    return fit(np.vstack(xs), np.concatenate(ys), names, weight * len(weight) / weight.sum())


def pick_thresholds(runs, fitted_on, model, min_precision: float) -> tuple[float, float]:
    """(accept_probability, link_threshold) with the best mean pairwise F1 over ``fitted_on``
    among those keeping every one of them at ``min_precision`` (all pairs when none does)."""
    grid = []
    probability = {name: model.probability(runs[name].features) for name in fitted_on}
    for accept in PROBABILITIES:
        for link in LINKS:
            scores = [runs[n].scores(probability[n], accept, link) for n in fitted_on]
            precise = min(s.pairwise_precision for s in scores) >= min_precision
            grid.append((precise, float(np.mean([s.pairwise_f1 for s in scores])), accept, link))
    best = max(grid)
    return best[2], best[3]


def _soft_vetoes(spec: str, runs: dict[str, Run]) -> tuple[str, ...]:
    if spec != "all":
        return tuple(r for r in spec.split(",") if r)
    found = set().union(
        *(set(r.scored[S.VETO_REASON].drop_nulls().unique()) for r in runs.values())
    )
    return tuple(sorted(found))


def _cells(s) -> str:
    pair = f"{s.pairwise_precision:.3f} | {s.pairwise_recall:.3f} | **{s.pairwise_f1:.3f}**"
    return f"{pair} | {s.bcubed_f1:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--min-precision", type=float, default=0.75)
    parser.add_argument("--soft-vetoes", default="", help="veto reasons taken as features")
    parser.add_argument(
        "--set", action="append", default=[], help="config override for the candidates: KEY=VALUE"
    )
    args = parser.parse_args()
    base = PairsieveConfig().with_(**dict(parse_override(item) for item in args.set))
    default_model = verifier.load_model()
    default_link = resolved_link_threshold(base.cluster)
    runs: dict[str, Run] = {}
    today = {}  # the shipped model and thresholds, vetoes as shipped
    for name, bench in BENCHMARKS.items():
        catalog = bench.load(args.data_root)
        runs[name] = Run(base, catalog, S.SELLER_ID if bench.cross_source else None)
        print(
            f"{name}: {catalog.height:,} listings, candidates {len(runs[name].a):,}, "
            f"{runs[name].seconds:.0f} s",
            flush=True,
        )
        shipped = default_model.probability(runs[name].features)
        today[name] = runs[name].scores(shipped, base.cluster.accept_probability, default_link)
    soft = _soft_vetoes(args.soft_vetoes, runs)
    for run in runs.values():
        run.soften(soft)
    names = (*default_model.features, *(f"veto_{reason}" for reason in soft))
    print(f"soft vetoes: {', '.join(soft) or 'none'}")
    print(
        "\n| catalog | default: pair P | pair R | pair F1 | B3 F1 | leave-one-out (accept, link) "
        "| pair P | pair R | pair F1 | B3 F1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    totals = {"default": [], "held out": []}
    started = time.perf_counter()
    for fitted_on, held in held_out_splits(list(runs)):
        model = pooled_model(runs, fitted_on, names)
        accept, link = pick_thresholds(runs, fitted_on, model, args.min_precision)
        run = runs[held]
        measured = run.scores(model.probability(run.features), accept, link)
        totals["default"].append(today[held].pairwise_f1)
        totals["held out"].append(measured.pairwise_f1)
        cells = f"{_cells(today[held])} | ({accept}, {link}) | {_cells(measured)}"
        print(f"| {held} | {cells} |", flush=True)
    print(
        f"\nmean pairwise F1: default {np.mean(totals['default']):.3f}, "
        f"leave-one-out {np.mean(totals['held out']):.3f} ({time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
