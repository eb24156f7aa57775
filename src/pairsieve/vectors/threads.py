"""A fixed thread count for the matrix products whose scores must be the same bytes anywhere.

A BLAS product splits its work over its threads, and the split moves a score's last bit: the demo
build's negatives differ between `OMP_NUM_THREADS=1` and the 2 threads of a 2-core machine. A
Dask worker starts with one thread (its nanny sets `OMP_NUM_THREADS=1`), a thread-runner build
with one per core, so a mined negative could depend on which runner scored it. Mining and the
cluster stage's kNN search therefore score with exactly `SCORING_THREADS` threads wherever they
run: the count of the 2-core machines the pinned bytes come from, so those bytes stay.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import faiss
from threadpoolctl import threadpool_limits

SCORING_THREADS = 2

_lock = threading.Lock()


@contextmanager
def fixed_threads(n: int = SCORING_THREADS) -> Iterator[None]:
    """Inside the block, faiss (OpenMP, and its BLAS, which follows OpenMP) and numpy's BLAS run
    ``n`` threads. One block at a time per process: BLAS's thread pool is the process's, so
    partitions mapped on threads take turns for their products (their filtering still
    overlaps) instead of oversubscribing the cores and calling one pool from two threads."""
    with _lock:
        before = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(n)
        limits = threadpool_limits(limits=n, user_api="blas")
        try:
            yield
        finally:
            limits.restore_original_limits()
            faiss.omp_set_num_threads(before)
