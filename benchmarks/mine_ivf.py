"""Mining's index exact against IVF below `knn.exact_max`: are the negatives as good, and how
much faster is the mine stage?

Mining searches an exact index up to `knn.exact_max` listings (200,000) and IVF above. This
builds each catalog twice in this process (`harness.stages.build`, warm embedding cache): with
the default, and with `knn.exact_max=1` so that mining's first search round is IVF (the exact
scan below the margin runs either way). It compares the kept negatives: the share that are the
positive's product by the truth (copies), the share of the exact build's (query, positive,
negative) rows the IVF build also keeps, negatives per pair, and the mine stage's seconds.

    .venv/bin/python benchmarks/mine_ivf.py --data-root ../shared/data \
        [--catalogs pricerunner,walmart-amazon] [--synth 11600] [--work /tmp/ps-mine-ivf]

Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

import polars as pl
from harness.catalogs import catalog_inputs, mined_copy_share
from harness.stages import build

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig

EVERY_INDEX_IVF = 1
ROW = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID]


def one_catalog(name: str, args: argparse.Namespace) -> dict:
    data = catalog_inputs(name, args.data_root, args.work / name.replace(":", "-") / "data")
    catalog = pl.read_parquet(data / "catalog.parquet")
    found = {"catalog": name, "listings": catalog.height}
    kept = {}
    for label, cfg in (
        ("exact", PairsieveConfig()),
        ("ivf", PairsieveConfig().with_(**{"knn.exact_max": EVERY_INDEX_IVF})),
    ):
        run = args.work / name.replace(":", "-") / label
        shutil.rmtree(run, ignore_errors=True)
        figures = build(cfg, data, run)
        negatives = pl.read_parquet(run / "mine" / "negatives.parquet")
        stage = json.loads((run / "mine" / "stage.json").read_text())
        kept[label] = negatives.select(ROW)
        found[label] = {
            "mine_s": figures["seconds"]["mine"],
            "search_s": stage["timings"].get("search_s"),
            "copies": mined_copy_share(negatives, catalog),
            "per_pair": stage["details"]["negatives_per_pair"],
            "short": stage["details"]["pairs_short"],
        }
    found["kept_by_both"] = kept["exact"].join(kept["ivf"], on=ROW).height / kept["exact"].height
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--catalogs", default="pricerunner,walmart-amazon")
    parser.add_argument("--synth", default="11600", help="Generated catalogs' products, commas.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-mine-ivf"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    names = [*filter(None, args.catalogs.split(","))]
    names += [f"synth:{p}" for p in filter(None, args.synth.split(","))]
    print(
        "| catalog | listings | copies among negatives, exact / IVF | exact's negatives IVF "
        "keeps | negatives per pair, exact / IVF | pairs short | mine s (search s), exact / IVF |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in names:
        found = one_catalog(name, args)
        exact, ivf = found["exact"], found["ivf"]
        print(
            f"| {name} | {found['listings']:,} | {exact['copies']:.2%} / {ivf['copies']:.2%} | "
            f"{found['kept_by_both']:.1%} | {exact['per_pair']:.3f} / {ivf['per_pair']:.3f} | "
            f"{exact['short']} / {ivf['short']} | {exact['mine_s']:.1f} ({exact['search_s']:.1f})"
            f" / {ivf['mine_s']:.1f} ({ivf['search_s']:.1f}) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
