"""Where each catalog's true pairs go under a clustering setting: never proposed, proposed and
held apart by `low_information`, proposed and judged; and the clustering's pairwise scores.

The issue of word-named catalogs turns on two rules, the cosine floor of the embedding
candidates and the `low_information` veto; this measures both on the five shared catalogs
for any settings, beside the defaults, with the truth hidden from the clustering.

    cd benchmarks && ../.venv/bin/python candidate_recall.py --data-root ../../shared/data \
        [--set cluster.min_cosine=0.0 ...] [--catalogs pricerunner,altosight]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import polars as pl
from harness.clustering import benchmark_run

from pairsieve import schemas as S
from pairsieve.cli.app import parse_override
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS


def true_node_pairs(run) -> int:
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


def measure(cfg: PairsieveConfig, name: str, data_root: Path) -> dict:
    """One catalog clustered under ``cfg``, truth hidden: its scores, where its true pairs
    went, the pairs judged and the seconds taken."""
    started = time.perf_counter()
    run = benchmark_run(cfg, BENCHMARKS[name], data_root)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument("--catalogs", default=",".join(BENCHMARKS))
    parser.add_argument("--json", type=Path, help="append the rows to this file")
    args = parser.parse_args()
    cfg = PairsieveConfig().with_(**dict(parse_override(item) for item in args.set))
    print(
        "| catalog | P | R | F1 | candidate recall | true pairs held by low_information "
        "| pairs judged | s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.catalogs.split(","):
        row = measure(cfg, name, args.data_root)
        print("| " + " | ".join(str(v) for v in row.values()) + " |", flush=True)
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps({"set": args.set, **row}) + "\n")


if __name__ == "__main__":
    main()
