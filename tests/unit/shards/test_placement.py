"""Product-disjoint placement mapped over partitions of the rows."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.config import PairsieveConfig
from pairsieve.core.partitions import Mapper
from pairsieve.shards import placement
from pairsieve.shards.batching import cap_per_product, plan_product_disjoint
from tests.maps import from_disk, in_processes

BATCH = 16


def _rows(n: int, n_products: int, seed: int = 1) -> placement.Rows:
    """Zipf-like positives; four negatives per row, never the row's own product (as mined)."""
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, n_products + 1) ** 0.6
    positive = rng.choice(n_products, n, p=weights / weights.sum()).astype(np.int64)
    negatives = (positive[:, None] + rng.integers(1, n_products, (n, 4))) % n_products
    groups = rng.integers(0, n // 2, n)
    keys = rng.integers(0, 2**63, n).astype(np.uint64)
    return placement.Rows(positive, negatives, groups, keys)


def _cfg(cap: int | None = 3) -> PairsieveConfig:
    return PairsieveConfig().with_(
        **{"shards.batch_size": BATCH, "shards.max_rows_per_product": cap}
    )


def test_one_partition_places_the_rows_as_the_planner_does(tmp_path):
    rows, cfg = _rows(3000, 1200), _cfg()
    placed = placement.place_mapped(rows, cfg, Mapper.local(tmp_path))
    keep = np.flatnonzero(cap_per_product(rows.positive, rows.keys, 3))
    kept = rows.take(keep)
    plan = plan_product_disjoint(kept.positive, kept.negatives, kept.groups, kept.keys, BATCH)
    assert placed.partitions == 1
    assert np.array_equal(placed.order, keep[plan.order])
    assert np.array_equal(placed.unplaced, keep[plan.unplaced])
    assert placed.capped == 3000 - len(keep) > 0


def _assert_disjoint_blocks(rows: placement.Rows, order: np.ndarray) -> None:
    for start in range(0, len(order), BATCH):
        block = order[start : start + BATCH]
        assert len(block) == BATCH or start + BATCH >= len(order)  # only the last is short
        positives = set(rows.positive[block].tolist())
        assert len(positives) == len(block)
        assert len(set(rows.groups[block].tolist())) == len(block)
        assert not positives & set(rows.negatives[block].ravel().tolist())


def test_partitions_fill_product_disjoint_blocks_and_account_for_every_row(tmp_path):
    rows = _rows(6000, 2500)
    placed = placement.place_mapped(rows, _cfg(), Mapper.local(tmp_path), partition_rows=1000)
    assert placed.partitions == -(-(6000 - placed.capped) // 1000) > 1  # after the cap
    _assert_disjoint_blocks(rows, placed.order)
    out = np.concatenate([placed.order, placed.unplaced])
    assert len(np.unique(out)) == len(out) == 6000 - placed.capped
    # the cap keeps each product's lowest-key rows, as over one partition
    kept = cap_per_product(rows.positive, rows.keys, 3)
    assert np.array_equal(np.sort(out), np.flatnonzero(kept))
    one = placement.place_mapped(rows, _cfg(), Mapper.local(tmp_path / "one"))
    assert len(placed.order) >= 0.99 * len(one.order)


@pytest.mark.parametrize("runs", [from_disk, in_processes], ids=["from disk", "in processes"])
def test_the_order_is_the_same_wherever_the_partitions_run(tmp_path, runs):
    rows, cfg = _rows(4000, 1500, seed=2), _cfg(cap=None)
    here = placement.place_mapped(rows, cfg, Mapper.local(tmp_path / "here"), partition_rows=700)
    there = placement.place_mapped(rows, cfg, Mapper(tmp_path / "there", runs), partition_rows=700)
    assert here.partitions == there.partitions == 6
    assert np.array_equal(here.order, there.order)
    assert np.array_equal(here.unplaced, there.unplaced)


def test_no_rows_is_one_empty_partition(tmp_path):
    placed = placement.place_mapped(_rows(10, 5).take(np.arange(0)), _cfg(), Mapper.local(tmp_path))
    assert (placed.partitions, len(placed.order), len(placed.unplaced), placed.capped) == (
        1,
        0,
        0,
        0,
    )
