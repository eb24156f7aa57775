"""Split pure-Python work over the machine's cores with forked children.

Clustering's per-title attribute extraction and per-pair code comparisons are plain Python
loops over hundreds of thousands of items at 1M listings; forked children take all but the first
part and pickle their results back, which divides their wall time by the number of free cores
(benchmarks/RESULTS.md, "cluster").
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
_T = TypeVar("_T")

FORK_MIN_ITEMS = 10_000  # below this many items per part, forking (page copies, pickling) loses


def cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def bounds(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering 0..n, sizes differing by at most one."""
    edges = [n * i // parts for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def _child(fn: Callable[[int, int], object], lo: int, hi: int, write: int) -> None:
    """Compute ``fn(lo, hi)``, send it through ``write`` and exit without the parent's clean-up."""
    status = 1
    try:
        payload = pickle.dumps(fn(lo, hi), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as sink:
            sink.write(payload)
        status = 0
    except BaseException:
        log.exception("forked worker failed")
    finally:
        os._exit(status)


def in_processes(fn: Callable[[int, int], _T], n: int, workers: int | None = None) -> list[_T]:
    """``[fn(lo, hi) for each part]`` over ``workers`` (default: `cores`) contiguous parts of
    0..n, every part but the first computed by a forked child and pickled back through a pipe;
    ordered, so the result does not depend on the number of parts for a per-item ``fn``.

    For pure per-item Python work only: a child must not use polars or numba, whose thread
    pools do not survive a fork. With fewer than `FORK_MIN_ITEMS` items per part (or without
    ``os.fork``) this is ``[fn(0, n)]``.

    Raises:
        RuntimeError: when a forked worker fails.
    """
    parts = min(workers or cores(), n // FORK_MIN_ITEMS)
    if parts < 2 or not hasattr(os, "fork"):
        return [fn(0, n)]
    (head_lo, head_hi), *rest = bounds(n, parts)
    children = []
    for lo, hi in rest:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _child(fn, lo, hi, write)
        os.close(write)
        children.append((pid, read))
    failed = []
    try:
        # Reading every pipe (also after an error here) unblocks children still writing.
        head = fn(head_lo, head_hi)
    finally:
        payloads = []
        for pid, read in children:
            with os.fdopen(read, "rb") as source:
                payloads.append(source.read())
            status = os.waitpid(pid, 0)[1]
            if status != 0:
                failed.append(status)
    if failed:
        raise RuntimeError(f"forked worker failed (wait status {failed[0]})")
    return [head, *(pickle.loads(p) for p in payloads)]
