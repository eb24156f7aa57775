"""benchmarks/run.py: one command lists every benchmark and runs any as it runs alone."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import REPO
from tests.unit.benchmarks.scripts import benchmark_module

RUN = REPO / "benchmarks" / "run.py"


def test_every_benchmark_is_listed_with_what_it_measures():
    with benchmark_module("run") as run:
        listed = run.benchmarks()
    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py")} - {"run"}
    assert set(listed) == scripts
    assert [name for name, line in listed.items() if not line] == []  # a docstring each


def test_a_benchmark_runs_through_the_entry_point_as_it_runs_alone():
    through = subprocess.run(
        [sys.executable, str(RUN), "ablation", "--help"], capture_output=True, text=True
    )
    alone = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "ablation.py"), "--help"],
        capture_output=True,
        text=True,
    )
    assert through.returncode == alone.returncode == 0
    assert through.stdout == alone.stdout and "usage: ablation.py" in through.stdout


def test_an_unknown_benchmark_is_one_clear_line():
    found = subprocess.run(
        [sys.executable, str(RUN), "no-such-benchmark"], capture_output=True, text=True
    )
    assert found.returncode != 0
    assert found.stderr.strip() == (
        "no benchmark 'no-such-benchmark': `python benchmarks/run.py` lists them"
    )
