"""Split pure-Python work over the machine's two cores with one forked child.

Clustering's per-title attribute extraction and per-pair code comparisons are plain Python
loops over hundreds of thousands of items at 1M listings; a forked child takes the second half
and pickles its result back, which halves their wall time when the second core is free
(benchmarks/RESULTS.md, cluster throughput, round 2).
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def in_two_processes(fn: Callable[[int, int], _T], n: int) -> list[_T]:
    """``[fn(0, h), fn(h, n)]`` with h = n // 2, the second half computed by a forked child
    (the machine has 2 cores) and pickled back through a pipe; ordered and deterministic.

    For pure per-item Python work only: the child must not use polars or numba, whose thread
    pools do not survive a fork. Below `FORK_MIN_ITEMS` items (or without ``os.fork``) this
    is ``[fn(0, n)]``.
    """
    if n < FORK_MIN_ITEMS or not hasattr(os, "fork"):
        return [fn(0, n)]
    half = n // 2
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: compute, send, exit without running the parent's clean-up
        status = 1
        try:
            os.close(read)
            payload = pickle.dumps(fn(half, n), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write, "wb") as sink:
                sink.write(payload)
            status = 0
        except BaseException:
            log.exception("forked worker failed")
        finally:
            os._exit(status)
    os.close(write)
    try:
        # Closing ``read`` (also on an error here) unblocks a child still writing.
        with os.fdopen(read, "rb") as source:
            head = fn(0, half)
            payload = source.read()
    finally:
        status = os.waitpid(pid, 0)[1]
    if status != 0:
        raise RuntimeError(f"forked worker failed (wait status {status})")
    return [head, pickle.loads(payload)]


FORK_MIN_ITEMS = 20_000  # below this, forking (page copies, pickling) does not pay
