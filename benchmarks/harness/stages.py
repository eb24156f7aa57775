"""A build run stage by stage in this process, as the flow's tasks run it (no Prefect start-up),
timed per stage in wall and CPU seconds; and the seconds a published build's stages recorded.
"""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

from pairsieve.orchestration import steps
from pairsieve.vectors.embed import embed_partition


def cpu_seconds() -> float:
    """User + system CPU of this process (all threads) and its finished children."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


STAGES = ("ingest", "embed", "cluster", "mine", "shards", "report")


def run_stage(stage: str, cfg, data: Path, run_dir: Path, previous: Path | None = None) -> int:
    """Run one stage of an in-process build of ``data`` (its clicks and catalog parquet), as the
    flow's task would; returns the texts embedded (0 for every stage but embed)."""
    if stage == "ingest":
        clicks, catalog = str(data / "clicks.parquet"), str(data / "catalog.parquet")
        steps.ingest_step(cfg, [clicks], [catalog], run_dir)
    elif stage == "embed":
        partitions = steps.embedding_partitions(cfg, run_dir)
        embedded = sum(embed_partition(path, cfg).texts for path in partitions)
        steps.clear_embedding_partitions(run_dir)
        return embedded
    elif stage in ("cluster", "mine"):
        getattr(steps, f"{stage}_step")(cfg, run_dir, previous)
    else:
        getattr(steps, f"{stage}_step")(cfg, run_dir)
    return 0


def build(cfg, data: Path, run_dir: Path, previous: Path | None = None) -> dict:
    """Run every stage (product ids carried over from ``previous`` if given); return wall and CPU
    seconds per stage and texts embedded (CPU is the fair figure when other work shares the
    cores)."""
    timings, cpu, embedded = {}, {}, 0
    started, cpu_started = time.perf_counter(), cpu_seconds()
    for stage in STAGES:
        mark, cpu_mark = time.perf_counter(), cpu_seconds()
        embedded += run_stage(stage, cfg, data, run_dir, previous)
        timings[stage], cpu[stage] = time.perf_counter() - mark, cpu_seconds() - cpu_mark
    timings["total"], cpu["total"] = time.perf_counter() - started, cpu_seconds() - cpu_started
    return {
        "seconds": {k: round(v, 1) for k, v in timings.items()},
        "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
        "embedded": embedded,
    }


def stage_seconds(build: Path) -> dict[str, float]:
    """Seconds each stage of a published build folder recorded in its stage.json."""
    seconds = {}
    for path in sorted(build.glob("*/stage.json")):
        timings = json.loads(path.read_text()).get("timings", {})
        if "total_s" in timings:
            seconds[path.parent.name] = timings["total_s"]
    return seconds
