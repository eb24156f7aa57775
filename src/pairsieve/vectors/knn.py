"""faiss nearest-neighbour search over unit vectors (inner product = cosine).

Exact `IndexFlatIP` up to `KnnConfig.exact_max` vectors; above it an IVF index whose recall
against exact search is measured in `benchmarks/`. Training the IVF index's coarse centroids
(k-means over a sample) is its fixed cost, minutes at 10^6 vectors, and putting each vector in
its list scores it against every centroid (~25 s at 10^6 vectors and 4,000 lists). So a day-2
build takes the previous build's `IvfLayout`: its centroids while they still fit the index's
size, and the list of every text it indexed, so only new texts are assigned.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
import polars as pl
from numba import njit, prange

from pairsieve.config import KnnConfig
from pairsieve.core import io

CENTROIDS_FILE = "ivf_centroids.parquet"  # a stage's IVF centroids, for the next build
LISTS_FILE = "ivf_lists.parquet"  # and the list each text's vector went to
_CENTROID = "centroid"
_KEY, _LIST = "text_key", "list"
_QUERY_CHUNK = 1024  # queries scored per pass over the listing vectors (`scan_below`)
_GATHER_CHUNK = 1 << 14  # pairs per gather in `pair_scores`: 25 MB a side at d = 384
_REFIT_RATIO = 1.25  # retrain when the size calls for this many times more (or fewer) lists


class VectorFile:
    """(n, d) float32 vectors in a ``.npy`` file, read a block of rows at a time: slicing
    reads those rows into memory of their own (a memory-mapped file would keep every page it
    touched resident until it is unmapped)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        mapped = np.load(self.path, mmap_mode="r")  # for its header only
        if not mapped.flags.c_contiguous or mapped.dtype != np.float32 or mapped.ndim != 2:
            raise ValueError(f"{self.path}: not a C-ordered (n, d) float32 array")
        self.shape: tuple[int, int] = mapped.shape
        self._offset: int = mapped.offset

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, step = rows.indices(self.shape[0])
        if step != 1:
            raise IndexError("VectorFile reads runs of rows only")
        count = max(0, stop - start) * self.shape[1]
        offset = self._offset + start * self.shape[1] * 4
        block = np.fromfile(self.path, np.float32, count=count, offset=offset)
        return block.reshape(-1, self.shape[1])

    def write(self, path: Path) -> None:
        """The vectors at ``path``.npy (copied, unless this file is already there)."""
        target = Path(path).with_suffix(".npy")
        if Path(self.path) != target:
            shutil.copyfile(self.path, target)

    @staticmethod
    def read(path: Path) -> VectorFile:
        """The vectors `write` put at ``path``.npy (an array saved there reads the same)."""
        return VectorFile(Path(path).with_suffix(".npy"))


def nlist_for(n: int, cfg: KnnConfig) -> int:
    """IVF lists for ``n`` vectors: ``cfg.nlist``, else 4 * sqrt(n)."""
    return cfg.nlist or max(1, int(4 * math.sqrt(n)))


@dataclass(frozen=True)
class IvfLayout:
    """Where an IVF index put its vectors: the coarse ``centroids`` (nlist, d) and, for each text
    it indexed (by `embed.text_keys`, sorted and distinct), the list its vector went to."""

    centroids: np.ndarray
    keys: np.ndarray  # (n,) uint64, sorted
    lists: np.ndarray  # (n,) int64

    def lists_of(self, keys: np.ndarray) -> np.ndarray:
        """(m,) the list of each of ``keys`` (uint64), -1 for a text this index never saw."""
        if not len(self.keys):
            return np.full(len(keys), -1, np.int64)
        at = np.searchsorted(self.keys, keys).clip(max=len(self.keys) - 1)
        return np.where(self.keys[at] == keys, self.lists[at], -1)

    def write(self, folder: Path) -> dict[str, str]:
        """Store the layout in ``folder``; returns the stage outputs it adds."""
        write_centroids(self.centroids, folder / CENTROIDS_FILE)
        io.write_parquet(
            pl.DataFrame({_KEY: self.keys, _LIST: self.lists.astype(np.int32)}),
            folder / LISTS_FILE,
        )
        return {"ivf_centroids": CENTROIDS_FILE, "ivf_lists": LISTS_FILE}

    @staticmethod
    def read(folder: Path) -> IvfLayout | None:
        """The layout `write` stored, None without centroids; a build written before lists were
        stored gives centroids alone (every vector is then assigned)."""
        centroids = read_centroids(folder / CENTROIDS_FILE)
        if centroids is None:
            return None
        keys, lists = np.empty(0, np.uint64), np.empty(0, np.int64)
        if (folder / LISTS_FILE).exists():
            stored = pl.read_parquet(folder / LISTS_FILE)
            keys, lists = stored[_KEY].to_numpy(), stored[_LIST].to_numpy().astype(np.int64)
        return IvfLayout(centroids, keys, lists)


