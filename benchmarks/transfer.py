"""Leave-one-catalog-out: how pairsieve's same-product judgement carries to a catalog it was not
fitted on.

For each of the five benchmark catalogs, the pair model's coefficients are fitted on the other
four (their candidate pairs pooled, each catalog weighted equally) and (accept_probability,
link_threshold) are picked on those four: the pair with the best mean pairwise F1 among those
keeping pairwise precision at least ``--min-precision`` on each of them. Then the fifth is
measured, beside today's default (the shipped model.json and default thresholds) on the same
candidates. Two-shop catalogs (Abt-Buy, Walmart-Amazon) are scored on cross-shop pairs and
contribute only cross-shop pairs as training labels: their truth says nothing inside a shop.

No catalog's labels are seen while it is measured (`harness.clustering.held_out_splits`, tested).

``--soft-vetoes low_information,pixels_conflict`` takes those attribute vetoes as features of
the pair model instead of decisions (``all``: every veto), to measure what the hard rules cost.

``--set cluster.min_cosine=0.65`` changes the candidates of every catalog (and today's default
is measured on them too).

Before the fits, the calibration of ``p_same`` (`pairsieve.pair_model.calibration`: Platt maps of
the shipped pair model's score) is measured the same way, fitted on four catalogs and measured on
the fifth as expected calibration error; ``--write-calibration`` stores the one fitted on all
five, with the leave-one-out reliability tables the report draws, in model.json.

Usage: python benchmarks/transfer.py --data-root ../shared/data [--soft-vetoes R,...] [--set K=V]
[--write-calibration]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from harness.clustering import Run, benchmark_run, best_thresholds, held_out_splits, score_cells

from pairsieve import schemas as S
from pairsieve.cli.app import parse_override
from pairsieve.cluster.judge import resolved_link_threshold
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS
from pairsieve.pair_model import calibration
from pairsieve.pair_model import model as pair_model
from pairsieve.pair_model.fit import equal_catalog_weights, fit, write_calibration


def pooled_model(runs: dict[str, Run], fitted_on: list[str], names: tuple[str, ...]):
    """The pair model fitted on the labelled, unvetoed pairs of ``fitted_on``, each catalog
    weighing the same in total."""
    kept = [~runs[name].vetoed & runs[name].labelled for name in fitted_on]
    xs = [runs[name].matrix(names)[keep] for name, keep in zip(fitted_on, kept, strict=True)]
    ys = [runs[name].label[keep] for name, keep in zip(fitted_on, kept, strict=True)]
    return fit(np.vstack(xs), np.concatenate(ys), names, equal_catalog_weights(kept))


def pick_thresholds(
    runs, fitted_on, model, min_precision: float, unjudged: tuple[float, ...]
) -> tuple[float, float, float]:
    """`best_thresholds` for a pair model's probabilities."""
    probability = {name: model.probability(runs[name].features) for name in fitted_on}
    return best_thresholds(runs, fitted_on, probability, min_precision, unjudged)


def pooled_calibration(
    runs: dict[str, Run], fitted_on: list[str], scores: dict[str, np.ndarray]
) -> calibration.Calibration:
    """Platt maps of the pair model's ``scores`` for unvetoed and for vetoed pairs, fitted on
    the labelled candidate pairs of ``fitted_on`` (each catalog weighing the same in each fit),
    and the mean share of identical-title pairs that are one product over those catalogs."""
    fits = {}
    for vetoed in (False, True):
        kept = [runs[name].labelled & (runs[name].vetoed == vetoed) for name in fitted_on]
        pairs = list(zip(fitted_on, kept, strict=True))
        x = np.concatenate([calibration.logit(scores[name][keep]) for name, keep in pairs])
        y = np.concatenate([runs[name].label[keep] for name, keep in pairs])
        fits[vetoed] = calibration.platt(x, y, equal_catalog_weights(kept))
    shares = [same / total for same, total in (runs[n].exact_pairs() for n in fitted_on) if total]
    exact = float(np.mean(shares)) if shares else 1.0
    return calibration.Calibration(unvetoed=fits[False], vetoed=fits[True], exact=exact)


