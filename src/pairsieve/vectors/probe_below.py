"""The scan below the margin approximated on the IVF index, with the exact scan as its guard.

Mining searches below a query's margin only for the queries its first round left short, mostly
those whose weakly matched positive puts hundreds or thousands of listings above the margin.
The exact scan (`knn.scan_below`) scores every listing for each of them. A search of the IVF
index that probes ``nprobe`` lists (more than the first round's) scores the listings of those
lists only, a few percent of a large catalog, and ranks them. The listings just below a query's
ceiling score high against the query, so they lie in the lists nearest to it, the ones probed.

The guard: where the probed lists held fewer listings than the ranking asked for, the search
ran out of listings, and if fewer than ``depth`` of them score at or below the ceiling, the
query may be short for want of probes rather than of listings. Those queries are scanned
exactly (`unfilled`). Ranks and the count above the ceiling are those of the probed ranking:
listings in lists not probed are not counted.
"""

from __future__ import annotations

import numpy as np

from pairsieve.vectors import knn
from pairsieve.vectors.index_slices import SlicedIndex

_QUERY_CHUNK = 256  # queries searched together: their (256, range_max) rankings, ~30 MB a slice


def select_below(
    scores: np.ndarray, ids: np.ndarray, ceilings: np.ndarray, head: int, depth: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """From rankings (scores, ids) (m, k), best first, ids -1 past the last listing found: per
    row its top ``head`` and its top ``depth`` at or below its ceiling, as `knn.scan_below`
    returns them from the full ranking.

    Returns:
        (row, id, score, rank) as flat arrays in row then rank order, ``above`` (m,): listings
        ranked above the ceiling, and ``unfilled`` (m,) bool: rows whose ranking ran out
        before ``depth`` listings at or below the ceiling were found.
    """
    found = ids >= 0
    below = found & (scores <= np.asarray(ceilings, np.float32)[:, None])
    ranks = np.broadcast_to(np.arange(1, ids.shape[1] + 1), ids.shape)
    nth_below = np.cumsum(below, axis=1)
    keep = found & ((ranks <= head) | (below & (nth_below <= depth)))
    rows = np.broadcast_to(np.arange(len(ids))[:, None], ids.shape)
    above = (found & ~below).sum(axis=1)
    unfilled = ~found.all(axis=1) & (below.sum(axis=1) < depth)
    return (
        rows[keep].astype(np.int64),
        ids[keep].astype(np.int64),
        scores[keep].astype(np.float32),
        ranks[keep].astype(np.int64),
        above.astype(np.int64),
        unfilled,
    )


def probe_below(  # noqa: PLR0913 - scan_below's inputs, the index, its probes and rank cap
    index: SlicedIndex,
    nprobe: int,
    vectors: np.ndarray | knn.VectorFile,
    queries: np.ndarray,
    ceilings: np.ndarray,
    head: int,
    depth: int,
    max_rank: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """`knn.scan_below` of ``queries`` against the listing ``vectors``, from their top
    ``max_rank`` in ``index`` searched with ``nprobe`` lists, each row the guard finds unfilled
    scanned exactly (`select_below`).

    Returns:
        (row, id, score, rank) flat, in row then rank order, ``above`` (m,), and how many rows
        were scanned exactly.
    """
    parts, above, scanned = [], [], 0
    for start in range(0, len(queries), _QUERY_CHUNK):
        chunk = queries[start : start + _QUERY_CHUNK]
        scores, ids = index.search(chunk, max_rank, nprobe)
        row, got, score, rank, over, unfilled = select_below(
            scores, ids, ceilings[start : start + len(chunk)], head, depth
        )
        probed = ~unfilled[row]
        parts.append((row[probed] + start, got[probed], score[probed], rank[probed]))
        if unfilled.any():
            guarded = np.flatnonzero(unfilled)
            scanned += len(guarded)
            row, got, score, rank, over[guarded] = knn.scan_below(
                vectors, chunk[guarded], ceilings[start:][guarded], head, depth
            )
            parts.append((guarded[row] + start, got, score, rank))
        above.append(over)
    if not parts:
        empty = np.empty(0, np.int64)
        return empty, empty, np.empty(0, np.float32), empty, empty, 0
    row, got, score, rank = (np.concatenate(column) for column in zip(*parts, strict=True))
    order = np.lexsort((rank, row))
    return row[order], got[order], score[order], rank[order], np.concatenate(above), scanned
