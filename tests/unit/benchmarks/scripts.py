"""Benchmark scripts are imported as their folder runs them: as top-level modules of benchmarks/."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import pytest

from tests.paths import REPO


@contextmanager
def benchmark_module(name: str) -> Iterator[ModuleType]:
    """benchmarks/<name>.py imported with its folder on the path; it and the sibling benchmarks
    it imported are forgotten afterwards."""
    before = set(sys.modules)
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "benchmarks"))
        yield importlib.import_module(name)
    for module in set(sys.modules) - before:
        if (getattr(sys.modules[module], "__file__", None) or "").startswith(
            str(REPO / "benchmarks")
        ):
            sys.modules.pop(module)
