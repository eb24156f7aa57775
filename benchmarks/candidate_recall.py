"""Where each catalog's true pairs go under a clustering setting: never proposed, proposed and
held apart by `low_information`, proposed and judged; and the clustering's pairwise scores.

The issue of word-named catalogs turns on two rules, the cosine floor of the embedding
candidates and the `low_information` veto; this measures both on the five shared catalogs
for any settings, beside the defaults, with the truth hidden from the clustering.

    cd benchmarks && ../.venv/bin/python candidate_recall.py --data-root ../../shared/data \
        [--set cluster.min_cosine=0.0 ...] [--tfidf-k 10] [--catalogs pricerunner,altosight]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.clustering import recall_row

from pairsieve.cli.app import parse_override
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--set", action="append", default=[], help="config override KEY=VALUE")
    parser.add_argument("--catalogs", default=",".join(BENCHMARKS))
    parser.add_argument(
        "--tfidf-k", type=int, default=0, help="also judge each title's TF-IDF top-k neighbours"
    )
    parser.add_argument("--json", type=Path, help="append the rows to this file")
    args = parser.parse_args()
    cfg = PairsieveConfig().with_(**dict(parse_override(item) for item in args.set))
    print(
        "| catalog | P | R | F1 | true node pairs | candidate recall "
        "| true pairs held by low_information | pairs judged | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.catalogs.split(","):
        row = recall_row(cfg, name, args.data_root, args.tfidf_k)
        print("| " + " | ".join(str(v) for v in row.values()) + " |", flush=True)
        if args.json:
            with open(args.json, "a") as out:
                out.write(json.dumps({"set": args.set, "tfidf_k": args.tfidf_k, **row}) + "\n")


if __name__ == "__main__":
    main()
