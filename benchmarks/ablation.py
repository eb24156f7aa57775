"""One arm's runs against another's from a different build, on the held-out queries all share.

An ablation of the build (`benchmarks/experiment.py --build-set ...`) changes which rows keep
negatives, so its held-out query set differs a little from the default build's and the
experiment cannot pair the two. This pairs them on the queries they share:

    .venv/bin/python benchmarks/ablation.py ARM_SEED0.parquet[,ARM_SEED1.parquet,...] \
        BASELINE_SEED0.parquet[,BASELINE_SEED1.parquet,...]

Each argument is a comma-separated list of runs' per-query scores, one per seed in the same
seed order on both sides (`EXP/runs/ARM-tauT-seedS-HASH.parquet`, or a kept run under
`benchmarks/experiment_runs/`, whose queries are hashed). Prints the shared query count and,
per metric, the mean difference with its paired bootstrap interval over queries and seeds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
from harness.runs import QUERY_KEY

from pairsieve import schemas as S
from pairsieve.core.hashing import column_keys
from pairsieve.experiment.compare import paired_difference
from pairsieve.experiment.retrieval import METRICS


def _keyed(run: pl.DataFrame) -> pl.DataFrame:
    """A run's scores keyed by the hash of the query, whether it holds the text or the hash."""
    if QUERY_KEY in run.columns:
        return run
    return run.select(column_keys(run[S.QUERY]).alias(QUERY_KEY), pl.exclude(S.QUERY))


def shared_difference(arm: list[pl.DataFrame], baseline: list[pl.DataFrame]) -> dict[str, object]:
    """Per metric, (difference, (lo, hi)) of `arm - baseline` over the queries every run scored;
    run s of `arm` is paired with run s of `baseline` (the same seed)."""
    if len(arm) != len(baseline):
        raise SystemExit(f"{len(arm)} arm runs against {len(baseline)} baseline runs")
    runs = [_keyed(run) for run in (*arm, *baseline)]
    shared = set.intersection(*(set(run[QUERY_KEY].to_list()) for run in runs))
    keys = pl.DataFrame({QUERY_KEY: sorted(shared)}, schema={QUERY_KEY: pl.UInt64})
    aligned = [keys.join(run, on=QUERY_KEY, how="left") for run in runs]
    result: dict[str, object] = {"queries": keys.height}
    for metric in METRICS:
        scores = np.stack([run[metric].to_numpy() for run in aligned])
        result[metric] = paired_difference(scores[: len(arm)], scores[len(arm) :])
    return result


def _runs(paths: str) -> list[pl.DataFrame]:
    return [pl.read_parquet(Path(path)) for path in paths.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arm", help="the arm's runs, comma-separated, one per seed")
    parser.add_argument("baseline", help="the baseline's runs, in the same seed order")
    args = parser.parse_args()
    result = shared_difference(_runs(args.arm), _runs(args.baseline))
    print(f"{result['queries']:,} shared queries")
    for metric in METRICS:
        difference, (lo, hi) = result[metric]
        print(f"{metric}: {difference:+.4f} ({lo:+.4f} to {hi:+.4f})")


if __name__ == "__main__":
    main()
