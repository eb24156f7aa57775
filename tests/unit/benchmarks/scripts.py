"""Benchmark scripts are imported as their folder runs them: as top-level modules of benchmarks/,
with the shared `harness` package beside them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from tests.paths import REPO

BENCHMARKS = REPO / "benchmarks"


@contextmanager
def benchmark_module(name: str) -> Iterator[ModuleType]:
    """benchmarks/<name>.py (or a `harness.` module) imported with its folder on the path; it and
    every module of benchmarks/ it imported, the harness's included, are forgotten afterwards, so
    the next script imports them afresh."""
    before = set(sys.modules)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        yield importlib.import_module(name)
    for module in set(sys.modules) - before:
        if Path(getattr(sys.modules[module], "__file__", None) or "/").is_relative_to(BENCHMARKS):
            sys.modules.pop(module)
