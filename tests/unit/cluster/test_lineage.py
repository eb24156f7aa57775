from __future__ import annotations

import polars as pl

from pairsieve.cluster.lineage import FIRST_SEEN, first_build, reconcile


def _products(mapping: dict[str, str]) -> pl.DataFrame:
    return pl.DataFrame({"listing_id": list(mapping), "product_id": list(mapping.values())}).sort(
        "listing_id"
    )


def _changes(table: pl.DataFrame) -> set[tuple]:
    return {tuple(r) for r in table.select("change", "product_id", "other_product_id").rows()}


def test_day_two_keeps_ids_joins_merges_splits_and_removes():
    previous = first_build(
        _products(
            {"a1": "A", "a2": "A", "b1": "B", "c1": "C", "c2": "C", "d1": "D", "e1": "E", "e2": "E"}
        )
    ).with_columns(pl.when(pl.col("product_id") == "C").then(1).otherwise(0).alias(FIRST_SEEN))
    current = _products(
        {
            "a1": "x1",
            "a2": "x1",
            "a3": "x1",  # A gains a new seller
            "b1": "x2",
            "c1": "x2",
            "c2": "x2",  # B (older) and C merge
            "e1": "x3",
            "e2": "x4",  # E splits
            "n1": "x5",
            "n2": "x5",  # a new product; D is gone
        }
    )
    products, changes = reconcile(current, previous, build_number=2)
    ids = dict(products.select("listing_id", "product_id").rows())
    assert ids["a1"] == ids["a2"] == ids["a3"] == "A"
    assert ids["b1"] == ids["c1"] == ids["c2"] == "B"
    assert {ids["e1"], ids["e2"]} & {"E"} and ids["e1"] != ids["e2"]
    assert ids["n1"] == ids["n2"] == "x5"
    split_id = ids["e2"] if ids["e1"] == "E" else ids["e1"]
    assert _changes(changes) == {
        ("merged", "B", "C"),
        ("split", split_id, "E"),
        ("new", split_id, None),
        ("new", "x5", None),
        ("removed", "D", None),
    }
    seen = dict(products.select("product_id", FIRST_SEEN).unique().rows())
    assert seen["A"] == 0 and seen["x5"] == 2


def test_fresh_id_colliding_with_a_previous_id_is_rederived():
    previous = first_build(_products({"a1": "A", "a2": "A", "a3": "A"}))
    current = _products({"a1": "A", "a2": "y", "a3": "y"})  # a1 leaves; its fresh id is "A"
    products, _ = reconcile(current, previous, build_number=1)
    ids = dict(products.select("listing_id", "product_id").rows())
    assert ids["a2"] == ids["a3"] == "A"
    assert ids["a1"] != "A"
    assert products["product_id"].n_unique() == 2


def test_unchanged_catalog_changes_nothing():
    previous = first_build(_products({"a1": "A", "b1": "B"}))
    products, changes = reconcile(_products({"a1": "q", "b1": "r"}), previous, build_number=1)
    assert products["product_id"].to_list() == ["A", "B"]
    assert changes.is_empty()
