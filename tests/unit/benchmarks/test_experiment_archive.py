"""The experiment benchmark keeps its runs between sittings without keeping any catalog text:
scores go out keyed by query hash and come back with the build's own query texts."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from pairsieve.core.hashing import column_keys
from pairsieve.experiment.retrieval import METRICS
from tests.paths import REPO
from tests.unit.benchmarks.scripts import benchmark_module

QUERIES = ["iphone 8 64gb", "sandisk ultra 32gb", "nikon d750 body"]


@pytest.fixture(scope="module")
def experiment():
    with benchmark_module("experiment") as module:
        yield module


def _run(folder: Path, stem: str, recall: list[float]) -> pl.DataFrame:
    scores = pl.DataFrame({"query": QUERIES, "recall@10": recall, "ndcg@10": recall})
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    scores.write_parquet(folder / "runs" / f"{stem}.parquet")
    (folder / "runs" / f"{stem}.json").write_text('{"arm": "naive"}')
    return scores


def test_a_kept_run_holds_no_query_text_and_comes_back_whole(experiment, tmp_path):
    out, archive = tmp_path / "exp", tmp_path / "archive"
    scores = _run(out, "naive-tau0.05-seed0-0a", [1.0, 0.5, 0.0])
    (out / "results.json").write_text("{}")  # recomputed every time: not kept
    experiment.keep_runs(out, archive)
    assert sorted(p.name for p in archive.iterdir()) == [
        "naive-tau0.05-seed0-0a.json",
        "naive-tau0.05-seed0-0a.parquet",
    ]
    kept = pl.read_parquet(archive / "naive-tau0.05-seed0-0a.parquet")
    assert kept.columns == ["query_key", "recall@10", "ndcg@10"]
    assert not any(q.encode() in (archive / "naive-tau0.05-seed0-0a.parquet").read_bytes()
                   for q in QUERIES)  # fmt: skip
    fresh = tmp_path / "fresh"
    experiment.restore_runs(archive, fresh, list(reversed(QUERIES)))
    restored = pl.read_parquet(fresh / "runs" / "naive-tau0.05-seed0-0a.parquet")
    assert restored.equals(scores)
    assert (fresh / "runs" / "naive-tau0.05-seed0-0a.json").read_text() == '{"arm": "naive"}'


def test_a_run_of_other_queries_is_not_restored(experiment, tmp_path):
    out, archive = tmp_path / "exp", tmp_path / "archive"
    _run(out, "naive-tau0.05-seed0-0a", [1.0, 0.5, 0.0])
    experiment.keep_runs(out, archive)
    fresh = tmp_path / "fresh"
    experiment.restore_runs(archive, fresh, QUERIES[:2])
    assert not (fresh / "runs").exists()


def test_a_kept_run_is_never_overwritten(experiment, tmp_path):
    out, archive = tmp_path / "exp", tmp_path / "archive"
    _run(out, "a", [1.0, 0.5, 0.0])
    experiment.keep_runs(out, archive)
    _run(out, "a", [0.0, 0.0, 0.0])
    experiment.keep_runs(out, archive)
    assert pl.read_parquet(archive / "a.parquet")["recall@10"].to_list() == [1.0, 0.5, 0.0]


def test_each_catalog_and_share_has_its_own_archive(experiment):
    args, _ = experiment.parse_args(
        ["--catalog", "synth:1000", "--work", "w", "--copy-share", "0.25"]
    )
    assert experiment.archive_of(args).name == "synth-1000-share0.25"
    args, _ = experiment.parse_args(["--catalog", "altosight", "--work", "w"])
    assert experiment.archive_of(args) == REPO / "benchmarks" / "experiment_runs" / "altosight"
    args, _ = experiment.parse_args(
        ["--catalog", "pricerunner", "--work", "w", "--build-set", "mine.relative_margin=none"]
    )
    assert experiment.archive_of(args).name == "pricerunner-mine.relative_margin=none"


@pytest.fixture(scope="module")
def ablation():
    with benchmark_module("ablation") as module:
        yield module


def test_an_ablation_is_paired_on_the_queries_both_runs_share(ablation):
    metrics = {"recall@10": [1.0, 0.5, 0.0], "ndcg@10": [1.0, 0.5, 0.0], "mrr@10": [1.0, 0.5, 0.0]}
    arm = pl.DataFrame({"query": ["a", "b", "c"], **metrics})
    # b and c, in another order, each 0.25 lower; d is not shared.
    lower = {m: [0.9, -0.25, 0.25] for m in metrics}
    baseline = pl.DataFrame({"query": ["d", "c", "b"], **lower})
    result = ablation.shared_difference([arm], [baseline])
    assert result["queries"] == 2
    difference, (lo, hi) = result["recall@10"]
    assert (difference, lo, hi) == pytest.approx((0.25, 0.25, 0.25))


def test_an_ablation_pairs_seed_with_seed_and_reads_kept_runs(experiment, ablation):
    """Seed 1's runs are kept ones (hashed queries), seed 0's hold the text; the difference is
    seed 0's 0.1 and seed 1's 0.3 on the shared queries, never a cross-seed pairing."""

    def run(queries: list[str], scores: list[float], kept: bool = False) -> pl.DataFrame:
        frame = pl.DataFrame({"query": queries, **{m: scores for m in METRICS}})
        if kept:
            keys = column_keys(frame["query"]).alias(experiment.QUERY_KEY)
            return frame.select(keys, pl.exclude("query"))
        return frame

    arms = [run(["a", "b"], [0.6, 0.6]), run(["b", "a", "x"], [0.9, 0.9, 0.0], kept=True)]
    baselines = [run(["a", "b", "y"], [0.5, 0.5, 1.0]), run(["a", "b"], [0.6, 0.6], kept=True)]
    result = ablation.shared_difference(arms, baselines)
    assert result["queries"] == 2
    difference, (lo, hi) = result["ndcg@10"]
    assert difference == pytest.approx(0.2)
    assert lo == pytest.approx(0.1) and hi == pytest.approx(0.3)  # a draw of two same seeds


def test_the_runs_kept_in_the_repo_hold_no_catalog_text():
    """Only a run's facts and its keyed scores: never a miner's rows, never a query."""
    kept = sorted((REPO / "benchmarks" / "experiment_runs").glob("**/*"))
    files = [p for p in kept if p.is_file()]
    for path in files:
        assert path.parent.parent.name == "experiment_runs", f"{path}: one folder per experiment"
        assert path.suffix in (".json", ".parquet") and not path.name.startswith("mined-"), path
        if path.suffix == ".parquet":
            assert "query" not in pl.read_parquet_schema(path), path
