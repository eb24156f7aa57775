"""The benchmark scripts share code only through benchmarks/harness: no script imports another,
so each runs alone and what two share has one home."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from pairsieve.datasets.scoring import score
from tests.unit.benchmarks.scripts import BENCHMARKS, benchmark_module

SCRIPTS = sorted(BENCHMARKS.glob("*.py"))
HARNESS = sorted((BENCHMARKS / "harness").glob("*.py"))


def imported(path: Path) -> set[str]:
    """The top-level names of the absolute imports anywhere in ``path`` (functions included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize(
    "path", SCRIPTS + HARNESS, ids=lambda p: p.relative_to(BENCHMARKS).as_posix()
)
def test_no_script_is_imported_by_another_script_or_the_harness(path: Path):
    scripts = {script.stem for script in SCRIPTS}
    assert imported(path) & scripts == set(), "import it from benchmarks/harness instead"


def test_the_harness_is_not_a_benchmark():
    assert HARNESS and (BENCHMARKS / "harness" / "__init__.py") in HARNESS
    with benchmark_module("run") as run:
        assert "harness" not in run.benchmarks()


@pytest.mark.parametrize("path", HARNESS, ids=lambda p: p.stem)
def test_every_harness_module_imports_as_the_scripts_import_it(path: Path):
    name = "harness" if path.stem == "__init__" else f"harness.{path.stem}"
    with benchmark_module(name) as module:
        assert module.__doc__, f"{name}: a docstring saying what it shares"


TRUTH = [0, 0, 0, 1]
PRECISE = [0, 0, 1, 2]  # pairwise precision 1, F1 0.5
MERGED = [0, 0, 0, 0]  # pairwise precision 0.5, F1 0.67


class Catalog:
    """A catalog clustered as ``found[(accept, link)]`` says (else every listing alone)."""

    def __init__(self, found: dict[tuple[float, float], list[int]]) -> None:
        self.found = found

    def scores(self, p, accept, link, unjudged=1.0):
        return score(self.found.get((accept, link), [0, 1, 2, 3]), TRUTH)


@pytest.mark.parametrize(
    ("min_precision", "picked"), [(0.9, (0.5, 0.3)), (0.0, (0.2, 0.1)), (1.1, (0.2, 0.1))]
)
def test_thresholds_are_the_best_f1_that_keeps_every_catalog_precise(min_precision, picked):
    """The best mean F1 among thresholds keeping every catalog at ``min_precision``; the best
    overall when none does."""
    with benchmark_module("harness.clustering") as clustering:
        runs = {
            "a": Catalog({(0.5, 0.3): PRECISE, (0.2, 0.1): MERGED}),
            "b": Catalog({(0.5, 0.3): PRECISE, (0.2, 0.1): MERGED, (0.8, 0.5): MERGED}),
        }
        p = {name: np.zeros(4) for name in runs}
        found = clustering.best_thresholds(runs, list(runs), p, min_precision, (1.0,))
    assert found == (*picked, 1.0)
