"""An index in slices answers as one index would, from memory or from its files."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.config import FAISS_BLOCK, KnnConfig
from pairsieve.vectors import index_slices, knn
from tests.unit.vectors.test_knn import unit_vectors

N = 2 * FAISS_BLOCK + 1_500  # three slices of FAISS_BLOCK, the last one short


def near_copies(vectors: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Queries close to the first ``count`` vectors, plus exact duplicates to make ties."""
    noisy = vectors[:count] + 0.05 * unit_vectors(count, vectors.shape[1], seed)
    return np.concatenate([noisy / np.linalg.norm(noisy, axis=1, keepdims=True), vectors[:30]])


@pytest.mark.parametrize("exact_max", [N, 1_000], ids=["exact", "ivf"])
def test_slices_answer_with_the_bytes_of_one_index(exact_max):
    vectors = unit_vectors(N, seed=11)
    vectors[FAISS_BLOCK + 7] = vectors[3]  # a tie across two slices
    queries = near_copies(vectors, 4_500, seed=12)  # above faiss's BLAS block of queries too
    one = index_slices.build(vectors, KnnConfig(exact_max=exact_max, nprobe=8))
    many = index_slices.build(
        vectors, KnnConfig(exact_max=exact_max, nprobe=8, slice_vectors=FAISS_BLOCK)
    )
    assert (len(one.slices), len(many.slices)) == (1, 3)
    assert many.starts == [0, FAISS_BLOCK, 2 * FAISS_BLOCK] and many.ntotal == N
    for a, b in zip(one.search(queries, 12), many.search(queries, 12), strict=True):
        assert a.tobytes() == b.tobytes()
    # Deep enough that a slice's probed lists run out: its missing ranks (-1) end the merge.
    deep = [index.search(queries[:50], N // 2) for index in (one, many)]
    for a, b in zip(*deep, strict=True):
        assert a.tobytes() == b.tobytes()
    assert exact_max == N or (deep[1][1] == -1).any()
    scores, ids = many.search(vectors[3:4], 2)
    assert ids[0].tolist() == [3, FAISS_BLOCK + 7] and scores[0, 0] == scores[0, 1]
    if exact_max < N:  # IVF: one quantizer, and each vector's list, for the next build
        np.testing.assert_array_equal(one.centroids, many.centroids)
        keys = np.arange(N, dtype=np.uint64)
        np.testing.assert_array_equal(one.layout(keys).lists, many.layout(keys).lists)


def test_slices_in_files_are_read_when_searched_and_answer_the_same(tmp_path):
    vectors = unit_vectors(N, seed=13)
    cfg = KnnConfig(exact_max=1_000, nprobe=8, slice_vectors=FAISS_BLOCK)
    kept = index_slices.build(vectors, cfg)
    filed = index_slices.build(vectors, cfg, folder=tmp_path / "index")
    assert all(isinstance(slice, str) for slice in filed.slices)
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == [
        "centroids.npy",
        "slice-00000.faiss",
        "slice-00001.faiss",
        "slice-00002.faiss",
        "slices.json",
    ]
    read = index_slices.SlicedIndex.read(tmp_path / "index")
    assert (read.kind, read.starts, read.ntotal) == ("IndexIVFFlat", filed.starts, N)
    np.testing.assert_array_equal(read.centroids, kept.centroids)
    queries = near_copies(vectors, 200, seed=14)
    expected = kept.search(queries, 9)
    for index in (filed, read, kept.write(tmp_path / "again")):
        for a, b in zip(expected, index.search(queries, 9), strict=True):
            assert a.tobytes() == b.tobytes()


def test_fewer_vectors_than_k_and_no_queries():
    index = index_slices.build(unit_vectors(5), KnnConfig(slice_vectors=FAISS_BLOCK))
    scores, ids = index.search(unit_vectors(2, seed=1), 10)
    assert ids.shape == (2, 5) and sorted(ids[0].tolist()) == [0, 1, 2, 3, 4]
    assert index.search(np.empty((0, 32), np.float32), 3)[1].shape == (0, 0)


def test_a_vector_file_reads_runs_of_rows_and_the_scan_gives_the_same_rows(tmp_path):
    vectors = unit_vectors(3_000, seed=15)
    np.save(tmp_path / "v.npy", vectors)
    stored = knn.VectorFile(tmp_path / "v.npy")
    assert len(stored) == 3_000 and stored.shape == (3_000, 32)
    np.testing.assert_array_equal(stored[100:250], vectors[100:250])
    np.testing.assert_array_equal(stored[2_990:5_000], vectors[2_990:])
    assert stored[10:10].shape == (0, 32)
    with pytest.raises(IndexError):
        stored[::2]
    np.save(tmp_path / "ints.npy", np.zeros((3, 2), np.int64))
    with pytest.raises(ValueError, match="float32"):
        knn.VectorFile(tmp_path / "ints.npy")
    queries = near_copies(vectors, 50, seed=16)
    ceilings = np.full(len(queries), 0.2)
    in_memory = knn.scan_below(vectors, queries, ceilings, 5, 7, chunk_cells=20_000)
    from_file = knn.scan_below(stored, queries, ceilings, 5, 7, chunk_cells=20_000)
    for a, b in zip(in_memory, from_file, strict=True):
        np.testing.assert_array_equal(a, b)


class CountedVectorFile(knn.VectorFile):
    """A `knn.VectorFile` that remembers how many rows each read returned."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.reads: list[int] = []

    def __getitem__(self, rows: slice) -> np.ndarray:
        block = super().__getitem__(rows)
        self.reads.append(len(block))
        return block


def test_a_scan_of_few_queries_reads_the_listings_in_the_same_bounded_blocks(tmp_path):
    """Two queries (a deep round's) read no more listing rows at a time than a full chunk of
    queries does, so the scan's memory does not follow the catalog, and find the same rows."""
    vectors = unit_vectors(3_000, seed=17)
    np.save(tmp_path / "v.npy", vectors)
    stored = CountedVectorFile(tmp_path / "v.npy")
    queries = near_copies(vectors, 2, seed=18)
    ceilings = np.full(len(queries), 0.2)
    cells = 40 * knn._QUERY_CHUNK
    from_file = knn.scan_below(stored, queries, ceilings, 5, 40, chunk_cells=cells)
    assert max(stored.reads) == 40 and sum(stored.reads) == len(vectors)
    in_memory = knn.scan_below(vectors, queries, ceilings, 5, 40, chunk_cells=cells)
    for a, b in zip(in_memory, from_file, strict=True):
        np.testing.assert_array_equal(a, b)
