"""`pairsieve build` as a user runs it, on the thread runner and on a local Dask cluster: the
peak memory of the build's process and of each Dask worker, the wall time, and whether the two
wrote the same products, negatives and shards.

Takes a folder with ``clicks.parquet`` and ``catalog.parquet`` (for example the generated
marketplace `stage_memory.py` left) and an embedding cache, warm or not (both builds share it,
so whichever runs second embeds nothing):

    .venv/bin/python benchmarks/build_workers.py --data /tmp/ps-250k/synth-58500 \
        --cache /tmp/ps-250k/cache --work /tmp/ps-build [--workers 2 --memory-limit 4GB] \
        [--arms threads dask] [--set KEY=VALUE] [--json FIGURES.json]

- ``threads``: ``pairsieve build`` with the default runner, one process;
- ``dask``: the same command with ``runner.task_runner="dask"`` against a `LocalCluster` of worker
  processes, each with a memory limit, ``threads_per_worker=1``; its resident sets are sampled
  every 0.1 s next to the build's.

Each build is a child process (the CLI), so its peak is its own, reported with the stage that
was running when it came; Prefect runs on the ephemeral API in a fresh ``PREFECT_HOME`` under
``--work``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from harness.builds import run_build
from harness.workers import cluster_arguments, dask_workers

from pairsieve.core.io import sha256_file
from pairsieve.core.layout import RunLayout

ARMS = ("threads", "dask")


def output_hashes(out: Path) -> dict[str, str]:
    """sha256 of the products, the negatives (kept and dropped) and every shard file."""
    layout = RunLayout(out)
    files = [layout.products, layout.negatives, layout.negatives_dropped]
    files += sorted(layout.shards.glob("*.parquet"))
    return {str(path.relative_to(out)): sha256_file(path) for path in files}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    cluster_arguments(parser)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    args = parser.parse_args()
    work = args.work / time.strftime("%H%M%S")
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "PREFECT_HOME": str(work / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    cli = [str(Path(sys.executable).parent / "pairsieve")]  # the console script, as a user runs it
    base = ["build", "--clicks", str(args.data / "clicks.parquet")]
    base += ["--catalog", str(args.data / "catalog.parquet")]
    settings = [f"cache_dir={args.cache}", *args.set]
    figures: dict = {"memory_limit": args.memory_limit}
    with dask_workers(args.workers, args.memory_limit) as (address, worker_pids):
        for arm in args.arms:
            arm_settings = list(settings)
            if arm == "dask":
                arm_settings += ['runner.task_runner="dask"']
                arm_settings += [f'runner.address="{address}"']
            out = work / arm
            command = [*cli, *base, "--out", str(out)]
            for item in arm_settings:
                command += ["--set", item]
            pids = worker_pids if arm == "dask" else []
            figures[arm] = {**run_build(command, env, pids, out), "sha256": output_hashes(out)}
            print(arm, json.dumps(figures[arm]), flush=True)
    hashes = {json.dumps(figures[arm]["sha256"], sort_keys=True) for arm in args.arms}
    figures["same_bytes"] = len(hashes) == 1
    print(f"same bytes on {', '.join(args.arms)}:", figures["same_bytes"])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