def coarse_lists(
    vectors: np.ndarray,
    cfg: KnnConfig,
    seed: int = 13,
    previous: IvfLayout | None = None,
    keys: np.ndarray | None = None,
) -> tuple[faiss.IndexFlatIP, np.ndarray]:
    """An IVF quantizer over (n, d) float32 unit vectors and the list of every vector (n,).

    The centroids are trained on a seeded sample, or taken from ``previous`` when they fit this
    index (`centroids_fit`, no training); then each vector whose text key (in ``keys``, (n,)
    uint64) ``previous`` indexed goes to the list it went to there, and only the others are
    scored against the centroids.
    """
    n, dim = vectors.shape
    quantizer = faiss.IndexFlatIP(dim)
    known = np.full(n, -1, np.int64)
    if previous is not None and centroids_fit(previous.centroids, n, dim, cfg):
        quantizer.add(np.ascontiguousarray(previous.centroids, dtype=np.float32))
        if keys is not None:
            known = previous.lists_of(keys)
    else:
        nlist = nlist_for(n, cfg)
        trainer = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        sample = np.random.default_rng(seed).choice(n, min(n, nlist * 64), replace=False)
        trainer.cp.seed = seed
        trainer.train(vectors[np.sort(sample)])
    new = np.flatnonzero(known < 0)
    if len(new) == n:  # no copy: gathering every row copied the catalog's vectors (1.4 GB at 10^6)
        known = quantizer.assign(vectors, 1).ravel()
    elif len(new):
        known[new] = quantizer.assign(vectors[new], 1).ravel()
    return quantizer, known


def ivf_index(
    quantizer: faiss.IndexFlatIP, vectors: np.ndarray, lists: np.ndarray, cfg: KnnConfig
) -> faiss.IndexIVFFlat:
    """An IVF-flat index over (m, d) float32 ``vectors``, each put in its given list."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    lists = np.ascontiguousarray(lists, dtype=np.int64)
    index = faiss.IndexIVFFlat(quantizer, quantizer.d, quantizer.ntotal, faiss.METRIC_INNER_PRODUCT)
    index.nprobe = cfg.nprobe
    index.add_core(len(vectors), faiss.swig_ptr(vectors), None, faiss.swig_ptr(lists))
    return index


def centroids_fit(centroids: np.ndarray | None, n: int, dim: int, cfg: KnnConfig) -> bool:
    """Whether ``centroids`` can serve an IVF index over ``n`` vectors of ``dim``: same
    dimension, and a list count within `_REFIT_RATIO` of what ``n`` calls for (exactly
    ``cfg.nlist`` when set), so lists stay about as long as a fresh training makes them."""
    if centroids is None or centroids.ndim != 2 or centroids.shape[1] != dim:
        return False
    wanted, have = nlist_for(n, cfg), len(centroids)
    if cfg.nlist is not None:
        return have == wanted
    return wanted / _REFIT_RATIO <= have <= wanted * _REFIT_RATIO


def centroid_source(centroids: np.ndarray | None, previous: IvfLayout | None) -> str | None:
    """How an index got its IVF ``centroids``: "reused" (from ``previous``), "trained", or None
    for an exact index (no centroids)."""
    if centroids is None:
        return None
    given = None if previous is None else previous.centroids
    return "reused" if given is not None and np.array_equal(centroids, given) else "trained"


def write_centroids(centroids: np.ndarray, path: Path) -> None:
    """Store (nlist, d) centroids as one fixed-size float32 array column."""
    io.write_parquet(pl.DataFrame({_CENTROID: np.asarray(centroids, dtype=np.float32)}), path)


def read_centroids(path: Path) -> np.ndarray | None:
    """Centroids written by `write_centroids`, or None when the file is absent."""
    if not path.exists():
        return None
    return pl.read_parquet(path)[_CENTROID].to_numpy().astype(np.float32, copy=False)


def pair_scores(left: np.ndarray, a: np.ndarray, right: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m,) float32 inner products left[a[i]] . right[b[i]], gathered a few thousand pairs at a
    time: gathering a million rows at once writes GBs of fresh pages, 8x slower than the
    arithmetic (14 s vs 1.8 s for 1.3 M pairs of 384-d vectors)."""
    out = np.empty(len(a), dtype=np.float32)
    for start in range(0, len(a), _GATHER_CHUNK):
        end = start + _GATHER_CHUNK
        out[start:end] = np.einsum("ij,ij->i", left[a[start:end]], right[b[start:end]])
    return out


