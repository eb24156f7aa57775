"""What judging the candidates inside the margin costs mining's filter, against the plain margin,
with and without the query's own ruling (`mine.query_must_rule_out`), in one process on a real
build's candidates (`benchmarks/experiment.py`'s work folder).

    .venv/bin/python benchmarks/judged_mining.py /tmp/ps-exp/pricerunner/build [--repeats 2]

Times `filters.filter_candidates` over every candidate the build retrieved, with
`mine.judge_margin` off, on without the query's ruling, and on with it (the default), in turn,
in batches of the queries as mining runs them (`MINE_QUERY_BATCH`), and prints the seconds,
the ratios and the drops per reason.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MINE_QUERY_BATCH, MineConfig
from pairsieve.mine import filters
from pairsieve.mine.copy_model_fit import mined_inputs


def filter_all(candidates, positives, info, cfg: MineConfig) -> tuple[float, dict[str, int]]:
    """Seconds to filter every batch of queries, and the drops per reason."""
    queries = positives[S.QUERY].unique().sort()
    counts: dict[str, int] = {}
    started = time.perf_counter()
    for lo in range(0, len(queries), MINE_QUERY_BATCH):
        names = queries.slice(lo, MINE_QUERY_BATCH).implode()
        part = candidates.filter(pl.col(S.QUERY).is_in(names))
        pos = positives.filter(pl.col(S.QUERY).is_in(names))
        _, dropped = filters.filter_candidates(part, pos, info, cfg, 0)
        for reason, n in filters.reason_counts(dropped).items():
            counts[reason] = counts.get(reason, 0) + n
    return time.perf_counter() - started, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    candidates, positives, info, _ = mined_inputs(args.build)
    ruled = MineConfig(copy_density=0.02)  # a fixed prior: the stage estimates it once
    variants = {
        "plain margin": ruled.model_copy(update={"judge_margin": False}),
        "judged": ruled.model_copy(update={"query_must_rule_out": False}),
        "judged, the query ruling": ruled,
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, cfg in variants.items():
            took, counts = filter_all(candidates, positives, info, cfg)
            seconds[name].append(took)
            print(f"{name}: {took:.1f} s, dropped {counts}", flush=True)
    best = {name: min(values) for name, values in seconds.items()}
    print(f"\n{candidates.height:,} candidates, {positives.height:,} pairs")
    for name, took in best.items():
        print(f"{name}: {took:.1f} s, {took / best['plain margin']:.2f}x the plain margin")


if __name__ == "__main__":
    main()
