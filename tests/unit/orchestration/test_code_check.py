"""A mapped task stops with a clear error when its worker loaded other code than the build's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pairsieve
from pairsieve.errors import PairsieveError
from pairsieve.orchestration import flows


def _span_sum(plan: str, span: tuple[int, int], cfg: object) -> int:
    return sum(range(*span))


def test_a_task_runs_when_its_worker_loaded_the_builds_code() -> None:
    assert flows.partition_task.fn(_span_sum, "plan", (0, 4), None, flows._LOADED_CODE) == 6


def test_a_task_stops_when_its_worker_loaded_other_code() -> None:
    with pytest.raises(PairsieveError) as raised:
        flows.partition_task.fn(_span_sum, "plan", (0, 4), None, "0123456789abcdef")
    assert raised.value.code == "code_mismatch"
    assert "0123456789abcdef" in str(raised.value) and flows._LOADED_CODE in str(raised.value)


_UPGRADED_UNDER_A_RUNNING_WORKER = """
from pathlib import Path
from pairsieve.orchestration import flows  # the worker loads the code as it is now
from pairsieve.core.contract import code_version
from pairsieve.errors import PairsieveError
module = Path(flows.__file__).parent.parent / "core" / "io.py"
module.write_text(module.read_text() + "\\n# upgraded\\n")  # the package changes on disk
build = code_version.__wrapped__()  # the upgraded package's version, as a new build has it
try:
    flows.embed_partition_task.fn("texts.parquet", None, build)
except PairsieveError as error:
    print(error.code)
"""


def test_a_worker_started_before_an_upgrade_refuses_the_upgraded_builds_tasks(tmp_path) -> None:
    package = Path(pairsieve.__file__).parent
    shutil.copytree(package, tmp_path / "pairsieve", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _UPGRADED_UNDER_A_RUNNING_WORKER],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.strip() == "code_mismatch", done.stderr[-2000:]
