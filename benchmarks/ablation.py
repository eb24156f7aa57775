"""One run against another from a different build, on the held-out queries both share.

An ablation of the build (`benchmarks/experiment.py --build-set ...`) changes which rows keep
negatives, so its held-out query set differs a little from the default build's and the
experiment cannot pair the two. This pairs them on the queries they share:

    .venv/bin/python benchmarks/ablation.py ARM_RUN.parquet BASELINE_RUN.parquet

Each argument is a run's per-query scores (`EXP/runs/ARM-tauT-seedS-HASH.parquet`). Prints the
shared query count and, per metric, the mean difference with its paired bootstrap interval.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.experiment.compare import paired_difference
from pairsieve.experiment.retrieval import METRICS


def shared_difference(arm: pl.DataFrame, baseline: pl.DataFrame) -> dict[str, object]:
    """Per metric, (difference, (lo, hi)) of `arm - baseline` over the queries both scored."""
    both = arm.join(baseline, on=S.QUERY, suffix="_baseline").sort(S.QUERY)
    result: dict[str, object] = {"queries": both.height}
    for metric in METRICS:
        a, b = both[metric].to_numpy(), both[f"{metric}_baseline"].to_numpy()
        result[metric] = paired_difference(a[None, :], b[None, :])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arm", type=Path)
    parser.add_argument("baseline", type=Path)
    args = parser.parse_args()
    result = shared_difference(pl.read_parquet(args.arm), pl.read_parquet(args.baseline))
    print(f"{result['queries']:,} shared queries")
    for metric in METRICS:
        difference, (lo, hi) = result[metric]
        print(f"{metric}: {difference:+.4f} ({lo:+.4f} to {hi:+.4f})")


if __name__ == "__main__":
    main()