def search(
    index: faiss.Index,
    queries: np.ndarray,
    k: int,
    nprobe: int | None = None,
    probes: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` neighbours: (scores (m, k) float32, ids (m, k) int64; -1 where fewer exist).
    An IVF index probes ``nprobe`` lists when given (its own setting otherwise), or the
    ``probes`` of `coarse_probes` when a caller searching several slices has them.

    Ties are broken by id so results do not depend on faiss' internal order.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    k = min(k, index.ntotal)
    if k == 0 or len(queries) == 0:
        return np.empty((len(queries), 0), np.float32), np.empty((len(queries), 0), np.int64)
    if isinstance(index, faiss.IndexIVF):
        probes = probes or coarse_probes(index.quantizer, queries, nprobe or index.nprobe)
        scores, ids = _search_list_by_list(index, queries, k, probes)
    else:
        scores, ids = index.search(queries, k)
    if (np.diff(scores, axis=1) <= 0).all():  # faiss ranks best first: only ties to order
        _ties_by_id(scores, ids)
        return scores, ids
    order = np.lexsort((ids, -scores), axis=1)
    return np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)


def coarse_probes(
    quantizer: faiss.Index, queries: np.ndarray, nprobe: int
) -> tuple[np.ndarray, np.ndarray]:
    """(scores, lists) (m, nprobe) of the IVF lists each query probes, best first: what faiss's
    IVF search computes first, once for every slice that shares the quantizer."""
    return quantizer.search(queries, min(nprobe, quantizer.ntotal))


def _search_list_by_list(
    index: faiss.IndexIVF, queries: np.ndarray, k: int, probes: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """faiss's IVF search of ``queries`` on their ``probes``, scanned in the order of each
    query's nearest list and handed back in theirs. A query's lists (~6 MB at 10^6 vectors and
    16 probes) come from memory, not cache, when the queries come in text order; taken list by
    list, the queries that probe the same lists follow each other while those lists sit in
    cache: a third of the time for 65,536 queries against 600k vectors, and the same scores,
    as each query's scan is its own."""
    centroid_scores, lists = probes
    order = np.argsort(lists[:, 0], kind="stable")
    taken = [np.ascontiguousarray(a[order]) for a in (queries, lists, centroid_scores)]
    scores = np.empty((len(order), k), np.float32)
    ids = np.empty((len(order), k), np.int64)
    # faiss's Python wrapper of this call takes no search parameters: the C++ one does.
    ptr = faiss.swig_ptr
    index.search_preassigned_c(
        len(order), ptr(taken[0]), k, ptr(taken[1]), ptr(taken[2]), ptr(scores), ptr(ids),
        False, faiss.SearchParametersIVF(nprobe=lists.shape[1]),
    )  # fmt: skip
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return scores[back], ids[back]


@njit(cache=True, parallel=True)
def _ties_by_id(scores: np.ndarray, ids: np.ndarray) -> None:
    """Within each run of equal scores of each row (scores non-increasing), ids ascending:
    a linear pass where a full sort of a (256, 10,000) ranking took a second."""
    for r in prange(scores.shape[0]):
        row, found = scores[r], ids[r]
        start = 0
        while start < row.size:
            end = start + 1
            while end < row.size and row[end] == row[start]:
                end += 1
            if end - start > 1:
                found[start:end] = np.sort(found[start:end])
            start = end


@njit(cache=True, inline="always")
def _worse(score: float, idx: int, other_score: float, other_idx: int) -> bool:
    """(score, idx) ranks below (other_score, other_idx): lower score, or a tie at a larger id."""
    return score < other_score or (score == other_score and idx > other_idx)


@njit(cache=True)
def _sift_down(scores: np.ndarray, ids: np.ndarray, size: int) -> None:
    """Restore the heap (worst at the root) after its root was replaced."""
    at = 0
    while True:
        child = 2 * at + 1
        if child >= size:
            return
        if child + 1 < size and _worse(
            scores[child + 1], ids[child + 1], scores[child], ids[child]
        ):
            child += 1
        if not _worse(scores[child], ids[child], scores[at], ids[at]):
            return
        scores[at], scores[child] = scores[child], scores[at]
        ids[at], ids[child] = ids[child], ids[at]
        at = child


@njit(cache=True)
def _offer(scores: np.ndarray, ids: np.ndarray, size: int, score: float, idx: int) -> int:
    """Offer (score, idx) to a bounded heap holding ``size`` entries; returns the new size."""
    if size < len(scores):  # not full: append and sift up
        at = size
        scores[at], ids[at] = score, idx
        while at > 0:
            parent = (at - 1) // 2
            if not _worse(scores[at], ids[at], scores[parent], ids[parent]):
                break
            scores[at], scores[parent] = scores[parent], scores[at]
            ids[at], ids[parent] = ids[parent], ids[at]
            at = parent
        return size + 1
    if size and _worse(scores[0], ids[0], score, idx):  # better than the worst kept
        scores[0], ids[0] = score, idx
        _sift_down(scores, ids, size)
    return size


@njit(cache=True)
def _sort_heap(scores: np.ndarray, ids: np.ndarray, size: int) -> None:
    """Heap sort in place: the first ``size`` entries end best first (score desc, id asc)."""
    for end in range(size - 1, 0, -1):
        scores[0], scores[end] = scores[end], scores[0]
        ids[0], ids[end] = ids[end], ids[0]
        _sift_down(scores, ids, end)


@njit(cache=True, inline="always")
def _bar(heap_scores: np.ndarray, size: int, capacity: int) -> float:
    """The score a value must beat to enter a heap (worst kept once full)."""
    if capacity == 0:
        return np.inf
    return heap_scores[0] if size == capacity else -np.inf


@njit(cache=True, parallel=True)
def _offer_block(  # noqa: PLR0913 - a numba kernel: heaps travel as arrays (see docstring)
    scores: np.ndarray,
    first: int,
    ceilings: np.ndarray,
    top_scores: np.ndarray,
    top_ids: np.ndarray,
    top_sizes: np.ndarray,
    low_scores: np.ndarray,
    low_ids: np.ndarray,
    low_sizes: np.ndarray,
    above: np.ndarray,
) -> None:
    """Offer each row of ``scores`` (m, b), the scores of columns ``first`` .. ``first + b - 1``,
    to that row's bounded heaps: ``top_*`` (scores, ids, sizes) keep its best columns, ``low_*``
    those at or below the row's ceiling; ``above`` counts the rest. Blocks must come in
    ascending column order: a value equal to a full heap's worst then loses the tie, so the cheap
    test skips almost every column once the heaps are full. (The heaps are separate arguments:
    numba loses writes to an array passed inside a tuple in a `prange` loop.)"""
    head, depth = top_scores.shape[1], low_scores.shape[1]
    for r in prange(scores.shape[0]):
        ceiling, row = ceilings[r], scores[r]
        best_scores, best_ids, under_scores, under_ids = (
            top_scores[r],
            top_ids[r],
            low_scores[r],
            low_ids[r],
        )
        top_size, low_size, over = top_sizes[r], low_sizes[r], 0
        # Entry bars in locals: a full heap's worst score (a heap still filling takes anything,
        # an empty one nothing), so the loop that skips almost every column reads only the row.
        top_bar = _bar(best_scores, top_size, head)
        low_bar = _bar(under_scores, low_size, depth)
        for j in range(row.shape[0]):
            value = row[j]
            if value > top_bar or (value == top_bar and top_size < head):
                top_size = _offer(best_scores, best_ids, top_size, value, first + j)
                if top_size == head:
                    top_bar = best_scores[0]
            if value > ceiling:
                over += 1
            elif value > low_bar or (value == low_bar and low_size < depth):
                low_size = _offer(under_scores, under_ids, low_size, value, first + j)
                if low_size == depth:
                    low_bar = under_scores[0]
        top_sizes[r] = top_size
        low_sizes[r] = low_size
        above[r] += over


@njit(cache=True, parallel=True)
def _sort_heaps(scores: np.ndarray, ids: np.ndarray, sizes: np.ndarray) -> None:
    """Sort each row's heap in place, best first."""
    for r in prange(scores.shape[0]):
        _sort_heap(scores[r], ids[r], sizes[r])


def _select_rows(
    blocks: Iterable[tuple[int, np.ndarray]], ceilings: np.ndarray, head: int, depth: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row over the column ``blocks`` ((first column, (m, b) scores), ascending): the
    ``head`` best columns, the ``depth`` best at or below the row's ceiling (each best first,
    ties to the smaller column) and how many score above the ceiling, in one pass with bounded
    heaps (O(n) per row for small head and depth). Returns (head ids, head scores, below ids,
    below scores, below count, above)."""
    m = len(ceilings)
    ceilings = np.asarray(ceilings, np.float64)
    top = (np.empty((m, head), np.float32), np.empty((m, head), np.int64), np.zeros(m, np.int64))
    low = (
        np.full((m, depth), -np.inf, np.float32),
        np.full((m, depth), -1, np.int64),
        np.zeros(m, np.int64),
    )
    above = np.zeros(m, np.int64)
    for first, scores in blocks:
        _offer_block(scores, first, ceilings, *top, *low, above)
    _sort_heaps(*top)
    _sort_heaps(*low)
    return top[1], top[0], low[1], low[0], low[2], above


def scan_below(
    vectors: np.ndarray | VectorFile,
    queries: np.ndarray,
    ceilings: np.ndarray,
    head: int,
    depth: int,
    chunk_cells: int = 1 << 25,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Exact scan: per query its top ``head`` vectors, and its top ``depth`` among those scoring
    at or below its ceiling, each with its rank in the full ranking (score desc, id asc).

    Listings above the ceiling beyond the head are stepped over, not returned: a query whose
    weakly matched positive puts thousands of listings above its margin gets its candidates from
    below the margin without materialising the thousands. Scores `_QUERY_CHUNK` queries at a
    time against blocks of ``chunk_cells / _QUERY_CHUNK`` listings (128 MB of scores for a full
    chunk): many queries per pass over the listing vectors keep the matrix product
    compute-bound, not memory-bound. The block does not grow when a chunk has fewer queries (a
    deep round may scan two), so ``vectors`` may be a `VectorFile`: each block is then read from
    disk and released, and the scan holds one block of the listings whatever the catalog's size.

    Returns:
        (query_row, id, score, rank) as flat arrays, and ``above`` (m,): listings per query
        scoring above its ceiling.
    """
    n = len(vectors)
    head, depth = min(head, n), min(depth, n)
    block = max(1, chunk_cells // _QUERY_CHUNK)
    parts, above_all = [], []
    for start in range(0, len(queries), _QUERY_CHUNK):
        chunk = np.ascontiguousarray(queries[start : start + _QUERY_CHUNK], np.float32)
        scored = (
            (first, chunk @ np.asarray(vectors[first : first + block], np.float32).T)
            for first in range(0, n, block)
        )
        top, top_scores, below, below_scores, found, above = _select_rows(
            scored, ceilings[start : start + len(chunk)], head, depth
        )
        below_rank = above[:, None] + np.arange(1, depth + 1)
        # a below-ceiling listing ranked within the head is already there
        keep_below = (np.arange(depth) < found[:, None]) & (below_rank > head)
        ids = np.concatenate([top, below], axis=1)
        got = np.concatenate([top_scores, below_scores], axis=1)
        ranks = np.concatenate([np.broadcast_to(np.arange(1, head + 1), top.shape), below_rank], 1)
        mask = np.concatenate([np.ones(top.shape, bool), keep_below], axis=1)
        rows = np.arange(start, start + len(chunk))[:, None]
        parts.append((np.broadcast_to(rows, ids.shape)[mask], ids[mask], got[mask], ranks[mask]))
        above_all.append(above)
    if not parts:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0, np.float32), empty, empty
    q, i, s, r = (np.concatenate(column) for column in zip(*parts, strict=True))
    above = np.concatenate(above_all)
    return q, i.astype(np.int64), s.astype(np.float32), r.astype(np.int64), above
