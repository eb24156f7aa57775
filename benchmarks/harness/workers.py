"""A local Dask cluster of worker processes to run against, and the options of a benchmark that
runs on one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def dask_workers(workers: int, memory_limit: str) -> Iterator[tuple[str, list[int]]]:
    """A `LocalCluster` of ``workers`` processes, one thread and ``memory_limit`` each: its
    scheduler's address and the workers' pids, to sample."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit
        ) as cluster,
        Client(cluster) as client,
    ):
        yield cluster.scheduler_address, sorted(client.run(os.getpid).values())


def cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a run against `dask_workers`: the cache, where it works, the workers,
    build settings and where the figures go."""
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="4GB")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path, default=None)
