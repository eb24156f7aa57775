"""What a few hundred labels buy: the audit's false-negative rate, and a build's merged-pair
precision and candidate recall, with labels from a simulated labeller, over many draws.

Needs the audits of `audit_estimate.py` (run it first with the same ``--work``): for each audited
dataset, the audit's pairs (``audit_pairs.parquet``) are labelled by the catalog's ground truth
standing in for a person, ``--draws`` times ``--n`` pairs drawn as `pairsieve label sample
--audit` draws them (strata of p_same; seed = draw number), and each draw's estimate
(`labels.estimate`) is set
against the true rate: how often its 95% interval covers it, how wide it is, how far the point
estimate lands.

With ``--data-root``, the same for the clustering of each catalog with within-shop truth (as
`pairsieve label sample --run` draws a build's judged candidate pairs and `pairsieve build
--labels` estimates, strata split by `sample.build_groups`): the precision of the candidate pairs
pairsieve merged and the share of true candidate pairs it merged.

    cd benchmarks && ../.venv/bin/python labels.py [--work /tmp/ps-audit-estimate] \
        [--n 300] [--draws 40] [--data-root ../../shared/data]

Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
from harness.audit_data import WITHIN_SHOP_TRUTH, with_truth

from pairsieve import schemas as S
from pairsieve.cluster import stage as cluster
from pairsieve.config import PairsieveConfig
from pairsieve.core.layout import RunLayout
from pairsieve.datasets.benchmarks import benchmark
from pairsieve.labels import estimate, sample
from pairsieve.labels.pairs import GROUP, LINKED, ROWS, audit_pairs, candidate_pairs
from pairsieve.report.labelled import estimates


def summary(truth: float, found: list[estimate.Estimate]) -> dict:
    """Mean estimate, largest error, interval coverage and mean width of repeated draws."""
    return {
        "truth": truth,
        "mean": float(np.mean([f.value for f in found])),
        "max_error": float(max(abs(f.value - truth) for f in found)),
        "coverage": float(np.mean([f.interval[0] <= truth <= f.interval[1] for f in found])),
        "width": float(np.mean([f.interval[1] - f.interval[0] for f in found])),
    }


def repeated(pairs: pl.DataFrame, n: int, draws: int) -> dict:
    """Coverage, width and error of the audit's labelled estimate over ``draws`` draws of
    ``n``, beside the model's own estimate."""
    weights = pairs[ROWS].to_numpy().astype(np.float64)
    truth = float((pairs["label"].to_numpy() * weights).sum() / weights.sum())
    found = []
    for seed in range(draws):
        answers = sample.draw(pairs, n, seed).select("pair_id", "label")
        found.append(estimate.share_from_labels(pairs, answers, weight=ROWS)[0])
    model = float((pairs[S.P_SAME].to_numpy() * weights).sum() / weights.sum())
    return {**summary(truth, found), "model": model}


def clustered(name: str, data_root: Path, work: Path) -> pl.DataFrame:
    """The judged candidate pairs of the catalog ``name`` clustered as a build does (truth
    hidden), with ``label`` = the truth's answer."""
    catalog = benchmark(name).load(data_root)
    layout = RunLayout(work / f"run-{name}")
    hidden = catalog.drop(S.TRUE_PRODUCT_ID, S.TRUE_PRODUCT_NAME, strict=False)
    cluster.run(PairsieveConfig(), cluster.Inputs(hidden), layout.stage_dir("cluster"))
    layout.listings.parent.mkdir(parents=True, exist_ok=True)
    catalog.select(S.LISTING_ID, S.TITLE).write_parquet(layout.listings)
    truth = catalog.select(S.LISTING_ID, pl.col(S.TRUE_PRODUCT_ID).cast(pl.String))
    out = candidate_pairs(layout.root)
    for end, alias in ((S.LISTING_A, "_ta"), (S.LISTING_B, "_tb")):
        out = out.join(truth.rename({S.LISTING_ID: end, S.TRUE_PRODUCT_ID: alias}), on=end)
    return out.with_columns((pl.col("_ta") == pl.col("_tb")).alias("label")).drop("_ta", "_tb")


def repeated_build(pairs: pl.DataFrame, n: int, draws: int) -> dict:
    """Coverage and width of the merged-pair precision and candidate recall (as `pairsieve
    build --labels` computes them, `report.labelled.estimates`) over draws."""
    linked, y = pairs[LINKED].to_numpy(), pairs["label"].to_numpy()
    found: dict[str, list] = {"precision": [], "recall": []}
    for seed in range(draws):
        drawn = sample.draw(pairs, n, seed, by=GROUP, shares=sample.BUILD_SHARES)
        answers = drawn.select("pair_id", "label")
        precision, recall, _ = estimates(pairs.drop("label"), answers)
        found["precision"].append(precision)
        found["recall"].append(recall)
    return {
        "precision": summary(float(y[linked].mean()), found["precision"]),
        "recall": summary(float((y & linked).sum() / max(y.sum(), 1)), found["recall"]),
    }


def build_table(args: argparse.Namespace) -> None:
    print(
        f"\n| catalog | judged pairs | figure | true value | {args.n} labels: mean estimate "
        "| largest error | 95% interval covers | mean width |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in WITHIN_SHOP_TRUTH:
        pairs = clustered(name, args.data_root, args.work)
        for key, found in repeated_build(pairs, args.n, args.draws).items():
            figure = "merged-pair precision" if key == "precision" else "candidate recall"
            print(
                f"| {name} | {pairs.height:,} | {figure} | {found['truth']:.3f} | "
                f"**{found['mean']:.3f}** | {found['max_error']:.3f} | {found['coverage']:.0%} "
                f"| {found['width']:.3f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-audit-estimate"))
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--draws", type=int, default=40)
    parser.add_argument(
        "--data-root", type=Path, help="also the clustering figures (three catalogs)"
    )
    args = parser.parse_args()
    print(
        f"| catalog | dataset | distinct pairs | true rate | p_same alone | {args.n} labels: mean "
        "estimate | largest error | 95% interval covers | mean width |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for folder in sorted(p for p in args.work.iterdir() if (p / "catalog.parquet").exists()):
        for audit_dir in sorted(folder.glob("audit-*")):
            pairs = with_truth(audit_pairs(audit_dir), folder / "catalog.parquet")
            found = repeated(pairs, args.n, args.draws)
            print(
                f"| {folder.name} | {audit_dir.name.removeprefix('audit-')} | {pairs.height:,} | "
                f"{found['truth']:.3f} | {found['model']:.3f} | **{found['mean']:.3f}** | "
                f"{found['max_error']:.3f} | {found['coverage']:.0%} | {found['width']:.3f} |",
                flush=True,
            )
    if args.data_root is not None:
        build_table(args)


if __name__ == "__main__":
    main()
