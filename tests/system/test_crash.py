"""Crash safety: `pairsieve build` SIGKILLed inside every stage resumes to byte-identical output,
and the published `--out` folder never shows a half-written file.

One uninterrupted build gives the reference. A second build folder starts out holding a complete
earlier build (its stages marked stale, so every stage re-runs), then a chain of builds is killed
one stage further each time (ingest, cluster while embedding into a cold cache, mine, shards,
report) and a last build completes. A watcher thread polls the published
folder the whole time: it must always verify against its manifest and hold no temporary files.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pairsieve.core import io
from pairsieve.core.layout import staging_dir
from pairsieve.orchestration.publish import verify
from pairsieve.schemas import STAGE_JSON
from tests.paths import REPO

SAMPLE = REPO / "data" / "sample"
STAGES = ("ingest", "cluster", "mine", "shards", "report")
# Small embedding partitions so a kill during `cluster` can land between cache parts.
BUILD_SETTINGS = ("embed.partition_size=100",)
KILL_SEED = int(os.environ.get("PAIRSIEVE_KILL_SEED") or random.SystemRandom().randrange(2**32))
STALE = "stale-earlier-build"
SLOW_STAGE_S = 1.5  # cluster and mine run for seconds on the fixture, the others for ~0.1 s


def make_fixture(folder: Path, n_listings: int = 300) -> tuple[Path, Path]:
    """A slice of the bundled sample: whole products (so clusters stay intact) and their clicks."""
    catalog = pl.read_parquet(SAMPLE / "catalog.parquet")
    keep = catalog["true_product_id"].unique(maintain_order=True)
    catalog = catalog.filter(pl.col("true_product_id").is_in(keep[:120].implode())).head(n_listings)
    clicks = pl.read_parquet(SAMPLE / "clicks.parquet")
    clicks = clicks.filter(pl.col("listing_id").is_in(catalog["listing_id"].implode()))
    folder.mkdir(parents=True, exist_ok=True)
    catalog.write_parquet(folder / "catalog.parquet")
    clicks.write_parquet(folder / "clicks.parquet")
    return folder / "clicks.parquet", folder / "catalog.parquet"


def build_command(inputs: tuple[Path, Path], out: Path, cache: Path) -> list[str]:
    args = [str(Path(sys.executable).parent / "pairsieve"), "build"]
    args += ["--clicks", str(inputs[0]), "--catalog", str(inputs[1]), "--out", str(out)]
    for item in (f'cache_dir="{cache}"', *BUILD_SETTINGS):
        args += ["--set", item]
    return args


def start_build(inputs: tuple[Path, Path], out: Path, cache: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        build_command(inputs, out, cache),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def shard_digests(out: Path) -> dict[str, str]:
    shards = out / "shards"
    return {p.name: io.sha256_file(p) for p in sorted(shards.iterdir()) if p.name != STAGE_JSON}


@pytest.fixture(scope="module")
def build_env(prefect_harness) -> dict:
    """Subprocess builds talk to the session's Prefect API instead of each starting its own."""
    from prefect.settings import PREFECT_API_URL

    env = dict(os.environ)
    env["PREFECT_API_URL"] = str(PREFECT_API_URL.value())
    return env


@dataclass
class Watcher:
    """Polls a published build folder: every look must verify and show no temporary file."""

    out: Path
    looks: int = 0
    complete_looks: int = 0
    problems: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def look(self) -> None:
        if not self.out.exists():
            return
        before = os.stat(self.out).st_ino
        try:
            names = [p.relative_to(self.out) for p in self.out.rglob("*")]
            found = verify(self.out)
        except FileNotFoundError:
            found = ["vanished"]
        if os.stat(self.out).st_ino != before:
            return  # swapped while reading: a new complete build replaced the old one
        self.looks += 1
        temporary = [str(n) for n in names if any(part.startswith(".") for part in n.parts)]
        if found or temporary:
            self.problems.append(f"{found} {temporary}")
        else:
            self.complete_looks += 1

    def run(self) -> None:
        while not self.stop.is_set():
            self.look()
            time.sleep(0.02)


def _stage_state(staging: Path, stage: str) -> str:
    """``running`` (its temp folder exists), ``done`` (fresh stage.json) or ``pending``."""
    if not staging.exists():
        return "pending"
    if any(p.name.startswith(f".{stage}.tmp-") for p in staging.iterdir()):
        return "running"
    result = staging / stage / STAGE_JSON
    try:
        if json.loads(result.read_text())["input_fingerprint"] != STALE:
            return "done"
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        pass
    return "pending"


