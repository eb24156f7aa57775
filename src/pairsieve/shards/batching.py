"""Product-disjoint batch planning: blocks in which no row meets a copy of its positive.

Pure numpy/python, shared by the `shards` stage (which writes rows in this order) and by
`pairsieve.training.ProductDisjointBatchSampler` (which plans each epoch afresh). A block of
`batch_size` rows is product-disjoint when no two rows share a positive product or a query, and no
row's negatives include another row's positive product.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class BatchPlan:
    """Rows in placed order: each `batch_size` block is product-disjoint; only the last is short."""

    order: np.ndarray  # (n_placed,) int64 row indices
    batch_size: int
    unplaced: np.ndarray  # (n_unplaced,) int64 row indices that no full block could take

    @property
    def n_batches(self) -> int:
        return -(-len(self.order) // self.batch_size)

    def batches(self, drop_last: bool = False) -> list[np.ndarray]:
        blocks = [
            self.order[i : i + self.batch_size] for i in range(0, len(self.order), self.batch_size)
        ]
        if drop_last and blocks and len(blocks[-1]) < self.batch_size:
            blocks.pop()
        return blocks


class _Block:
    """One batch being filled: the products and queries it already holds."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.positives: set[int] = set()
        self.negatives: set[int] = set()
        self.groups: set[int] = set()

    def fits(self, pos: int, negs: list[int], group: int) -> bool:
        return (
            pos not in self.positives
            and pos not in self.negatives
            and group not in self.groups
            and self.positives.isdisjoint(negs)
        )

    def add(self, row: int, pos: int, negs: list[int], group: int) -> None:
        self.rows.append(row)
        self.positives.add(pos)
        self.negatives.update(negs)
        self.groups.add(group)


def _occurrence(positive: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """(n,) int64: the rank of each row among its product's rows, ordered by key then index."""
    n = len(positive)
    by_product = np.lexsort((np.arange(n), keys, positive))  # (n,) grouped by product, then key
    sorted_pos = positive[by_product]
    starts = np.r_[0, np.flatnonzero(sorted_pos[1:] != sorted_pos[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[by_product] = np.arange(n) - run_start
    return occurrence


def spread_order(positive: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row indices with each product's rows spread evenly over the whole stream.

    A product with c rows puts its j-th row at position (j + u) / c of the stream (u in [0, 1)
    from the row's key), so a head product recurs every ~1/c of the way instead of piling up at
    the end, where only it and its conflicts would be left to fill blocks. On a synthetic Zipf-like
    catalog (1M rows, 250k products, 5 negatives, blocks of 32) the planner places 99.9% of rows in
    20 s; with round-robin order (every product's first row, then every second row ...) 91.7%.
    """
    n = len(positive)
    occurrence = _occurrence(positive, keys)
    _, inverse, counts = np.unique(positive, return_inverse=True, return_counts=True)
    jitter = (keys >> np.uint64(11)).astype(np.float64) / float(1 << 53)  # (n,) in [0, 1)
    position = (occurrence + jitter) / counts[inverse]
    return np.lexsort((np.arange(n), keys, position)).astype(np.int64)


def cap_per_product(positive: np.ndarray, keys: np.ndarray, cap: int | None) -> np.ndarray:
    """Boolean (n,) mask keeping each product's `cap` lowest-key rows (all when cap is None)."""
    if cap is None:
        return np.ones(len(positive), dtype=bool)
    return _occurrence(positive, keys) < cap


class _Planner:
    """Greedy product-disjoint placement; see `plan_product_disjoint`."""

    def __init__(self, positive: np.ndarray, negatives: np.ndarray, groups: np.ndarray) -> None:
        self.pos = positive.tolist()
        self.negs = negatives.tolist()
        self.groups = groups.tolist()
        self.waiting: dict[int, deque[int]] = {}  # product -> rows deferred, oldest first

    def try_add(self, block: _Block, row: int) -> bool:
        if not block.fits(self.pos[row], self.negs[row], self.groups[row]):
            return False
        block.add(row, self.pos[row], self.negs[row], self.groups[row])
        return True

    def retry_waiting(self, block: _Block, batch_size: int) -> None:
        """Offer `block` the head row of waiting products, at most `4 * batch_size` of them.

        Products whose head does not fit rotate to the back, so the scan per block is bounded
        (O(n) in all) and every waiting product gets its turn.
        """
        for _ in range(min(len(self.waiting), 4 * batch_size)):
            if len(block.rows) >= batch_size:
                break
            product = next(iter(self.waiting))
            queue = self.waiting.pop(product)
            if self.try_add(block, queue[0]):
                queue.popleft()
            if queue:
                self.waiting[product] = queue

    def fill(self, block: _Block, stream: Iterator[int], batch_size: int) -> bool:
        """Fill `block` from the waiting queues, then the stream; False once the stream is dry."""
        self.retry_waiting(block, batch_size)
        while len(block.rows) < batch_size:
            row = next(stream, None)
            if row is None:
                return False
            product = self.pos[row]
            if product in self.waiting or not self.try_add(block, row):
                self.waiting.setdefault(product, deque()).append(row)
        return True

    def one_pass(self, rows: list[int], batch_size: int) -> tuple[list[int], list[int], list[int]]:
        """Stream `rows` into blocks: (rows of full blocks, the short block, rows left waiting)."""
        self.waiting = {}
        stream = iter(rows)
        full: list[int] = []
        while True:
            block = _Block()
            if not self.fill(block, stream, batch_size) or len(block.rows) < batch_size:
                break
            full.extend(block.rows)
        waiting = [row for queue in self.waiting.values() for row in queue]
        return full, block.rows, waiting


def plan_product_disjoint(
    positive: np.ndarray,
    negatives: np.ndarray,
    groups: np.ndarray,
    keys: np.ndarray,
    batch_size: int,
) -> BatchPlan:
    """Greedy product-disjoint placement of rows into blocks of `batch_size`.

    `positive` (n,) int64 and `negatives` (n, k) int64 are product ids, `groups` (n,) int64 query
    ids (two rows of one query never share a block: each one's positive would be the other's false
    negative), `keys` (n,) uint64 the seeded priority. Rows are streamed in `spread_order`; a row
    that does not fit the open block waits in a per-product queue whose head is retried at the
    start of every block. A failed fit stays failed while a block grows, so no row needs a second
    look within a block and there is no O(n^2) scan. When the stream runs dry, the rows of the
    short block and the waiting rows get another pass (in priority order) as long as a pass still
    fills a block; then the short block ends the plan and rows still waiting are unplaced.
    """
    planner = _Planner(positive, negatives, groups)
    priority = spread_order(positive, keys)
    rank = np.empty(len(priority), dtype=np.int64)
    rank[priority] = np.arange(len(priority))
    remaining = priority.tolist()
    order: list[int] = []
    while True:
        full, short, waiting = planner.one_pass(remaining, batch_size)
        order.extend(full)
        if not full or not waiting:
            order.extend(short)
            break
        remaining = sorted(short + waiting, key=rank.__getitem__)
    return BatchPlan(
        np.asarray(order, dtype=np.int64), batch_size, np.asarray(sorted(waiting), dtype=np.int64)
    )
