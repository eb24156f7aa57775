"""faiss index build and search: exact below `exact_max`, IVF above it (one shard; the shards
themselves are tested in test_index_slices.py)."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from pairsieve.config import KnnConfig
from pairsieve.vectors import knn
from pairsieve.vectors.index_slices import build as build_index
from pairsieve.vectors.knn import scan_below


def unit_vectors(n: int, dim: int = 32, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_exact_index_finds_each_vector_first_with_cosine_one():
    vectors = unit_vectors(200)
    index = build_index(vectors, KnnConfig())
    assert index.kind == "IndexFlatIP" and len(index.slices) == 1
    scores, ids = index.search(vectors, k=5)
    assert scores.shape == ids.shape == (200, 5) and ids.dtype == np.int64
    np.testing.assert_array_equal(ids[:, 0], np.arange(200))
    np.testing.assert_allclose(scores[:, 0], 1.0, atol=1e-5)
    assert (np.diff(scores, axis=1) <= 1e-6).all()  # best first
    expected = np.sort(vectors @ vectors.T, axis=1)[:, ::-1][:, :5]
    np.testing.assert_allclose(scores, expected, atol=1e-5)


def test_ties_are_ordered_by_id_whatever_the_insert_order():
    base = unit_vectors(1, seed=3)
    vectors = np.repeat(base, 6, axis=0)  # six identical listings
    scores, ids = build_index(vectors, KnnConfig()).search(base, k=6)
    assert ids[0].tolist() == [0, 1, 2, 3, 4, 5]
    assert np.ptp(scores) < 1e-6


def test_ties_in_a_ranking_ordered_in_place_as_a_full_sort_orders_them():
    rng = np.random.default_rng(4)
    scores = -np.sort(-rng.integers(0, 5, size=(30, 200)).astype(np.float32), axis=1)
    scores[:, 150:] = -np.inf  # padding, as faiss returns past the last vector found
    ids = rng.permutation(30 * 200).reshape(30, 200).astype(np.int64)
    ids[:, 150:] = -1
    order = np.lexsort((ids, -scores), axis=1)
    expected = np.take_along_axis(ids, order, 1)
    knn._ties_by_id(scores, ids)
    assert np.array_equal(ids, expected)


def test_k_larger_than_index_and_empty_queries():
    vectors = unit_vectors(3)
    scores, ids = build_index(vectors, KnnConfig()).search(vectors[:2], k=10)
    assert ids.shape == (2, 3)
    scores, ids = build_index(vectors, KnnConfig()).search(np.empty((0, 32), np.float32), k=4)
    assert scores.shape == ids.shape == (0, 0)


def test_ivf_above_exact_max_recalls_exact_neighbours():
    vectors = unit_vectors(4000, seed=1)
    queries = vectors[:300] + 0.05 * unit_vectors(300, seed=2)
    cfg = KnnConfig(exact_max=1000, nprobe=16)
    index = build_index(vectors, cfg)
    assert index.kind == "IndexIVFFlat" and index.slices[0].nprobe == 16
    _, approx = index.search(queries, k=10)
    _, exact = build_index(vectors, KnnConfig()).search(queries, k=10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=True)])
    assert recall > 0.6  # random 32-d data is IVF's worst case; real embeddings cluster
    assert (approx[:, 0] == np.arange(300)).mean() > 0.95  # the near-copy is found


@pytest.mark.parametrize("nprobe", [None, 3, 40])
def test_an_ivf_search_taken_list_by_list_answers_as_faiss_does(nprobe):
    """Queries scanned in the order of their nearest list come back in their own order, with
    faiss's own scores and ids, whatever lists they probe (3, the index's own 8, or all)."""
    vectors = unit_vectors(5_000, seed=21)
    index = build_index(vectors, KnnConfig(exact_max=100, nprobe=8)).slices[0]
    queries = unit_vectors(700, seed=22)
    params = faiss.SearchParametersIVF(nprobe=nprobe or 8)
    expected = index.search(queries, 15, params=params)
    found = knn.search(index, queries, 15, nprobe)
    assert knn.coarse_probes(index.quantizer, queries, 10**6)[1].shape == (700, index.nlist)
    for a, b in zip(found, expected, strict=True):
        assert a.tobytes() == b.tobytes()


def test_ivf_build_is_deterministic_for_a_seed():
    vectors = unit_vectors(3000, seed=4)
    cfg = KnnConfig(exact_max=500)
    first = build_index(vectors, cfg, seed=7).search(vectors[:50], k=5)
    second = build_index(vectors, cfg, seed=7).search(vectors[:50], k=5)
    np.testing.assert_array_equal(first[1], second[1])


def layout_for(vectors: np.ndarray, cfg: KnnConfig, keys: np.ndarray, tmp_path) -> knn.IvfLayout:
    """The layout of a fresh index over ``vectors``, written and read back."""
    layout = build_index(vectors, cfg).layout(keys)
    assert set(layout.write(tmp_path).values()) == {knn.CENTROIDS_FILE, knn.LISTS_FILE}
    stored = knn.IvfLayout.read(tmp_path)
    for name in ("centroids", "keys", "lists"):
        np.testing.assert_array_equal(getattr(stored, name), getattr(layout, name))
    return stored


def test_previous_centroids_serve_while_they_fit_and_are_trained_anew_when_they_do_not(tmp_path):
    vectors = unit_vectors(3000, seed=5)
    cfg = KnnConfig(exact_max=500)
    keys = np.arange(3000, dtype=np.uint64) * 7919
    trained = build_index(vectors, cfg)
    stored = layout_for(vectors, cfg, keys, tmp_path)
    assert stored.centroids.shape == (knn.nlist_for(3000, cfg), 32)
    assert knn.IvfLayout.read(tmp_path / "absent") is None
    # The same centroids give the same index, without training.
    rebuilt = build_index(vectors, cfg, previous=stored)
    np.testing.assert_array_equal(rebuilt.centroids, stored.centroids)
    assert knn.centroid_source(rebuilt.centroids, stored) == "reused"
    assert knn.centroid_source(trained.centroids, None) == "trained"
    for a, b in zip(trained.search(vectors[:40], 5), rebuilt.search(vectors[:40], 5), strict=True):
        np.testing.assert_array_equal(a, b)
    # A day's growth keeps them; a catalog four times larger (twice the lists) retrains.
    grown = unit_vectors(3300, seed=6)
    assert knn.centroids_fit(stored.centroids, 3300, 32, cfg)
    np.testing.assert_array_equal(
        build_index(grown, cfg, previous=stored).centroids, stored.centroids
    )
    assert not knn.centroids_fit(stored.centroids, 12_000, 32, cfg)
    assert len(build_index(unit_vectors(12_000), cfg, previous=stored).centroids) == (
        knn.nlist_for(12_000, cfg)
    )
    # Other dimensions, or a list count the config fixes, never take foreign centroids.
    assert not knn.centroids_fit(stored.centroids, 3000, 64, cfg)
    assert not knn.centroids_fit(stored.centroids, 3000, 32, KnnConfig(exact_max=500, nlist=100))
    assert not knn.centroids_fit(None, 3000, 32, cfg)
    assert build_index(unit_vectors(100), cfg).centroids is None  # exact index
    assert build_index(unit_vectors(100), cfg).layout(keys[:100]) is None
    assert knn.centroid_source(None, stored) is None


def test_known_texts_keep_their_previous_list_and_only_new_ones_are_assigned(tmp_path):
    cfg = KnnConfig(exact_max=500)
    vectors = unit_vectors(3000, seed=8)
    keys = np.arange(3000, dtype=np.uint64) + 10**15
    previous = layout_for(vectors, cfg, keys, tmp_path)
    # Day 2: rows in another order, 200 texts gone, 150 new; one known text's stored list is
    # moved, so a recomputed assignment would be caught.
    moved = keys[500]
    at = np.searchsorted(previous.keys, moved)
    previous.lists[at] = (previous.lists[at] + 1) % len(previous.centroids)
    new_vectors = unit_vectors(150, seed=9)
    today = np.concatenate([vectors[200:][::-1], new_vectors])
    today_keys = np.concatenate([keys[200:][::-1], np.arange(150, dtype=np.uint64)])
    index = build_index(today, cfg, previous=previous, keys=today_keys)
    layout = index.layout(today_keys)
    lists = layout.lists_of(today_keys)
    np.testing.assert_array_equal(lists[:2800], previous.lists_of(today_keys[:2800]))
    nearest = np.argmax(new_vectors @ previous.centroids.T, axis=1)
    np.testing.assert_array_equal(lists[2800:], nearest)
    assert layout.lists_of(moved[None])[0] == previous.lists_of(moved[None])[0]
    assert (previous.lists_of(np.array([1, 2**63], np.uint64)) == -1).all()  # never indexed
    # Searching finds the vectors wherever their lists are: each is its own nearest neighbour.
    every_list = cfg.model_copy(update={"nprobe": len(previous.centroids)})
    index = build_index(today, every_list, previous=previous, keys=today_keys)
    assert (index.search(today, 1)[1][:, 0] == np.arange(len(today))).all()
    # A build written before lists were stored gives centroids alone: all are assigned.
    (tmp_path / knn.LISTS_FILE).unlink()
    old = knn.IvfLayout.read(tmp_path)
    assert len(old.keys) == 0 and (old.lists_of(today_keys) == -1).all()
    rebuilt = build_index(today, cfg, previous=old, keys=today_keys).layout(today_keys)
    assert rebuilt.lists_of(moved[None])[0] != previous.lists_of(moved[None])[0]


def brute_force_below(vectors, query, ceiling, head, depth):
    """(id, rank) pairs scan_below must return for one query, from a full sort."""
    scores = vectors @ query
    order = np.lexsort((np.arange(len(scores)), -scores))
    above = int((scores > ceiling).sum())
    picked = {int(i): r + 1 for r, i in enumerate(order[:head])}
    below = [i for i in order if scores[i] <= ceiling][:depth]
    picked.update({int(i): above + r + 1 for r, i in enumerate(below)})
    return sorted(picked.items()), above


@pytest.mark.parametrize("head, depth", [(0, 5), (3, 4), (4, 40), (50, 50)])
def test_scan_below_matches_a_full_sort_with_ties(head, depth):
    vectors = unit_vectors(30, 8, seed=5)
    vectors[10:16] = vectors[3]  # exact ties, as identical titles give
    queries = unit_vectors(7, 8, seed=6)
    queries[0] = vectors[3]
    ceilings = np.array([0.99, 0.5, 0.0, -0.2, 2.0, -2.0, 0.3], np.float32)
    rows, ids, scores, ranks, above = scan_below(
        vectors, queries, ceilings, head, depth, chunk_cells=64
    )
    for q in range(len(queries)):
        got = sorted(zip(ids[rows == q].tolist(), ranks[rows == q].tolist(), strict=True))
        expected, expected_above = brute_force_below(vectors, queries[q], ceilings[q], head, depth)
        assert got == expected and above[q] == expected_above
        assert np.allclose(scores[rows == q], vectors[ids[rows == q]] @ queries[q], atol=1e-5)


def test_one_pass_selection_over_column_blocks_equals_full_sorts_with_and_without_ties() -> None:
    from pairsieve.vectors.knn import _select_rows

    rng = np.random.default_rng(11)
    tied = rng.integers(0, 6, size=(40, 300)).astype(np.float32)  # ties everywhere
    distinct = rng.standard_normal((40, 300)).astype(np.float32)
    ceilings = rng.uniform(-1.0, 4.0, size=40)
    for scores in (tied, distinct):
        full = np.lexsort((np.broadcast_to(np.arange(300), scores.shape), -scores), axis=1)
        for head, depth in ((0, 5), (1, 1), (7, 50), (50, 7), (300, 300)):
            blocks = [(first, scores[:, first : first + 70]) for first in range(0, 300, 70)]
            top, top_scores, below, below_scores, found, above = _select_rows(
                blocks, ceilings, head, depth
            )
            assert np.array_equal(top, full[:, :head])
            assert np.array_equal(top_scores, np.take_along_axis(scores, full[:, :head], 1))
            for r in range(len(scores)):
                under = [i for i in full[r] if scores[r, i] <= ceilings[r]][:depth]
                assert found[r] == len(under) and below[r, : found[r]].tolist() == under
                assert np.array_equal(below_scores[r, : found[r]], scores[r, under])
                assert above[r] == (scores[r] > ceilings[r]).sum()


def test_pair_scores_in_chunks_equal_one_gather_bit_for_bit():
    left, right = unit_vectors(500, seed=12), unit_vectors(300, seed=13)
    rng = np.random.default_rng(14)
    a, b = rng.integers(0, 500, 40_000), rng.integers(0, 300, 40_000)  # > 2 chunks
    got = knn.pair_scores(left, a, right, b)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, np.einsum("ij,ij->i", left[a], right[b]))
    np.testing.assert_allclose(
        got[:50], [left[i] @ right[j] for i, j in zip(a[:50], b[:50], strict=True)], atol=1e-6
    )
    assert knn.pair_scores(left, a[:0], right, b[:0]).shape == (0,)
