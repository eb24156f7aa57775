"""What a few hundred labels buy the audit: its false-negative rate with labels from a simulated
labeller, repeated over many draws.

Needs the audits of `audit_estimate.py` (run it first with the same ``--work``): for each audited
dataset, the audit's pairs (``audit_pairs.parquet``) are labelled by the catalog's ground truth
standing in for a person, ``--draws`` times ``--n`` pairs drawn as `pairsieve label sample
--audit` draws them (seed = draw number), and each draw's estimate (`labels.estimate`) is set
against the true rate: how often its 95% interval covers it, how wide it is, how far the point
estimate lands.

    cd benchmarks && ../.venv/bin/python labels.py [--work /tmp/ps-audit-estimate] \
        [--n 300] [--draws 40]

Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.labels import estimate, sample
from pairsieve.labels.pairs import ROWS, audit_pairs


def with_truth(pairs: pl.DataFrame, catalog: Path) -> pl.DataFrame:
    """The audit's pairs with ``label``: the ground truth's answer (titles -> truth ids; a title
    of several products takes its smallest listing's)."""
    truth = (
        pl.read_parquet(catalog)
        .sort(S.LISTING_ID)
        .unique(S.TITLE, keep="first", maintain_order=True)
        .select(S.TITLE, pl.col(S.TRUE_PRODUCT_ID).cast(pl.String))
    )
    out = pairs
    for text, alias in (("text_a", "_ta"), ("text_b", "_tb")):
        out = out.join(truth.rename({S.TITLE: text, S.TRUE_PRODUCT_ID: alias}), on=text, how="left")
    same = pl.col("_ta").is_not_null() & (pl.col("_ta") == pl.col("_tb"))
    return out.with_columns(same.alias("label")).drop("_ta", "_tb")


def repeated(pairs: pl.DataFrame, n: int, draws: int) -> dict:
    """Coverage, width and error of the labelled estimate over ``draws`` draws of ``n``."""
    weights = pairs[ROWS].to_numpy().astype(np.float64)
    truth = float((pairs["label"].to_numpy() * weights).sum() / weights.sum())
    found = []
    for seed in range(draws):
        answers = sample.draw(pairs, n, seed).select("pair_id", "label")
        found.append(estimate.share_from_labels(pairs, answers, weight=ROWS)[0])
    values = np.array([f.value for f in found])
    return {
        "truth": truth,
        "model": float((pairs[S.P_SAME].to_numpy() * weights).sum() / weights.sum()),
        "mean": float(values.mean()),
        "max_error": float(np.abs(values - truth).max()),
        "coverage": float(np.mean([f.interval[0] <= truth <= f.interval[1] for f in found])),
        "width": float(np.mean([f.interval[1] - f.interval[0] for f in found])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-audit-estimate"))
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--draws", type=int, default=40)
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


if __name__ == "__main__":
    main()
