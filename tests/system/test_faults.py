"""Faults of the environment end in one clear line: exit 2, no traceback, at most 40 lines, the
last in the `error [code]` form naming the path, URL or setting; a read-only HOME still builds.
A failed build leaves nothing beside the published one, which still verifies.

Real faults where the machine allows them (a tmpfs mount as root, a folder without write
permission otherwise, closed ports for the API and the scheduler); a full disk injected at each
stage's write (`core.io.atomic_path`), so every stage is covered without root.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pairsieve.cli import app
from pairsieve.core import io
from pairsieve.core.layout import staging_dir
from pairsieve.datasets import synth
from pairsieve.orchestration.publish import verify
from pairsieve.schemas import MANIFEST_FILE

STAGES = ("ingest", "cluster", "mine", "shards", "report")
MAX_LINES = 40


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("fault-inputs")
    synth.generate(folder, n_products=80, seed=1)
    return folder / "clicks.parquet", folder / "catalog.parquet"


def build_args(inputs: tuple[Path, Path], out: Path, *settings: str) -> list[str]:
    args = ["build", "--clicks", str(inputs[0]), "--catalog", str(inputs[1]), "--out", str(out)]
    for item in settings:
        args += ["--set", item]
    return args


def run_cli(args: list[str], **env: str | None) -> tuple[int, str]:
    environment = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "pairsieve"), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr


def assert_one_clear_line(
    code: int, output: str, errors: str | tuple[str, ...], names: str
) -> None:
    lines = output.strip().splitlines()
    errors = (errors,) if isinstance(errors, str) else errors
    assert code == 2, output
    assert "Traceback" not in output, output
    assert len(lines) <= MAX_LINES, output
    assert lines[-1].startswith(tuple(f"error [{e}]" for e in errors)), output
    assert names in lines[-1], output


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A real small or read-only file system at ``folder`` (root only; skips otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)])
    if mounted.returncode != 0:
        pytest.skip("this machine cannot mount a tmpfs")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@contextlib.contextmanager
def read_only_folder(folder: Path) -> Iterator[Path]:
    """A folder this process cannot write: a read-only mount as root, no write bit otherwise."""
    if os.geteuid() == 0:
        with tmpfs(folder, "size=1m,ro") as mounted:
            yield mounted
        return
    folder.mkdir(parents=True)
    folder.chmod(0o555)
    try:
        yield folder
    finally:
        folder.chmod(0o755)


def test_a_missing_model_folder_is_one_line_and_leaves_no_lock(inputs, tmp_path):
    cache = tmp_path / "cache"
    code, output = run_cli(
        build_args(
            inputs,
            tmp_path / "out",
            f'embed.model_path="{tmp_path / "no-model"}"',
            f'cache_dir="{cache}"',
        )
    )
    assert_one_clear_line(code, output, "missing_file", "config=embed.model_path")
    assert not list(cache.rglob("*.lock"))
    assert not (tmp_path / "out").exists() and not staging_dir(tmp_path / "out").exists()


def test_a_prefect_api_that_does_not_answer_is_named(inputs, tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/api"
    code, output = run_cli(build_args(inputs, tmp_path / "out"), PREFECT_API_URL=url)
    assert_one_clear_line(code, output, "prefect_api", f"url={url}")


def test_a_scheduler_that_does_not_answer_is_named(inputs, tmp_path):
    address = f"tcp://127.0.0.1:{closed_port()}"
    settings = ('runner.task_runner="dask"', f'runner.address="{address}"')
    code, output = run_cli(build_args(inputs, tmp_path / "out", *settings))
    assert_one_clear_line(code, output, "scheduler_unreachable", "config=runner.address")
    assert f"url={address}" in output


def test_an_out_folder_on_a_read_only_file_system_is_named(inputs, tmp_path):
    with read_only_folder(tmp_path / "ro") as folder:
        code, output = run_cli(build_args(inputs, folder / "run"))
    assert_one_clear_line(code, output, ("read_only", "permission_denied"), f"file={folder}")


@pytest.mark.parametrize("command", ["audit", "clean", "experiment"])
def test_audit_clean_and_experiment_tell_a_read_only_out_the_same_way(command, published, tmp_path):
    args = {
        "audit": ["audit", "--dataset", str(published / "shards")],
        "clean": ["clean", "--dataset", str(published / "shards")],
        "experiment": ["experiment", "--run", str(published)],
    }[command]
    with read_only_folder(tmp_path / "ro") as folder:
        code, output = run_cli([*args, "--out", str(folder / "out")])
    assert_one_clear_line(code, output, ("read_only", "permission_denied"), f"file={folder}")


def test_a_read_only_home_still_builds_and_says_where_its_homes_went(inputs, tmp_path):
    with read_only_folder(tmp_path / "home") as home:
        code, output = run_cli(
            build_args(inputs, tmp_path / "out"), HOME=str(home), PREFECT_HOME=None
        )
    assert code == 0, output
    assert "Traceback" not in output
    assert "Prefect's home is" in output and "the embedding cache is" in output
    assert verify(tmp_path / "out") == []


def test_a_disk_that_fills_during_a_build_is_left_as_it_was(inputs, tmp_path):
    size = 12 * sum(p.stat().st_size for p in inputs)  # passes the check, too small to build
    with tmpfs(tmp_path / "small", f"size={size}") as disk:
        code, output = run_cli(build_args(inputs, disk / "run", f'cache_dir="{tmp_path}/c"'))
        left = sorted(p.name for p in disk.iterdir())
    assert_one_clear_line(code, output, "disk_full", f"file={disk / 'run'}")
    assert left == [".run.lock"], left  # the lock of a folder is all that stays
    assert "removed" in output


@pytest.fixture(scope="module")
def published(inputs, tmp_path_factory, prefect_harness) -> Path:
    out = tmp_path_factory.mktemp("faults") / "run"
    result = CliRunner().invoke(app, build_args(inputs, out))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("stage", STAGES)
def test_a_full_disk_at_any_stage_write_leaves_the_published_build_intact(
    stage, published, inputs, monkeypatch
):
    manifest = (published / "shards" / MANIFEST_FILE).read_bytes()
    real_atomic_path = io.atomic_path
    hit = []

    @contextlib.contextmanager
    def full_disk_in_stage(path):
        if f".{stage}.tmp-" in str(path):
            hit.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        with real_atomic_path(path) as tmp:
            yield tmp

    monkeypatch.setattr(io, "atomic_path", full_disk_in_stage)
    # Another input encoding reruns every stage (parquet inputs read the same).
    result = CliRunner().invoke(app, build_args(inputs, published, 'ingest.csv_encoding="latin-1"'))

    assert hit, f"the {stage} stage wrote nothing through core.io"
    assert_one_clear_line(result.exit_code, result.output, "disk_full", f"file={hit[0]}")
    assert not staging_dir(published).exists()
    assert sorted(p.name for p in published.parent.iterdir()) == [".run.lock", "run"]
    assert verify(published) == []
    assert (published / "shards" / MANIFEST_FILE).read_bytes() == manifest
