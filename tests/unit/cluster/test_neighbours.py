"""The embedding signal's kNN search as a map over spans of titles: here, through a plan read
back from disk, and in fresh single-thread processes, the pairs of one exact search."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.cluster import neighbours
from pairsieve.config import FAISS_BLOCK, PairsieveConfig
from pairsieve.core.partitions import Mapper
from pairsieve.vectors import minhash
from tests.maps import from_disk, in_processes


def _vectors(n: int, seed: int = 0) -> np.ndarray:
    """Unit vectors in clumps of five near copies, so each has close neighbours."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n // 5 + 1, 384)).astype(np.float32)
    vectors = np.repeat(centres, 5, axis=0)[:n] + 0.3 * rng.standard_normal((n, 384))
    vectors = vectors.astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


CFG = PairsieveConfig().with_(**{"cluster.knn_k": 5, "cluster.min_cosine": 0.5})


def brute_force_pairs(vectors: np.ndarray, k: int, min_cosine: float) -> np.ndarray:
    """(m, 2) sorted i < j pairs of each vector with its k nearest others at min_cosine or
    more, from the whole similarity matrix."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    nearest = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    rows = np.repeat(np.arange(len(vectors)), k)
    cols = nearest.ravel()
    keep = sims[rows, cols] >= min_cosine
    pairs = np.sort(np.stack([rows[keep], cols[keep]], axis=1), axis=1)
    return np.unique(pairs, axis=0)


def test_mapped_spans_find_the_pairs_of_one_exact_search(tmp_path, monkeypatch):
    vectors = _vectors(400)
    whole, _ = neighbours.knn_pairs(CFG, vectors, Mapper.local(tmp_path / "here"))
    assert len(whole) > 400 and (whole[:, 0] < whole[:, 1]).all()
    assert np.array_equal(whole, brute_force_pairs(vectors, 5, 0.5))
    monkeypatch.setattr(neighbours, "KNN_QUERIES", 64)  # 7 spans
    mapper = Mapper(tmp_path / "a", from_disk)
    spanned, _ = neighbours.knn_pairs(CFG, vectors, mapper)
    assert np.array_equal(spanned, whole)
    assert sorted(p.name for p in (tmp_path / "a").glob("neighbours-*.npy"))[:2] == [
        "neighbours-0000000000.npy",
        "neighbours-0000000064.npy",
    ]
    rows = np.arange(0, 400, 3)  # only some titles' neighbours (a day-2 build's changed ones)
    some, _ = neighbours.knn_pairs(CFG, vectors, mapper, rows=rows)
    assert np.isin(some, rows).any(axis=1).all() and len(some) < len(whole)


def test_single_thread_workers_find_the_same_pairs_as_this_process(tmp_path):
    """Fresh processes that read the plan from disk, with enough queries for faiss's BLAS path
    (the scores' thread independence itself: tests/unit/vectors/test_threads.py)."""
    vectors = _vectors(3_000, seed=1)
    here, _ = neighbours.knn_pairs(CFG, vectors, Mapper.local(tmp_path / "here"))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OMP_NUM_THREADS", "1")
        env.setenv("OPENBLAS_NUM_THREADS", "1")
        mapper = Mapper(tmp_path / "there", in_processes)
        there, _ = neighbours.knn_pairs(CFG, vectors, mapper)
    assert np.array_equal(here, there)


def test_the_search_is_ivf_above_its_own_limit_and_finds_the_close_pairs(tmp_path, monkeypatch):
    """The neighbour search has its own exact limit (`cluster.knn_exact_max`), below mining's
    (`knn.exact_max`): above it the index is IVF, and the close neighbours it is asked for are
    still found."""
    vectors = _vectors(2_000, seed=2)
    cfg = CFG.with_(**{"cluster.knn_exact_max": 1_000, "knn.nprobe": 8})
    assert cfg.knn.exact_max > len(vectors)  # mining would still search exactly
    assert neighbours.knn_settings(cfg).exact_max == 1_000
    monkeypatch.setattr(neighbours, "KNN_QUERIES", 256)  # 8 spans
    found, index = neighbours.knn_pairs(cfg, vectors, Mapper.local(tmp_path / "ivf"))
    assert index.kind == "IndexIVFFlat"
    exact = brute_force_pairs(vectors, 5, 0.5)
    recalled = np.isin(minhash.pair_codes(exact), minhash.pair_codes(found)).mean()
    assert recalled >= 0.999  # one probe finds 0.998
    # The titles are searched list by list, in spans: the pairs of one search in title order.
    scores, ids = index.search(vectors, 6)
    source = np.repeat(np.arange(len(vectors)), 6)
    keep = scores.ravel() >= 0.5
    pairs = np.sort(np.stack([source[keep], ids.ravel()[keep]], axis=1), axis=1)
    assert np.array_equal(found, np.unique(pairs[pairs[:, 0] != pairs[:, 1]], axis=0))


def test_the_search_slices_its_index_by_its_own_setting_and_finds_the_same_pairs(tmp_path):
    """`cluster.knn_slice_vectors` slices the neighbour search's index, whatever mining's
    `knn.slice_vectors`; the slices' merged answers are those of one index."""
    vectors = _vectors(3 * FAISS_BLOCK, seed=4)
    cfg = CFG.with_(**{"cluster.knn_slice_vectors": FAISS_BLOCK})
    assert neighbours.knn_settings(cfg).slice_vectors == FAISS_BLOCK != cfg.knn.slice_vectors
    sliced, index = neighbours.knn_pairs(cfg, vectors, Mapper.local(tmp_path / "sliced"))
    assert len(index.starts) == 3
    whole, one = neighbours.knn_pairs(CFG, vectors, Mapper.local(tmp_path / "whole"))
    assert len(one.starts) == 1 and np.array_equal(sliced, whole)
