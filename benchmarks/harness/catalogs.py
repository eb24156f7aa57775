"""The catalogs a benchmark builds, as a folder holding `catalog.parquet` and `clicks.parquet`:
the generated marketplace, or a shared catalog with its derived click log; and the truth to
check a build's mined negatives against.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.datasets import clicklog, synth
from pairsieve.datasets.benchmarks import benchmark

GENERATED_SEED = 3  # the seed of every generated catalog in benchmarks/RESULTS.md


def generated_marketplace(folder: Path, products: int) -> Path:
    """`folder`, holding `pairsieve synth --products P --seed 3`'s files (written once)."""
    if not (folder / "clicks.parquet").exists():
        synth.generate(folder, products, seed=GENERATED_SEED)
    return folder


def catalog_inputs(name: str, data_root: Path, folder: Path) -> Path:
    """`folder`, holding the catalog ``name`` (a shared benchmark, or `synth:P` for the
    generated marketplace) and its click log (the benchmark's derived one, seed 13)."""
    if name.startswith("synth:"):
        return generated_marketplace(folder, int(name.split(":")[1]))
    if not (folder / "clicks.parquet").exists():
        folder.mkdir(parents=True, exist_ok=True)
        catalog = benchmark(name).load(data_root)
        catalog.write_parquet(folder / "catalog.parquet")
        clicklog.derive_clicks(catalog, seed=13).write_parquet(folder / "clicks.parquet")
    return folder


def mined_copy_share(negatives: pl.DataFrame, catalog: pl.DataFrame) -> float:
    """Share of a build's mined negatives (`mine/negatives.parquet`) whose true product is
    their positive's."""
    truth = catalog.select(S.LISTING_ID, S.TRUE_PRODUCT_ID)
    joined = negatives.join(
        truth.rename({S.LISTING_ID: S.POSITIVE_LISTING_ID, S.TRUE_PRODUCT_ID: "_p"}),
        on=S.POSITIVE_LISTING_ID,
    ).join(
        truth.rename({S.LISTING_ID: S.NEGATIVE_LISTING_ID, S.TRUE_PRODUCT_ID: "_n"}),
        on=S.NEGATIVE_LISTING_ID,
    )
    return float((joined["_p"] == joined["_n"]).mean())