def calibration_table(runs: dict[str, Run], scores: dict[str, np.ndarray]) -> dict:
    """Print the leave-one-out calibration of ``p_same`` per catalog (ECE, mean predicted vs
    observed share of true pairs, identical titles) and return the reliability tables and the
    calibration fitted on all catalogs."""
    print(
        "\n| catalog | labelled pairs | ECE of the raw score | ECE of p_same | mean p_same "
        "| true share | identical titles: pooled p | true share |"
    )
    print("|---|---|---|---|---|---|---|---|")
    tables, eces = {}, []
    for fitted_on, held in held_out_splits(list(runs)):
        fitted = pooled_calibration(runs, fitted_on, scores)
        run = runs[held]
        keep = run.labelled
        p = fitted.p_same(scores[held], run.vetoed)[keep]
        y = run.label[keep]
        raw = calibration.reliability(scores[held][keep], y)
        held_out = calibration.reliability(p, y)
        eces.append(held_out.ece)
        same, total = run.exact_pairs()
        exact_share = f"{same / total:.3f} of {total:,}" if total else "none"
        print(
            f"| {held} | {int(keep.sum()):,} | {raw.ece:.3f} | **{held_out.ece:.3f}** | "
            f"{p.mean():.3f} | {y.mean():.3f} | {fitted.exact:.3f} | {exact_share} |",
            flush=True,
        )
        tables[held] = {
            "ece": round(held_out.ece, 4),
            "count": held_out.count.tolist(),
            "mean_p": [None if np.isnan(v) else round(float(v), 4) for v in held_out.mean_p],
            "rate": [None if np.isnan(v) else round(float(v), 4) for v in held_out.rate],
        }
    print(f"\nECE of p_same, leave-one-out: worst {max(eces):.3f}, mean {np.mean(eces):.3f}")
    shipped = pooled_calibration(runs, list(runs), scores)
    return {**shipped.as_json(), "leave_one_out": tables}


def _soft_vetoes(spec: str, runs: dict[str, Run]) -> tuple[str, ...]:
    if spec != "all":
        return tuple(r for r in spec.split(",") if r)
    found = set().union(
        *(set(r.scored[S.VETO_REASON].drop_nulls().unique()) for r in runs.values())
    )
    return tuple(sorted(found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--min-precision", type=float, default=0.75)
    parser.add_argument("--soft-vetoes", default="", help="veto reasons taken as features")
    parser.add_argument(
        "--set", action="append", default=[], help="config override for the candidates: KEY=VALUE"
    )
    parser.add_argument(
        "--unjudged",
        type=float,
        nargs="+",
        default=[1.0],
        help="cluster.unjudged_weight values the fit may pick from",
    )
    parser.add_argument(
        "--write-calibration",
        action="store_true",
        help="store the calibration fitted on all five in model.json",
    )
    args = parser.parse_args()
    base = PairsieveConfig().with_(**dict(parse_override(item) for item in args.set))
    default_model = pair_model.load_model()
    default_link = resolved_link_threshold(base.cluster)
    runs: dict[str, Run] = {}
    today = {}  # the shipped model and thresholds, vetoes as shipped
    shipped = {}  # the shipped model's score per candidate pair
    for name, bench in BENCHMARKS.items():
        runs[name] = benchmark_run(base, bench, args.data_root)
        print(
            f"{name}: {len(runs[name].truth):,} listings, candidates {len(runs[name].a):,}, "
            f"{runs[name].seconds:.0f} s",
            flush=True,
        )
        shipped[name] = default_model.probability(runs[name].features)
        today[name] = runs[name].scores(
            shipped[name], base.cluster.accept_probability, default_link
        )
    fitted_calibration = calibration_table(runs, shipped)
    if args.write_calibration:
        write_calibration(fitted_calibration)
    soft = _soft_vetoes(args.soft_vetoes, runs)
    for run in runs.values():
        run.soften(soft)
    names = (*default_model.features, *(f"veto_{reason}" for reason in soft))
    print(f"soft vetoes: {', '.join(soft) or 'none'}")
    print(
        "\n| catalog | default: pair P | pair R | pair F1 | B3 F1 | leave-one-out (accept, link, "
        "unjudged) "
        "| pair P | pair R | pair F1 | B3 F1 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    totals = {"default": [], "held out": []}
    started = time.perf_counter()
    for fitted_on, held in held_out_splits(list(runs)):
        model = pooled_model(runs, fitted_on, names)
        accept, link, weight = pick_thresholds(
            runs, fitted_on, model, args.min_precision, tuple(args.unjudged)
        )
        run = runs[held]
        measured = run.scores(model.probability(run.features), accept, link, unjudged=weight)
        totals["default"].append(today[held].pairwise_f1)
        totals["held out"].append(measured.pairwise_f1)
        cells = (
            f"{score_cells(today[held])} | ({accept}, {link}, {weight}) | {score_cells(measured)}"
        )
        print(f"| {held} | {cells} |", flush=True)
    print(
        f"\nmean pairwise F1: default {np.mean(totals['default']):.3f}, "
        f"leave-one-out {np.mean(totals['held out']):.3f} ({time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
