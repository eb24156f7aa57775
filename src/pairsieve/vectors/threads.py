"""A fixed thread count for the matrix products whose scores must be the same bytes anywhere.

A BLAS product splits its work over its threads, and the split moves a score's last bit: the demo
build's negatives differ between `OMP_NUM_THREADS=1` and the 2 threads of a 2-core machine. A
Dask worker starts with one thread (its nanny sets `OMP_NUM_THREADS=1`), a thread-runner build
with one per core, so a mined negative could depend on which runner scored it. Mining therefore
scores with exactly `SCORING_THREADS` threads wherever it runs: the count of the 2-core machines
the pinned bytes come from, so those bytes stay.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import faiss
from threadpoolctl import threadpool_limits

SCORING_THREADS = 2

_lock = threading.Lock()
_holders = 0
_limits: Any = None


@contextmanager
def fixed_threads(n: int = SCORING_THREADS) -> Iterator[None]:
    """Inside the block, faiss (OpenMP, and its BLAS, which follows OpenMP) and numpy's BLAS run
    ``n`` threads. OpenMP's count is per calling thread, so each thread sets its own; numpy's
    BLAS pool is the process's, so it is set by the first thread in and restored by the last
    one out (mapped tasks on a thread runner overlap)."""
    global _holders, _limits
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    with _lock:
        if _holders == 0:
            _limits = threadpool_limits(limits=n, user_api="blas")
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                _limits.restore_original_limits()
                _limits = None
        faiss.omp_set_num_threads(before)
