"""Mining mapped on a local Dask cluster, on the thread runner and in one process: each worker's
peak memory, the wall time, and whether the three wrote the same bytes.

Takes a build folder whose ingest and cluster stages are done (for example one that
`stage_memory.py` left) and the embedding cache it used, then runs the mine stage three times
on links to those two stages:

    .venv/bin/python benchmarks/mine_workers.py --run /tmp/ps-mem/run-123255 \
        --cache /tmp/ps-mem/cache --work /tmp/ps-mine [--workers 2 --memory-limit 4GB] \
        [--set runner.mine_partition_queries=8192] [--arms here dask] [--json FIGURES.json]

- ``here``: every partition one after the other in this process (`mine.partitions.map_here`);
- ``threads``: the build flow's map, on Prefect's thread runner (`runner.workers` at a time);
- ``dask``: the same map through Prefect's `DaskTaskRunner` against a `LocalCluster` of worker
  processes, each with a memory limit; their resident sets are sampled every 0.1 s. Its
  partitions are a quarter the size (`--dask-partition`), so the bytes are compared across
  partition counts too.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from harness.peaks import Peaks
from harness.workers import cluster_arguments, dask_workers

from pairsieve.cli.app import parse_override
from pairsieve.config import load_config
from pairsieve.core.io import sha256_file
from pairsieve.core.layout import RunLayout
from pairsieve.orchestration import steps
from pairsieve.orchestration.flows import map_on_runner

ARMS = ("here", "threads", "dask")


def fresh_run(source: Path, folder: Path) -> Path:
    """A build folder whose ingest and cluster stages are links to ``source``'s."""
    folder.mkdir(parents=True)
    for stage in ("ingest", "cluster"):
        (folder / stage).symlink_to((source / stage).resolve())
    return folder


def mine_arm(arm: str, cfg, run_dir: Path, worker_pids: list[int]) -> dict:
    """Run the mine stage one way and return its figures."""
    map_spans = None if arm == "here" else map_on_runner
    peaks = Peaks([os.getpid(), *worker_pids])
    peaks.start()
    started = time.perf_counter()
    result = steps.mine_step(cfg, run_dir, map_spans=map_spans)
    seconds = time.perf_counter() - started
    layout = RunLayout(run_dir)
    gib = {pid: round(rss / 2**30, 2) for pid, (rss, _) in peaks.stop().items()}
    return {
        "seconds": round(seconds, 1),
        "partitions": result.details["partitions"],
        "flow_process_peak_gib": gib[os.getpid()],
        "worker_peaks_gib": [gib[pid] for pid in worker_pids],
        "timings": result.timings,
        "sha256": {
            "negatives": sha256_file(layout.negatives),
            "dropped": sha256_file(layout.negatives_dropped),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    cluster_arguments(parser)
    parser.add_argument("--dask-partition", type=int, default=4_096, help="queries per task")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    args = parser.parse_args()
    overrides = dict(parse_override(item) for item in args.set)
    base = {"cache_dir": str(args.cache), **overrides}
    work = args.work / time.strftime("%H%M%S")
    figures = {}
    with dask_workers(args.workers, args.memory_limit) as (address, worker_pids):
        for arm in args.arms:
            runner = {"runner.task_runner": arm if arm != "here" else "threads"}
            if arm == "dask":
                runner["runner.address"] = address
                runner["runner.mine_partition_queries"] = args.dask_partition
            cfg = load_config(None, {**base, **runner})
            run_dir = fresh_run(args.run, work / arm)
            pids = worker_pids if arm == "dask" else []
            figures[arm] = mine_arm(arm, cfg, run_dir, pids)
            print(arm, json.dumps(figures[arm]), flush=True)
        figures["memory_limit"] = args.memory_limit
    same = len({json.dumps(figures[arm]["sha256"]) for arm in args.arms}) == 1
    figures["same_bytes"] = same
    print(f"same bytes on {', '.join(args.arms)}:", same)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
