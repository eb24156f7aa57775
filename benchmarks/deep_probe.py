"""Mining's search below the margin: the exact scan against the IVF index probed wider
(`knn.deep_nprobe`), on a finished build's ingest and cluster outputs and a warm cache.

Runs the mine stage once per setting in this process, each into a run folder of its own that
holds copies of the build's ingest and cluster stages, and compares the kept negatives with the
exact scan's: the share that are the positive's product by the truth (copies), the share of the
exact rows the probed run also keeps, negatives per pair, pairs short, queries scanned exactly,
and the stage's seconds (total and summed search). The build's index must be IVF (more listings
than `knn.exact_max`) for the setting to matter.

    .venv/bin/python benchmarks/deep_probe.py --build RUN/build --cache RUN/cache \
        --catalog DATA/catalog.parquet [--nprobe 32,64,128] [--work /tmp/ps-deep-probe] \
        [--set knn.exact_max=1]

(``--set knn.exact_max=1`` makes a smaller catalog's index IVF, to compare there.)

Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

import polars as pl
from harness.catalogs import mined_copy_share

from pairsieve import schemas as S
from pairsieve.cli.app import parse_override
from pairsieve.config import PairsieveConfig
from pairsieve.orchestration import steps

ROW = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID]
UPSTREAM = ("ingest", "cluster")


def mine_once(build: Path, cfg: PairsieveConfig, run: Path) -> tuple[pl.DataFrame, dict]:
    """The mine stage of ``build``'s outputs under ``cfg``, in ``run`` (made afresh)."""
    shutil.rmtree(run, ignore_errors=True)
    for stage in UPSTREAM:
        shutil.copytree(build / stage, run / stage)
    steps.mine_step(cfg, run)
    stage = json.loads((run / "mine" / "stage.json").read_text())
    return pl.read_parquet(run / "mine" / "negatives.parquet"), stage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--catalog", type=Path, required=True, help="with true_product_id")
    parser.add_argument("--nprobe", default="32,64,128")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-deep-probe"))
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE, a setting")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    catalog = pl.read_parquet(args.catalog)
    settings = dict(parse_override(item) for item in args.set)
    base = PairsieveConfig(cache_dir=str(args.cache)).with_(**settings)
    probes = [None, *(int(n) for n in args.nprobe.split(","))]
    print(
        "| search below the margin | copies among negatives | exact's rows kept | negatives per "
        "pair | pairs short | queries below the margin / scanned exactly | mine s | search s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    exact_rows = None
    for nprobe in probes:
        cfg = base.with_(**{"knn.deep_nprobe": nprobe})
        label = "exact scan" if nprobe is None else f"IVF, {nprobe} lists"
        negatives, stage = mine_once(args.build, cfg, args.work / label.replace(" ", "-"))
        details, timings = stage["details"], stage["timings"]
        if details["index"] != "IndexIVFFlat":
            raise SystemExit(f"{args.build}: the index is {details['index']}, not IVF")
        rows = negatives.select(ROW)
        exact_rows = rows if exact_rows is None else exact_rows
        below = sum(r["queries"] for r in details["retrieval_rounds"][1:])
        print(
            f"| {label} | {mined_copy_share(negatives, catalog):.2%} | "
            f"{exact_rows.join(rows, on=ROW).height / exact_rows.height:.1%} | "
            f"{details['negatives_per_pair']:.3f} | {details['pairs_short']:,} | "
            f"{below:,} / {details['queries_scanned_below']:,} | {stage['timings']['total_s']:.1f}"
            f" | {timings['search_s']:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
