"""Linkage: accepted pairs -> clusters by constrained average linkage (`agglomerate`), with its
merge loop compiled with numba.

Constrained average linkage is sequential (every merge changes the linkages of the merged
cluster), and in CPython a dict-per-cluster loop is the slowest step of the MinHash path and
holds >11 GB of dicts at 1M listings (benchmarks/RESULTS.md, "cluster"). This is the algorithm on
flat arrays, compiled: a heap of (-linkage, x, y) entries with lazy deletion (with a 1e-12
staleness tolerance), cross weights added in merge order, so its labels equal a plain-Python
reference loop's bit for bit (tests/unit/cluster/test_stage.py checks it on random graphs).

Layout: one *cell* per linked cluster pair (weight, vetoed flag, both endpoints, alive); every
cluster keeps a singly linked list of records pointing at its cells (record 2c in one
endpoint's list, 2c+1 in the other's). Folding y into x adds each of y's cells into x's cell
for the same neighbour (or re-keys it to x) and splices y's list onto x's; records of dead
cells are dropped while a list is walked.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import polars as pl
from numba import njit

from pairsieve import schemas as S

# Cell arrays: (end_a, end_b, weight, vetoed, alive, judged); list arrays: (head, tail, next,
# mark); heap arrays: (negative linkage, x, y, cell) with x < y, ordered by (key, x, y).


@njit(cache=True, inline="always")
def _linkage(weight: float, judged: float, pairs: float, unjudged_weight: float) -> float:
    """Mean score over a cluster pair's ``pairs`` listing pairs, of which ``judged`` were
    candidates: an unjudged pair counts as a score of 0 with weight ``unjudged_weight`` (1: every
    pair counts, 0: only the judged ones)."""
    return weight / (unjudged_weight * pairs + (1.0 - unjudged_weight) * judged)


@njit(cache=True, inline="always")
def _less(heap, i: int, k: float, x: int, y: int) -> bool:  # noqa: ANN001
    """Heap entry i sorts before (k, x, y)."""
    hk, hx, hy, _ = heap
    if hk[i] != k:
        return hk[i] < k
    if hx[i] != x:
        return hx[i] < x
    return hy[i] < y


@njit(cache=True)
def _place(heap, pos: int, entry) -> None:  # noqa: ANN001
    heap[0][pos], heap[1][pos], heap[2][pos], heap[3][pos] = entry


@njit(cache=True)
def _sift_down(heap, pos: int, count: int) -> None:  # noqa: ANN001
    entry = (heap[0][pos], heap[1][pos], heap[2][pos], heap[3][pos])
    while 2 * pos + 1 < count:
        child = 2 * pos + 1
        right = child + 1
        if right < count and _less(heap, right, heap[0][child], heap[1][child], heap[2][child]):
            child = right
        if not _less(heap, child, entry[0], entry[1], entry[2]):
            break
        _place(heap, pos, (heap[0][child], heap[1][child], heap[2][child], heap[3][child]))
        pos = child
    _place(heap, pos, entry)


@njit(cache=True)
def _push(heap, count: int, entry) -> None:  # noqa: ANN001
    """Add ``entry`` at position ``count`` (capacity reserved by the caller) and sift it up."""
    pos = count
    while pos > 0:
        up = (pos - 1) // 2
        if _less(heap, up, entry[0], entry[1], entry[2]):
            break
        _place(heap, pos, (heap[0][up], heap[1][up], heap[2][up], heap[3][up]))
        pos = up
    _place(heap, pos, entry)


@njit(cache=True)
def _reserve(heap, count: int, extra: int):  # noqa: ANN001, ANN202
    """The heap arrays, reallocated when ``count + extra`` entries would not fit."""
    if count + extra <= heap[0].shape[0]:
        return heap
    capacity = max(2 * heap[0].shape[0], count + extra)
    grown = (
        np.empty(capacity, np.float64),
        np.empty(capacity, np.int64),
        np.empty(capacity, np.int64),
        np.empty(capacity, np.int64),
    )
    grown[0][:count] = heap[0][:count]
    grown[1][:count] = heap[1][:count]
    grown[2][:count] = heap[2][:count]
    grown[3][:count] = heap[3][:count]
    return grown


@njit(cache=True)
def _adjacency(n: int, end_a: np.ndarray, end_b: np.ndarray):  # noqa: ANN202
    head = np.full(n, -1, dtype=np.int64)
    tail = np.full(n, -1, dtype=np.int64)
    nxt = np.full(2 * end_a.shape[0], -1, dtype=np.int64)
    for r in range(nxt.shape[0]):
        owner = end_a[r // 2] if r % 2 == 0 else end_b[r // 2]
        if tail[owner] < 0:
            head[owner] = r
        else:
            nxt[tail[owner]] = r
        tail[owner] = r
    return head, tail, nxt, np.full(n, -1, dtype=np.int64)


@njit(cache=True)
def _mark(x: int, cells, lists) -> int:  # noqa: ANN001
    """Set mark[z] = cell for each neighbour z of x, dropping records of dead cells from x's
    list; returns the number of neighbours."""
    alive = cells[4]
    head, tail, nxt, mark = lists
    prev, r, count = -1, head[x], 0
    while r >= 0:
        following = nxt[r]
        c = r // 2
        if alive[c]:
            mark[cells[0][c] + cells[1][c] - x] = c
            count += 1
            prev = r
        elif prev < 0:
            head[x] = following
        else:
            nxt[prev] = following
        r = following
    tail[x] = prev
    return count


@njit(cache=True)
def _push_links(x: int, cells, lists, sizing, heap, count: int) -> int:  # noqa: ANN001
    """Clear the marks of x's neighbours and push x's unvetoed links whose linkage reaches
    the threshold (``sizing`` = (size, link_threshold, unjudged_weight)); returns the new heap
    size."""
    end_a, end_b, w, v, alive, judged = cells
    head, _, nxt, mark = lists
    size, link_threshold, unjudged_weight = sizing
    r = head[x]
    while r >= 0:
        c = r // 2
        if alive[c]:
            z = end_a[c] + end_b[c] - x
            mark[z] = -1
            linkage = _linkage(w[c], judged[c], size[x] * size[z], unjudged_weight)
            if not v[c] and linkage >= link_threshold:
                _push(heap, count, (-linkage, min(x, z), max(x, z), c))
                count += 1
        r = nxt[r]
    return count


@njit(cache=True)
def _absorb(x: int, y: int, cells, lists) -> int:  # noqa: ANN001
    """Fold y's cells into x (x's neighbours marked): add each into x's cell for the same
    neighbour, else re-key it to x; splice y's list onto x's. Returns how many were moved."""
    end_a, end_b, w, v, alive, judged = cells
    head, tail, nxt, mark = lists
    r, moved = head[y], 0
    while r >= 0:
        c = r // 2
        if alive[c]:
            z = end_a[c] + end_b[c] - y
            if mark[z] >= 0:
                w[mark[z]] += w[c]
                judged[mark[z]] += judged[c]
                v[mark[z]] = v[mark[z]] or v[c]
                alive[c] = False
            elif end_a[c] == y:
                end_a[c] = x
            else:
                end_b[c] = x
            moved += 1
        r = nxt[r]
    if head[y] >= 0:
        if tail[x] < 0:
            head[x] = head[y]
        else:
            nxt[tail[x]] = head[y]
        tail[x] = tail[y]
    head[y] = -1
    tail[y] = -1
    return moved


@njit(cache=True)
def merge_loop(
    parent: np.ndarray,
    size: np.ndarray,
    cells: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    link_threshold: float,
    unjudged_weight: float,
) -> None:
    """Run the merge loop in place on ``parent`` (int64, n) and ``size`` (float64, n).

    ``cells`` = (ends, weight, vetoed, judged): ``ends`` (int64, (m, 2)) holds distinct node
    pairs, first < second, with their summed ``weight`` (float64), ``vetoed`` flag (bool) and
    ``judged`` listing pairs (float64); the heap starts with every unvetoed pair whose linkage
    (`_linkage`) reaches ``link_threshold``. Entries pop in ascending (-linkage, x, y); a popped
    entry is stale when x or y was merged away, or its linkage now differs by more than 1e-12;
    otherwise y is folded into x.
    """
    ends, weight, vetoed, judged = cells
    m = ends.shape[0]
    state = (
        ends[:, 0].copy(),
        ends[:, 1].copy(),
        weight.copy(),
        vetoed.copy(),
        np.ones(m, dtype=np.bool_),
        judged.copy(),
    )
    end_a, end_b, w, v, alive, seen = state
    lists = _adjacency(parent.shape[0], end_a, end_b)
    empty = np.empty(0, np.int64)
    heap = _reserve((np.empty(0), empty, empty, empty), 0, max(16, m))
    count = 0
    for c in range(m):
        linkage = _linkage(w[c], seen[c], size[end_a[c]] * size[end_b[c]], unjudged_weight)
        if not v[c] and linkage >= link_threshold:
            _push(heap, count, (-linkage, end_a[c], end_b[c], c))
            count += 1
    while count > 0:
        neg, x, y, cxy = heap[0][0], heap[1][0], heap[2][0], heap[3][0]
        count -= 1
        if count > 0:
            _place(heap, 0, (heap[0][count], heap[1][count], heap[2][count], heap[3][count]))
            _sift_down(heap, 0, count)
        if parent[x] != x or parent[y] != y or not alive[cxy] or v[cxy]:
            continue
        if abs(_linkage(w[cxy], seen[cxy], size[x] * size[y], unjudged_weight) + neg) > 1e-12:
            continue  # stale entry: linkage changed since it was pushed
        parent[y] = x
        size[x] += size[y]
        alive[cxy] = False
        marked = _mark(x, state, lists)
        moved = _absorb(x, y, state, lists)
        heap = _reserve(heap, count, marked + moved)
        count = _push_links(x, state, lists, (size, link_threshold, unjudged_weight), heap, count)


@dataclass(frozen=True)
class Cells:
    """What the merge loop reads of the judged pairs: one cell per node pair that can matter
    (`_relevant_pairs`), lo < hi, with its summed accepted score ``weight`` (weighted by
    listings per node), ``judged`` listing pairs and ``vetoed`` flag, and the component of the
    accepted graph its nodes are in. A component's merges read its own cells alone."""

    lo: np.ndarray  # int64
    hi: np.ndarray  # int64
    weight: np.ndarray  # float64
    judged: np.ndarray  # float64
    vetoed: np.ndarray  # bool
    component: np.ndarray  # int64

    def take(self, rows: np.ndarray | slice) -> Cells:
        return Cells(*(getattr(self, field.name)[rows] for field in fields(self)))


