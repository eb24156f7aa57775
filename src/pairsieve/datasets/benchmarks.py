"""The public benchmark catalogs by name, and how each is scored.

A two-shop catalog's truth only links listings across its shops (Abt-Buy, Walmart-Amazon), so a
merge inside one shop is unlabelled rather than wrong: those are scored on cross-shop pairs
(``cross_source``). The others label pairs inside a shop too.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pairsieve.errors import PairsieveError


@dataclass(frozen=True)
class Benchmark:
    """One benchmark catalog: its loader module and whether only cross-shop pairs are labelled."""

    name: str
    module: str
    cross_source: bool

    def load(self, root: Path) -> pl.DataFrame:
        return importlib.import_module(f"pairsieve.datasets.{self.module}").load_catalog(root)


BENCHMARKS = {
    b.name: b
    for b in (
        Benchmark("pricerunner", "pricerunner", cross_source=False),
        Benchmark("abt-buy", "abtbuy", cross_source=True),
        Benchmark("walmart-amazon", "walmart_amazon", cross_source=True),
        Benchmark("altosight", "altosight", cross_source=False),
        Benchmark("alaska-cameras", "alaska", cross_source=False),
    )
}


def benchmark(name: str) -> Benchmark:
    """The benchmark called ``name``.

    Raises:
        PairsieveError: ``bad_argument`` naming the known ones.
    """
    if name not in BENCHMARKS:
        known = ", ".join(BENCHMARKS)
        raise PairsieveError("bad_argument", f"unknown data set {name!r} ({known})")
    return BENCHMARKS[name]
