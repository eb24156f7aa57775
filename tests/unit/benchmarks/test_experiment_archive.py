"""The experiment benchmark keeps its runs between sittings: runs and mined rows go both ways,
nothing else is kept, and a kept file never overwrites one already there."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.paths import REPO


@pytest.fixture(scope="module")
def experiment():
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "benchmarks"))
        yield importlib.import_module("experiment")
    sys.modules.pop("experiment", None)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_runs_and_mined_rows_are_kept_and_put_back(experiment, tmp_path):
    out, archive = tmp_path / "exp", tmp_path / "archive"
    _write(out / "runs" / "naive-tau0.05-seed0-0a.parquet", "scores")
    _write(out / "runs" / "naive-tau0.05-seed0-0a.json", "{}")
    _write(out / "mined-naive-k1-0a.parquet", "rows")
    _write(out / "results.json", "{}")  # recomputed every time: not kept
    _write(out / "st-cache" / "vectors.npy", "x")  # the miner's embeddings: not kept
    experiment.copy_new(out, archive)
    kept = sorted(str(p.relative_to(archive)) for p in archive.rglob("*") if p.is_file())
    assert kept == [
        "mined-naive-k1-0a.parquet",
        "runs/naive-tau0.05-seed0-0a.json",
        "runs/naive-tau0.05-seed0-0a.parquet",
    ]
    fresh = tmp_path / "fresh"
    experiment.copy_new(archive, fresh)
    assert (fresh / "runs" / "naive-tau0.05-seed0-0a.parquet").read_text() == "scores"


def test_a_kept_file_never_overwrites(experiment, tmp_path):
    out, archive = tmp_path / "exp", tmp_path / "archive"
    _write(out / "runs" / "a.json", "new")
    _write(archive / "runs" / "a.json", "old")
    experiment.copy_new(out, archive)
    assert (archive / "runs" / "a.json").read_text() == "old"


def test_each_catalog_and_share_has_its_own_archive(experiment):
    args, _ = experiment.parse_args(
        ["--catalog", "synth:1000", "--work", "w", "--copy-share", "0.25"]
    )
    assert experiment.archive_of(args).name == "synth-1000-share0.25"
    args, _ = experiment.parse_args(["--catalog", "altosight", "--work", "w"])
    assert experiment.archive_of(args) == REPO / "benchmarks" / "experiment_runs" / "altosight"