def kill_in_stage(proc: subprocess.Popen, out: Path, stage: str, rng: random.Random) -> str:
    """SIGKILL ``proc`` at a random moment while ``stage`` runs (or right after it completes,
    if it finished between two polls); returns where the kill landed."""
    staging = staging_dir(out)
    delay = rng.uniform(0.0, SLOW_STAGE_S if stage in ("cluster", "mine") else 0.05)
    while proc.poll() is None:
        state = _stage_state(staging, stage)
        if state == "running":
            time.sleep(delay)
            where = f"{stage} after {delay:.2f}s: {_stage_state(staging, stage)}"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return where
        if state == "done":
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return f"{stage}: done"
        time.sleep(0.005)
    return f"{stage}: build exited {proc.returncode} before the kill"


def seed_earlier_build(reference: Path, out: Path) -> None:
    """``out`` holds a complete build whose stages all look out of date to the next build."""
    shutil.copytree(reference, out)
    for stage in STAGES:
        path = out / stage / STAGE_JSON
        result = json.loads(path.read_text())
        result["input_fingerprint"] = STALE
        path.write_text(json.dumps(result))


def cache_parts_loadable(cache: Path) -> int:
    parts = list(cache.rglob("part-*.npz"))
    for part in parts:
        with np.load(part) as data:
            assert len(data["keys"]) == len(data["vectors"]) > 0, part
    return len(parts)


@pytest.mark.slow
def test_killed_builds_resume_to_identical_output_and_never_expose_partial_files(
    tmp_path, build_env, record_property
):
    rng = random.Random(KILL_SEED)
    inputs = make_fixture(tmp_path / "in")
    reference, cache = tmp_path / "reference", tmp_path / "cache"
    code, err = finish(start_build(inputs, reference, cache, build_env))
    assert code == 0, err
    assert verify(reference) == []
    # Same cache path (it is part of the config hash in the manifest), but cold again.
    cache.rename(tmp_path / "cache-reference")

    out = tmp_path / "out"
    seed_earlier_build(reference, out)
    watcher = Watcher(out)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    landed = []
    try:
        for stage in STAGES:
            proc = start_build(inputs, out, cache, build_env)
            landed.append(kill_in_stage(proc, out, stage, rng))
            assert "before the kill" not in landed[-1], (landed, proc.stderr.read())
        code, err = finish(start_build(inputs, out, cache, build_env))
    finally:
        watcher.stop.set()
        thread.join()
    context = f"kill seed {KILL_SEED} (rerun with PAIRSIEVE_KILL_SEED); kills landed: {landed}"
    record_property("kills", context)
    assert code == 0, f"{context}\n{err}"
    assert watcher.problems == [], context
    assert watcher.complete_looks > 10, context
    assert verify(out) == [], context
    assert shard_digests(out) == shard_digests(reference), context
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [
        ".out.lock",
        ".reference.lock",
    ], "staging folders left behind after publication"
    assert cache_parts_loadable(cache) > 0, context


def test_restarted_stage_removes_what_a_killed_run_left(tmp_path):
    """A SIGKILL skips `staged_dir`'s cleanup; the stage's next run removes the leftovers, so
    they are never published with the build."""
    final = tmp_path / "cluster"
    for leftover in (".cluster.tmp-0123456789ab", ".cluster.old-0123456789ab"):
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "products.parquet").write_bytes(b"half")
    (tmp_path / ".mine.tmp-0123456789ab").mkdir()  # another stage's: left for its own rerun
    with io.staged_dir(final) as tmp:
        (tmp / STAGE_JSON).write_text("{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mine.tmp-0123456789ab", "cluster"]


def test_sigterm_stops_everything_the_build_started_and_a_rerun_resumes(build_env, tmp_path):
    """SIGTERM (how a scheduler stops a job) is taken as Ctrl-C: within 10 s no process the build
    started is alive (its own ephemeral Prefect server included), the lock is free, and the
    staging folder lets a rerun skip the stages already done."""
    import signal

    import psutil

    inputs = make_fixture(tmp_path / "in", 150)
    out, cache = tmp_path / "out", tmp_path / "cache"
    own_api = {k: v for k, v in build_env.items() if k != "PREFECT_API_URL"}
    own_api["PREFECT_HOME"] = str(tmp_path / "prefect-home")  # its own ephemeral server
    proc = start_build(inputs, out, cache, own_api)
    ingested = staging_dir(out) / "ingest" / STAGE_JSON
    deadline = time.monotonic() + 300
    while not ingested.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ingested.exists(), proc.communicate()[1]
    started = psutil.Process(proc.pid).children(recursive=True)
    assert started, "the build runs its ephemeral API server as a child process"
    proc.send_signal(signal.SIGTERM)
    code, err = finish(proc, timeout=60)
    assert code == 130, err
    assert "Traceback" not in err
    time.sleep(10)
    alive = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    first = ingested.read_text()
    code, err = finish(start_build(inputs, out, cache, build_env))
    assert code == 0, err
    assert re.search(r"ingest: [^\n]*\(skipped: up to date\)", " ".join(err.split()))
    assert verify(out) == []
    assert json.loads((out / "ingest" / STAGE_JSON).read_text()) == json.loads(first)
