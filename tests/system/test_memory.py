"""The memory budget: a watchdog stops an over-budget run with a clear message (exit 2) and the
last published build stays intact; ingest streams the click log batch by batch."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pytest

from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core.memory import BUDGET_KNOB, MemoryWatchdog, resolve_budget_mb, rss_mb
from pairsieve.errors import PairsieveError
from pairsieve.ingest import clicks as ingest_clicks
from pairsieve.ingest import stage as ingest
from pairsieve.orchestration.publish import verify
from tests.paths import SAMPLE_DIR
from tests.system.test_crash import build_env, make_fixture

__all__ = ["build_env"]  # the module-scoped fixture, shared with test_crash

PAIRSIEVE = str(Path(sys.executable).parent / "pairsieve")
SAMPLE = SAMPLE_DIR


def _watch_once(budget_mb: float, wait_s: float) -> tuple[MemoryWatchdog, list[PairsieveError]]:
    seen: list[PairsieveError] = []
    fired = threading.Event()

    def record(error: PairsieveError) -> None:
        seen.append(error)
        fired.set()

    watchdog = MemoryWatchdog(budget_mb, interval_s=0.05, on_exceed=record)
    watchdog.stage = "cluster"
    watchdog.start()
    fired.wait(wait_s)
    watchdog.stop()
    return watchdog, seen


def test_watchdog_names_stage_rss_and_knob_once_over_budget():
    watchdog, seen = _watch_once(budget_mb=1, wait_s=5)
    assert len(seen) == 1  # it reports once, then stops watching
    error = seen[0]
    assert error.code == "memory_budget" and error.knob == BUDGET_KNOB
    text = str(error)
    assert "stage cluster" in text and "over the 1 MB budget" in text
    assert f"config={BUDGET_KNOB}" in text
    assert watchdog.peak_mb > 1


def test_watchdog_stays_quiet_under_budget():
    watchdog, seen = _watch_once(budget_mb=10**7, wait_s=0.3)
    assert seen == []
    assert 0 < watchdog.peak_mb <= rss_mb() * 2


def test_zero_budget_is_memory_in_use_plus_available():
    import psutil

    budget = resolve_budget_mb(0)
    assert budget > rss_mb()
    assert budget <= rss_mb() + psutil.virtual_memory().total / 2**20
    assert resolve_budget_mb(512) == 512.0


def _tree_digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): io.sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _run(args: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PAIRSIEVE, *args], capture_output=True, text=True, timeout=600, env=env, check=False
    )


def test_ingest_over_budget_exits_2_and_leaves_earlier_output(tmp_path):
    """A real `pairsieve ingest` subprocess under a 40 MB budget (the interpreter alone holds
    more): exit 2, one clear line naming stage, RSS and knob, and the earlier OUT/ingest intact."""
    inputs = [
        "--clicks",
        str(SAMPLE / "clicks.parquet"),
        "--catalog",
        str(SAMPLE / "catalog.parquet"),
    ]
    out = tmp_path / "out"
    first = _run(["ingest", *inputs, "--out", str(out)])
    assert first.returncode == 0, first.stderr
    before = _tree_digests(out / "ingest")
    other = tmp_path / "clicks.parquet"  # different input: the stage would re-run, not skip
    pl.read_parquet(SAMPLE / "clicks.parquet").head(1000).write_parquet(other)
    inputs[1] = str(other)
    stopped = _run(["ingest", *inputs, "--out", str(out), "--set", f"{BUDGET_KNOB}=40"])
    assert stopped.returncode == 2, stopped.stderr
    line = " ".join(stopped.stderr.split())
    assert "error [memory_budget] stopped during stage ingest:" in line
    assert "MB resident, over the 40 MB budget" in line and f"(config={BUDGET_KNOB})" in line
    assert "Traceback" not in stopped.stderr
    assert _tree_digests(out / "ingest") == before


@pytest.mark.slow
def test_build_over_budget_exits_2_and_published_build_stays_intact(tmp_path, build_env):
    """A real `pairsieve build` over its budget stops with exit 2 and the message; the build
    published earlier in the same --out is byte-for-byte untouched and still verifies, and a
    rerun without the budget completes."""
    inputs = make_fixture(tmp_path / "in", n_listings=60)
    out, cache = tmp_path / "out", tmp_path / "cache"

    def build(clicks: Path, *settings: str) -> subprocess.CompletedProcess:
        args = ["build", "--clicks", str(clicks), "--catalog", str(inputs[1]), "--out", str(out)]
        for item in (f'cache_dir="{cache}"', *settings):
            args += ["--set", item]
        return _run(args, env=build_env)

    first = build(inputs[0])
    assert first.returncode == 0, first.stderr
    published = _tree_digests(out)
    fewer = tmp_path / "in" / "fewer-clicks.parquet"
    pl.read_parquet(inputs[0]).head(200).write_parquet(fewer)
    stopped = build(fewer, f"{BUDGET_KNOB}=40")
    assert stopped.returncode == 2, stopped.stderr
    line = " ".join(stopped.stderr.split())
    assert "[memory_budget] stopped during stage ingest:" in line, line
    assert f"(config={BUDGET_KNOB})" in line and "Traceback" not in stopped.stderr
    assert _tree_digests(out) == published
    assert verify(out) == []
    rerun = build(fewer)
    assert rerun.returncode == 0, rerun.stderr
    assert verify(out) == [] and _tree_digests(out) != published


def _ingest(tmp_path: Path, name: str, clicks: list[str], catalog: str) -> dict[str, str]:
    out = tmp_path / name
    out.mkdir()
    result = ingest.run(PairsieveConfig(), ingest.Inputs(clicks, catalog), out)
    assert result.balanced()
    return {p.name: io.sha256_file(p) for p in sorted(out.glob("*.parquet"))} | {
        "accounting": str(result.to_json()["details"])
    }


def test_batches_give_the_same_bytes_as_one_batch(tmp_path, monkeypatch):
    """The click log streamed in batches of 7 rows, across two files of two formats, with text
    timestamps in mixed formats whose inferred format comes from a row of a later batch: the
    same outputs and accounting as one batch."""
    clicks = pl.read_parquet(SAMPLE / "clicks.parquet").head(600)
    formats = ["%Y/%m/%d %H:%M:%S", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d"]
    stamps = [
        None if i < 20 else "junk" if i % 11 == 0 else ts.strftime(formats[i % 3])
        for i, ts in enumerate(clicks["ts"].to_list())
    ]
    clicks = clicks.with_columns(
        pl.Series("ts", stamps),
        pl.col("clicks").cast(pl.String),
        pl.when(pl.int_range(pl.len()) % 13 == 0)
        .then(pl.lit("\u3000"))
        .otherwise("query")
        .alias("query"),
    )
    first, second = tmp_path / "clicks-1.csv", tmp_path / "clicks-2.jsonl"
    clicks.head(300).write_csv(first)
    clicks.slice(300).write_ndjson(second)
    inputs = ([str(first), str(second)], str(SAMPLE / "catalog.parquet"))
    monkeypatch.setattr(ingest_clicks, "BATCH_ROWS", 10**6)
    whole = _ingest(tmp_path, "whole", *inputs)
    monkeypatch.setattr(ingest_clicks, "BATCH_ROWS", 7)
    assert _ingest(tmp_path, "batched", *inputs) == whole
    assert "missing_query" in whole["accounting"] and "bad_value" in whole["accounting"]
