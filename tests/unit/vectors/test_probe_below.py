"""The scan below the margin on the IVF index: what it selects from a ranking, and its guard."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.config import KnnConfig
from pairsieve.vectors import knn
from pairsieve.vectors.index_slices import build as build_index
from pairsieve.vectors.probe_below import probe_below, select_below
from tests.unit.vectors.test_knn import brute_force_below, unit_vectors


def _per_row(rows, ids, ranks, m):
    return [sorted(zip(ids[rows == q].tolist(), ranks[rows == q].tolist(), strict=True))
            for q in range(m)]  # fmt: skip


@pytest.mark.parametrize("head, depth", [(0, 5), (3, 4), (4, 40), (50, 50)])
def test_selected_from_a_full_ranking_as_the_exact_scan_selects(head, depth):
    vectors = unit_vectors(30, 8, seed=5)
    vectors[10:16] = vectors[3]  # ties, as identical titles give
    queries = unit_vectors(7, 8, seed=6)
    ceilings = np.array([0.99, 0.5, 0.0, -0.2, 2.0, -2.0, 0.3], np.float32)
    scores, ids = knn.search(build_index(vectors, KnnConfig()).slices[0], queries, len(vectors))
    rows, got, _, ranks, above, unfilled = select_below(scores, ids, ceilings, head, depth)
    assert not unfilled.any()  # the whole catalog was ranked: nothing left to find
    for q, found in enumerate(_per_row(rows, got, ranks, len(queries))):
        expected, expected_above = brute_force_below(vectors, queries[q], ceilings[q], head, depth)
        assert found == expected and above[q] == expected_above


def test_a_ranking_that_ran_out_before_depth_is_unfilled_and_one_that_was_cut_is_not():
    scores = np.array([[0.9, 0.8, 0.4, -np.inf], [0.9, 0.8, 0.7, 0.6]], np.float32)
    ids = np.array([[4, 2, 7, -1], [1, 2, 3, 5]])
    ceilings = np.array([0.85, 0.85], np.float32)
    rows, got, _, ranks, above, unfilled = select_below(scores, ids, ceilings, 1, 3)
    assert unfilled.tolist() == [True, False]  # row 1 reached the rank it asked for
    assert above.tolist() == [1, 1]
    assert list(zip(rows.tolist(), got.tolist(), ranks.tolist(), strict=True)) == [
        (0, 4, 1), (0, 2, 2), (0, 7, 3), (1, 1, 1), (1, 2, 2), (1, 3, 3), (1, 5, 4),
    ]  # fmt: skip


def _clustered(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """120 unit vectors in 12 tight clusters, and the cluster centres."""
    rng = np.random.default_rng(seed)
    centres = unit_vectors(12, 16, seed=seed)
    vectors = np.repeat(centres, 10, axis=0) + 0.05 * rng.normal(size=(120, 16))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    return vectors, centres


def test_the_guard_scans_exactly_a_query_whose_probed_lists_lie_above_its_ceiling():
    vectors, centres = _clustered()
    index = build_index(vectors, KnnConfig(exact_max=1, nlist=12, nprobe=1), seed=1)
    assert index.kind == "IndexIVFFlat"
    query = centres[:1]
    # Its own cluster's ten listings all score above this ceiling, the other clusters below:
    # one probed list holds no negative at all.
    own = vectors[:10] @ query[0]
    ceiling = np.array([own.min() - 1e-3], np.float32)
    assert (vectors[10:] @ query[0] < ceiling[0]).all()
    exact = knn.scan_below(vectors, query, ceiling, 5, 4)
    probed = probe_below(index, 1, vectors, query, ceiling, 5, 4, max_rank=len(vectors))
    assert probed[5] == 1  # scanned exactly
    assert _per_row(probed[0], probed[1], probed[3], 1) == _per_row(exact[0], exact[1], exact[3], 1)
    assert probed[4].tolist() == exact[4].tolist() == [10]


def test_queries_their_probed_lists_fill_are_not_scanned_and_every_list_probed_is_exact():
    vectors, centres = _clustered()
    index = build_index(vectors, KnnConfig(exact_max=1, nlist=12, nprobe=1), seed=1)
    queries = unit_vectors(9, 16, seed=8)
    ceilings = np.full(len(queries), 0.2, np.float32)
    exact = knn.scan_below(vectors, queries, ceilings, 3, 5)
    wide = probe_below(index, 12, vectors, queries, ceilings, 3, 5, max_rank=len(vectors))
    assert wide[5] == 0  # every list probed ranks every listing: no query needs the scan
    for column in (0, 1, 3, 4):
        assert wide[column].tolist() == exact[column].tolist()
    assert np.allclose(wide[2], exact[2], atol=1e-5)
    narrow = probe_below(index, 4, vectors, queries, ceilings, 3, 5, max_rank=len(vectors))
    assert 0 < len(queries) - narrow[5] and np.unique(narrow[0]).tolist() == list(range(9))
    past_head = narrow[3] > 3  # the rows below the ceiling
    assert (narrow[2][past_head] <= ceilings[narrow[0][past_head]]).all()
    assert (np.bincount(narrow[0][past_head], minlength=9) == 5).all()
