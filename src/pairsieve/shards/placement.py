"""Product-disjoint placement as a map over partitions of the rows (`core.partitions`).

The greedy planner (`batching.plan_product_disjoint`) holds a Python object per row, so the stage
cuts the rows into ceil(rows / `PARTITION_ROWS`) partitions and places each in its own task on the
build's runner. A block never takes rows of two partitions, so every full block a partition fills
is product-disjoint as the planner made it. The cut is along the planner's own stream
(`batching.spread_order`, over all rows after the per-product cap): each product's rows are spread
evenly over that stream, so every partition holds its share of each product, and a product's rows
need no more of a partition's blocks than of the whole. (Partitions of products would confine a
head product to one partition's blocks: with four partitions, its rows beyond a quarter of the
blocks could not be placed.) Each partition ends with a short block and the rows it could not
place; those of several partitions are placed once more together, after every full block (a lone
partition's short block is already one block, and ends the order as it is). The partition count
follows the rows, not the runner or a knob, so the order is the same bytes wherever the map runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core import partitions as parts
from pairsieve.core.partitions import Mapper, Span
from pairsieve.core.plans import Plan
from pairsieve.shards.batching import cap_per_product, plan_product_disjoint, spread_order

PARTITION_ROWS = 1 << 21  # rows a task places: ~1 GB of the planner's Python objects
STEP = "placing rows product-disjointly"
_FULL, _SHORT, _UNPLACED = 0, 1, 2  # where a partition put a row


@dataclass(frozen=True)
class Rows:
    """The rows to place, one entry per row: positive product (n,), negative products (n, k),
    query group (n,) and seeded priority key (n,)."""

    positive: np.ndarray
    negatives: np.ndarray
    groups: np.ndarray
    keys: np.ndarray

    def take(self, rows: np.ndarray) -> Rows:
        return Rows(self.positive[rows], self.negatives[rows], self.groups[rows], self.keys[rows])

    def table(self, rows: np.ndarray) -> pl.DataFrame:
        """``rows`` (indices) with their entries, the negatives one column each."""
        part = self.take(rows)
        columns = {"row": rows, "positive": part.positive, "group": part.groups, "key": part.keys}
        columns |= {f"negative_{i}": part.negatives[:, i] for i in range(part.negatives.shape[1])}
        return pl.DataFrame(columns)

    @staticmethod
    def of_table(table: pl.DataFrame) -> tuple[np.ndarray, Rows]:
        """The inverse of `table`: the row indices and their entries."""
        negatives = [c for c in table.columns if c.startswith("negative_")]
        matrix = table.select(negatives).to_numpy() if negatives else None
        return table["row"].to_numpy(), Rows(
            table["positive"].to_numpy(),
            np.empty((table.height, 0), np.int64) if matrix is None else matrix,
            table["group"].to_numpy(),
            table["key"].to_numpy(),
        )


@dataclass(frozen=True)
class Placed:
    """Rows in placed order (every `batch_size` block product-disjoint, only the last short),
    the rows no block could take, the rows over the per-product cap and the map's figures."""

    order: np.ndarray
    unplaced: np.ndarray
    capped: int
    partitions: int
    plan_s: float


def _partitions(stream: np.ndarray, count: int) -> tuple[np.ndarray, list[Span]]:
    """The rows of ``stream`` cut into ``count`` consecutive runs, each run's rows in index
    order (as the whole is when there is one run), and each run's span of the result."""
    runs = np.array_split(stream, count)
    ends = np.cumsum([len(run) for run in runs]).tolist()
    return np.concatenate([np.sort(run) for run in runs]), list(
        zip([0, *ends[:-1]], ends, strict=True)
    )


@dataclass(frozen=True)
class _SpanFile:
    """What a partition hands back: its rows' places, and its seconds."""

    path: str
    plan_s: float


@dataclass(frozen=True)
class _Plan(Plan):
    """What every partition reads: the rows to place, in partition order (`Rows.table`)."""

    rows: pl.DataFrame | pl.LazyFrame


def place_partition(plan: str, span: Span, cfg: PairsieveConfig) -> _SpanFile:
    """Place the rows at ``span`` of the plan in the folder ``plan``: one partition. Their
    places go to a file in the plan's parent folder, named by the span's first row (a rerun
    overwrites it)."""
    table = parts.held(plan, _Plan.read).rows
    rows, entries = Rows.of_table(table.lazy().slice(span[0], span[1] - span[0]).collect())
    started = time.perf_counter()
    placed = plan_product_disjoint(
        entries.positive, entries.negatives, entries.groups, entries.keys, cfg.shards.batch_size
    )
    n_full = len(placed.order) - len(placed.order) % cfg.shards.batch_size
    places = pl.DataFrame(
        {
            "row": np.concatenate([rows[placed.order], rows[placed.unplaced]]),
            "place": np.repeat(
                np.array([_FULL, _SHORT, _UNPLACED], np.int8),
                [n_full, len(placed.order) - n_full, len(placed.unplaced)],
            ),
        }
    )
    path = io.write_parquet(places, Path(plan).parent / f"placed-{span[0]:010d}.parquet")
    return _SpanFile(str(path), time.perf_counter() - started)


def place_mapped(
    entries: Rows,
    cfg: PairsieveConfig,
    mapper: Mapper,
    partition_rows: int = PARTITION_ROWS,
) -> Placed:
    """Place every row of ``entries`` on ``mapper``, through a plan in its folder (removed by
    the caller), over partitions of about ``partition_rows`` rows once each product's rows over
    the per-product cap are set aside."""
    keep = cap_per_product(entries.positive, entries.keys, cfg.shards.max_rows_per_product)
    kept = np.flatnonzero(keep)
    count = max(1, -(-len(kept) // partition_rows))
    stream = kept[spread_order(entries.positive[kept], entries.keys[kept])]
    rows, spans = _partitions(stream, count)
    plan = _Plan(entries.table(rows)).write(mapper.folder / "plan")
    results = mapper.run(place_partition, plan, spans, cfg, STEP)
    places = pl.concat([pl.read_parquet(r.path) for r in results])
    at = {place: places.filter(pl.col("place") == place)["row"].to_numpy() for place in range(3)}
    tail, unplaced = at[_SHORT], at[_UNPLACED]
    if count > 1:
        tail = np.sort(np.concatenate([tail, unplaced]))
        rest = entries.take(tail)
        again = plan_product_disjoint(
            rest.positive, rest.negatives, rest.groups, rest.keys, cfg.shards.batch_size
        )
        tail, unplaced = tail[again.order], tail[again.unplaced]
    return Placed(
        np.concatenate([at[_FULL], tail]),
        unplaced,
        len(keep) - len(kept),
        count,
        sum(r.plan_s for r in results),
    )