def link_cells(counts: np.ndarray, scored: pl.DataFrame, unjudged_weight: float) -> Cells:
    """The `Cells` of the judged pairs over nodes of ``counts`` listings each."""
    n = len(counts)
    relevant, component = _relevant_pairs(n, scored, keep_rejected=unjudged_weight < 1)
    xs = relevant["a"].to_numpy().astype(np.int64, copy=False)
    ys = relevant["b"].to_numpy().astype(np.int64, copy=False)
    ok = relevant[S.ACCEPTED].to_numpy()
    vetoed = relevant[S.VETO_REASON].to_numpy().astype(bool)
    judged = (counts[xs] * counts[ys]).astype(np.float64)
    weights = np.where(ok, relevant["score"].to_numpy() * counts[xs] * counts[ys], 0.0)
    lo, hi, weights, judged, vetoed = _one_cell_per_pair(xs, ys, weights, judged, vetoed)
    return Cells(lo, hi, weights, judged, vetoed, component[lo].astype(np.int64))


def merge_cells(
    counts: np.ndarray, cells: Cells, link_threshold: float, unjudged_weight: float
) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of ``cells`` (whole components) and each one's cluster label (its smallest
    member node), by constrained average linkage (see `agglomerate`).

    The nodes are renumbered in their order, so ties break as they would among all nodes and
    a component's labels do not depend on which others are merged beside it.
    """
    nodes = np.unique(np.concatenate([cells.lo, cells.hi]))
    lo, hi = np.searchsorted(nodes, cells.lo), np.searchsorted(nodes, cells.hi)
    size = counts[nodes].astype(np.float64)
    # A component of two nodes holds exactly one cell and nothing else can touch it: it merges
    # iff that cell is unvetoed and its linkage reaches the threshold, as in the loop.
    _, component_at = np.unique(cells.component, return_inverse=True)
    component_nodes = np.zeros(len(nodes), dtype=np.int64)
    component_nodes[lo] = component_at
    component_nodes[hi] = component_at
    two = np.bincount(component_nodes)[component_at] == 2
    mean = _linkage.py_func(cells.weight, cells.judged, size[lo] * size[hi], unjudged_weight)
    merges = two & ~cells.vetoed & (mean >= link_threshold)
    parent = np.arange(len(nodes), dtype=np.int64)
    parent[hi[merges]] = lo[merges]
    rest = ~two
    ends = np.stack([lo[rest], hi[rest]], axis=1)
    rest_cells = (ends, cells.weight[rest], cells.vetoed[rest], cells.judged[rest])
    merge_loop(parent, size, rest_cells, float(link_threshold), float(unjudged_weight))
    return nodes, nodes[_resolve(parent)]


def agglomerate(
    counts: np.ndarray, scored: pl.DataFrame, link_threshold: float, unjudged_weight: float = 1.0
) -> np.ndarray:
    """(n,) int64 cluster label (smallest member node) per node, by constrained average linkage.

    Linkage of clusters A, B = sum of accepted scores over cross pairs (weighted by listings per
    node) / (|A| * |B|), where a cross pair that was never a candidate counts as a score of 0
    with weight ``unjudged_weight`` (1: as any rejected pair; lower: a large product whose
    listings were not all compared still holds together); a vetoed cross pair blocks the merge
    for good. Clusters merge in descending linkage, ties by node index, so the result is
    deterministic and independent of input order. The merge loop itself is `merge_loop`
    (compiled); `cluster.link_groups` runs the same merges per group of components.
    """
    labels = np.arange(len(counts), dtype=np.int64)
    nodes, found = merge_cells(
        counts, link_cells(counts, scored, unjudged_weight), link_threshold, unjudged_weight
    )
    labels[nodes] = found
    return labels


def _one_cell_per_pair(
    xs: np.ndarray, ys: np.ndarray, weights: np.ndarray, judged: np.ndarray, vetoed: np.ndarray
) -> tuple[np.ndarray, ...]:
    """(lo, hi, weight, judged, vetoed) with lo < hi and a repeated pair made one cell: weights
    and judged pairs summed in input order (np.add.at is unbuffered and sequential: ((w1 + w2)
    + w3), as the cell accumulated them), vetoes OR-ed."""
    lo, hi = np.minimum(xs, ys), np.maximum(xs, ys)
    keys = (lo << 32) | hi
    sorted_keys = np.sort(keys)
    if not np.any(sorted_keys[1:] == sorted_keys[:-1]):
        return lo, hi, weights, judged, vetoed
    unique, inverse = np.unique(keys, return_inverse=True)
    summed, seen = np.zeros(len(unique)), np.zeros(len(unique))
    np.add.at(summed, inverse, weights)
    np.add.at(seen, inverse, judged)
    any_veto = np.zeros(len(unique), dtype=bool)
    np.logical_or.at(any_veto, inverse, vetoed)
    return unique >> 32, unique & 0xFFFFFFFF, summed, seen, any_veto


def _relevant_pairs(
    n: int, scored: pl.DataFrame, keep_rejected: bool = False
) -> tuple[pl.DataFrame, np.ndarray]:
    """Accepted pairs, and vetoed pairs inside one component of the accepted graph: a veto
    across components can never be tested, so the rest (most candidates) is dropped before the
    merge loop. A rejected pair adds nothing to a linkage unless unjudged pairs weigh less
    than judged ones (``keep_rejected``: rejected pairs inside a component are kept too). Also
    returns the (n,) component label of every node in the accepted graph."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    pairs = scored.select("a", "b", "score", S.ACCEPTED, pl.col(S.VETO_REASON).is_not_null())
    accepted = pairs.filter(pl.col(S.ACCEPTED))
    graph = coo_matrix(
        (np.ones(len(accepted)), (accepted["a"].to_numpy(), accepted["b"].to_numpy())),
        shape=(n, n),
    )
    component = connected_components(graph, directed=False)[1]
    same = pl.Series(component[pairs["a"].to_numpy()] == component[pairs["b"].to_numpy()])
    inside = same if keep_rejected else pl.col(S.VETO_REASON) & same
    return pairs.filter(pl.col(S.ACCEPTED) | inside), component


def _resolve(parent: np.ndarray) -> np.ndarray:
    roots = parent.copy()
    while True:
        nxt = roots[roots]
        if np.array_equal(nxt, roots):
            return roots.astype(np.int64)
        roots = nxt
