"""A cold `pairsieve build` against sentence-transformers' `mine_hard_negatives`, side by side on
the same input: the one number a team that already mines with sentence-transformers compares.

The input is the generated marketplace (`pairsieve synth --products P --seed 3`, ~4.3 listings a
product). Both sides start from nothing a previous run left behind:

* pairsieve: `pairsieve build` as a user runs it (its CLI, Prefect's ephemeral API, the default
  int8 ONNX encoder), with an empty embedding cache, so the one-time ONNX export of the bundled
  weights is part of its time; `mine.num_negatives=3`, the rest at its defaults.
* sentence-transformers: a fresh Python process that loads the bundled MiniLM on torch as it
  ships (its own sequence limit) and runs `mine_hard_negatives` over the click log's distinct
  (query, clicked title) pairs with the catalog's titles as corpus: `use_faiss=True`,
  `num_negatives=3`, `relative_margin=0.05`, n-tuple output, no cache folder. Writing its
  dataset to parquet is counted.

Each side runs alone, one after the other, and is measured as a whole process tree
(`harness.process_tree.measure`: wall, CPU, peak memory). What RESULTS records is the wall
ratio. Both outputs are also checked by the truth: the share of negatives that are the
positive's product.

    .venv/bin/python benchmarks/versus_st.py --products 11600 [--work /tmp/ps-versus]

Prints a markdown row for benchmarks/RESULTS.md and writes WORK/versus-P.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import polars as pl
from harness.audit_data import clicked_pairs, negative_copy_share, truth_of_titles
from harness.catalogs import generated_marketplace, mined_copy_share
from harness.process_tree import measure
from harness.stages import stage_seconds

from pairsieve import schemas as S

NUM_NEGATIVES = 3
RELATIVE_MARGIN = 0.05
PAIRSIEVE = Path(sys.executable).with_name("pairsieve")


def st_mine(catalog_path: Path, clicks_path: Path, out: Path) -> None:
    """What a team runs today: the stock miner with its own encoding (no cache)."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from pairsieve.vectors.embed import bundled_model_path

    catalog = pl.read_parquet(catalog_path)
    pairs = clicked_pairs(catalog, pl.read_parquet(clicks_path))
    model = SentenceTransformer(bundled_model_path(), device="cpu")
    mined = mine_hard_negatives(
        Dataset.from_polars(pairs),
        model,
        corpus=catalog[S.TITLE].unique().sort().to_list(),
        num_negatives=NUM_NEGATIVES,
        relative_margin=RELATIVE_MARGIN,
        output_format="n-tuple",
        use_faiss=True,
        verbose=False,
    )
    mined.to_parquet(str(out))


def side_by_side(args: argparse.Namespace) -> dict:
    data = generated_marketplace(args.work / f"synth-{args.products}", args.products)
    catalog_path, clicks_path = data / "catalog.parquet", data / "clicks.parquet"
    catalog = pl.read_parquet(catalog_path)
    run = args.work / f"run-{args.products}"
    for stale in (run / "build", run / "cache"):
        shutil.rmtree(stale, ignore_errors=True)
    run.mkdir(parents=True, exist_ok=True)
    st_out = run / "st-mined.parquet"
    st = measure(
        [sys.executable, __file__, "--st-only", str(catalog_path), str(clicks_path), str(st_out)],
        args.interval,
    )
    build = [
        str(PAIRSIEVE),
        "build",
        "--clicks",
        str(clicks_path),
        "--catalog",
        str(catalog_path),
        "--out",
        str(run / "build"),
    ]
    sets = [f"cache_dir={run / 'cache'}", f"mine.num_negatives={NUM_NEGATIVES}"]
    ours = measure([*build, *[arg for s in sets for arg in ("--set", s)]], args.interval)
    if st["returncode"] or ours["returncode"]:
        raise SystemExit(
            f"a side failed: st rc={st['returncode']}, pairsieve rc={ours['returncode']}"
        )
    pairs = clicked_pairs(catalog, pl.read_parquet(clicks_path))
    return {
        "products": args.products,
        "listings": catalog.height,
        "pairs": pairs.height,
        "titles": catalog[S.TITLE].n_unique(),
        "st": st,
        "pairsieve": ours,
        "stage_s": stage_seconds(run / "build"),
        "ratio_wall": ours["wall_s"] / st["wall_s"],
        "copies_st": negative_copy_share(pl.read_parquet(st_out), truth_of_titles(catalog))[0],
        "copies_pairsieve": mined_copy_share(
            pl.read_parquet(run / "build" / "mine" / "negatives.parquet"), catalog
        ),
    }


def main() -> None:
    if sys.argv[1:2] == ["--st-only"]:
        st_mine(*map(Path, sys.argv[2:5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=11_600, help="~4.3 listings each.")
    parser.add_argument("--work", type=Path, default=Path("/tmp/ps-versus"))
    parser.add_argument("--interval", type=float, default=0.5, help="Seconds between samples.")
    args = parser.parse_args()
    found = side_by_side(args)
    (args.work / f"versus-{args.products}.json").write_text(json.dumps(found, indent=1))
    st, ours = found["st"], found["pairsieve"]
    print(
        "| listings | pairs | sentence-transformers wall s (CPU s, peak MB) | pairsieve wall s "
        "(CPU s, peak MB) | pairsieve / st wall | copies among negatives: st / pairsieve |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {found['listings']:,} | {found['pairs']:,} | {st['wall_s']:.0f} ({st['cpu_s']:.0f}, "
        f"{st['peak_tree_rss_mb']:,}) | {ours['wall_s']:.0f} ({ours['cpu_s']:.0f}, "
        f"{ours['peak_tree_rss_mb']:,}) | **{found['ratio_wall']:.2f}x** | "
        f"{found['copies_st']:.2%} / {found['copies_pairsieve']:.2%} |"
    )
    print("pairsieve stages (s):", found["stage_s"])


if __name__ == "__main__":
    main()
