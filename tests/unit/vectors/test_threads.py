"""Scores computed inside `fixed_threads` are the same bytes in a process that started with one
thread (a Dask worker) as in this one. Outside it, the last bits follow the thread count on
CPUs whose kernels split a product by thread (faiss's search on the processors this was
written on); others give the same bits either way, so that is not a test."""

from __future__ import annotations

import contextlib
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import faiss
import numpy as np
import pytest

from pairsieve.vectors.threads import fixed_threads


def _scores(fixed: bool) -> tuple[bytes, bytes]:
    """faiss's exact search and numpy's matrix product over fixed random vectors: the two kinds
    of BLAS products mining and clustering score with."""
    rng = np.random.default_rng(0)
    queries = rng.standard_normal((1024, 384), dtype=np.float32)
    vectors = rng.standard_normal((20_000, 384), dtype=np.float32)
    index = faiss.IndexFlatIP(384)
    index.add(vectors)
    with fixed_threads() if fixed else contextlib.nullcontext():
        searched, _ = index.search(queries, 50)
        product = queries @ vectors[:4096].T
    return searched.tobytes(), product.tobytes()


def _in_a_single_thread_process(fixed: bool) -> tuple[bytes, bytes]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(_scores, fixed).result()


@pytest.fixture()
def one_thread_env(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")


@pytest.mark.skipif(faiss.omp_get_max_threads() < 2, reason="needs 2 cores to differ")
def test_fixed_threads_give_the_same_scores_as_a_single_thread_process(one_thread_env):
    assert _in_a_single_thread_process(fixed=True) == _scores(fixed=True)


def test_fixed_threads_restore_the_counts_they_found():
    before = faiss.omp_get_max_threads()
    for _ in range(2):
        with fixed_threads(1):
            assert faiss.omp_get_max_threads() == 1
        assert faiss.omp_get_max_threads() == before
