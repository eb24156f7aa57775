"""The shards stage: layout, accounting, product-disjoint blocks, split, determinism."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig, build_config
from pairsieve.core.hashing import hex_digest, label_int
from pairsieve.core.io import sha256_file
from pairsieve.errors import PairsieveError
from pairsieve.shards import batching
from pairsieve.shards import stage as shards

BRANDS = ["acme", "zenith", "orbit", "nova", "pico", "vertex"]
KINDS = ["phone", "laptop", "camera", "tablet", "headphones"]


def fixture_tables(n_products: int = 60, k: int = 3, seed: int = 0) -> dict[str, pl.DataFrame]:
    """Small hand-built ingest/cluster/mine outputs: seller copies, head products, short rows.

    Each product has 1-3 listings (copies from several sellers); head products get many queries;
    some queries click two products; a few (query, positive) pairs get fewer than k negatives.
    """
    rng = random.Random(seed)
    listings, products, clicks, negatives = [], [], [], []
    by_product: dict[str, list[str]] = {}
    for p in range(n_products):
        brand, kind = BRANDS[p % len(BRANDS)], KINDS[p % len(KINDS)]
        base = f"{brand} {kind} model {100 + p} {32 * (1 + p % 4)}gb"
        pid = f"prod-{p:03d}"
        for s in range(1 + p % 3):
            lid = f"L{p:03d}-{s}"
            title = base if s == 0 else f"{base} seller{s} edition"
            listings.append({S.LISTING_ID: lid, S.TITLE: title, "seller_id": f"s{s}"})
            products.append({S.LISTING_ID: lid, S.PRODUCT_ID: pid, S.CLUSTER_SIZE: 1 + p % 3})
            by_product.setdefault(pid, []).append(lid)
    pids = sorted(by_product)
    for p, pid in enumerate(pids):
        brand, kind = BRANDS[p % len(BRANDS)], KINDS[p % len(KINDS)]
        n_queries = 8 if p < 4 else 1 + p % 5  # four head products
        for q in range(n_queries):
            query = f"{brand} {kind} {100 + p}" + ("" if q == 0 else f" variant {q}")
            clicked = [rng.choice(by_product[pid])]
            if q % 4 == 3:  # a query with a second clicked product
                clicked.append(by_product[pids[(p + 7) % len(pids)]][0])
            for lid in clicked:
                clicks.append(
                    {
                        S.QUERY: query.upper() if q % 2 else query,
                        S.QUERY_NORM: query,
                        S.QUERY_ID: hex_digest(query),
                        S.LISTING_ID: lid,
                        S.CLICKS: 1 + q,
                    }
                )
    for row in clicks:
        positive_product = next(pid for pid, ls in by_product.items() if row[S.LISTING_ID] in ls)
        others = [pid for pid in pids if pid != positive_product]
        n_neg = k - 1 if rng.random() < 0.1 else k + 1  # some pairs are short of negatives
        for rank, pid in enumerate(rng.sample(others, n_neg), start=1):
            negatives.append(
                {
                    S.QUERY: row[S.QUERY],
                    S.POSITIVE_LISTING_ID: row[S.LISTING_ID],
                    S.NEGATIVE_LISTING_ID: rng.choice(by_product[pid]),
                    S.RANK: rank,
                    S.SCORE: round(0.8 - 0.05 * rank, 3),
                    S.POSITIVE_SCORE: 0.9,
                }
            )
    negatives = list(
        {(n[S.QUERY], n[S.POSITIVE_LISTING_ID], n[S.RANK]): n for n in negatives}.values()
    )
    return {
        "clicks": pl.DataFrame(clicks),
        "listings": pl.DataFrame(listings),
        "products": pl.DataFrame(products),
        "negatives": pl.DataFrame(negatives),
    }


def make_config(**overrides) -> PairsieveConfig:
    base = {"shards.batch_size": 8, "mine.num_negatives": 3}
    return build_config({}, {**base, **overrides})


def build(tmp: Path, cfg: PairsieveConfig, tables: dict[str, pl.DataFrame]):
    return shards.run(cfg, shards.Inputs(**tables), tmp, fingerprints={"inputs": "abc"})


def read_split(out: Path, prefix: str) -> pl.DataFrame:
    return pl.concat([pl.read_parquet(p) for p in sorted(out.glob(f"{prefix}-0*.parquet"))])


@pytest.fixture(scope="module")
def tables() -> dict[str, pl.DataFrame]:
    return fixture_tables()


def test_layout_labels_and_accounting(tmp_path, tables):
    result = build(tmp_path, make_config(), tables)
    assert result.balanced()
    assert result.rows_in == tables["clicks"].select(S.QUERY, S.LISTING_ID).unique().height
    assert result.dropped_by_reason["too_few_negatives"] > 0
    train = read_split(tmp_path, "train")
    meta = read_split(tmp_path, "meta")
    assert train.columns == [
        "anchor",
        "positive",
        "negative_1",
        "negative_2",
        "negative_3",
        "label",
    ]
    assert train.schema["label"] == pl.List(pl.Int64)
    assert train.height == meta.height == result.rows_out
    assert train["label"].list.len().unique().to_list() == [4]
    assert train.select(pl.all().is_null().any()).row(0) == (False,) * 6  # never padded
    assert meta[S.ROW_ID].to_list() == list(range(meta.height))
    product_of = dict(tables["products"].select(S.LISTING_ID, S.PRODUCT_ID).iter_rows())
    title_of = dict(tables["listings"].select(S.LISTING_ID, S.TITLE).iter_rows())
    for row, info in zip(train.iter_rows(named=True), meta.iter_rows(named=True), strict=True):
        assert row["positive"] == title_of[info[S.POSITIVE_LISTING_ID]]
        expected = [info[S.POSITIVE_LISTING_ID], *info[S.NEGATIVE_LISTING_IDS]]
        assert row["label"] == [label_int(product_of[lid]) for lid in expected]
        assert [row[f"negative_{i}"] for i in (1, 2, 3)] == [title_of[x] for x in expected[1:]]


def assert_blocks_disjoint(train: pl.DataFrame, batch_size: int) -> int:
    """Every block: distinct positives and anchors, no negative equal to another row's positive."""
    labels = train["label"].to_list()
    anchors = train["anchor"].to_list()
    blocks = 0
    for start in range(0, len(labels), batch_size):
        block = labels[start : start + batch_size]
        positives = [lab[0] for lab in block]
        assert len(set(positives)) == len(positives)
        assert len(set(anchors[start : start + batch_size])) == len(block)
        for lab in block:
            assert not set(lab[1:]) & set(positives)
        blocks += 1
    return blocks


@pytest.mark.parametrize("batch_size", [4, 8, 16])
def test_every_block_is_product_disjoint(tmp_path, tables, batch_size):
    result = build(tmp_path, make_config(**{"shards.batch_size": batch_size}), tables)
    train = read_split(tmp_path, "train")
    assert assert_blocks_disjoint(train, batch_size) == result.details["batches"]
    assert result.balanced()


def test_builds_are_byte_identical_whatever_the_input_order(tmp_path, tables):
    cfg = make_config(**{"shards.rows_per_shard": 50, "shards.eval_fraction": 0.2})
    build(tmp_path / "a", cfg, tables)
    shuffled = {
        name: frame.sample(fraction=1.0, shuffle=True, seed=3) for name, frame in tables.items()
    }
    build(tmp_path / "b", cfg, shuffled)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "b").iterdir())
    assert len([n for n in names if n.startswith("train-")]) > 1
    for name in names:
        assert sha256_file(tmp_path / "a" / name) == sha256_file(tmp_path / "b" / name), name
    manifest = json.loads((tmp_path / "a" / S.MANIFEST_FILE).read_text())
    for entry in manifest["files"]["train"] + manifest["files"]["eval"]:
        assert entry["sha256"] == sha256_file(tmp_path / "a" / entry["name"])
    assert manifest["input_fingerprints"] == {"inputs": "abc"}
    assert manifest["batch_size"] == 8 and manifest["seed"] == cfg.seed


def test_seed_changes_the_order(tmp_path, tables):
    build(tmp_path / "a", make_config(), tables)
    build(tmp_path / "b", make_config(seed=99), tables)
    a, b = read_split(tmp_path / "a", "train"), read_split(tmp_path / "b", "train")
    assert a["anchor"].to_list() != b["anchor"].to_list()


def test_no_product_crosses_the_split(tmp_path, tables):
    result = build(tmp_path, make_config(**{"shards.eval_fraction": 0.25}), tables)
    assert result.balanced()
    train, evalset = read_split(tmp_path, "train"), read_split(tmp_path, "eval")
    train_meta, eval_meta = read_split(tmp_path, "meta"), read_split(tmp_path, "eval-meta")
    assert evalset.height == eval_meta.height > 0
    assert evalset.columns == train.columns
    train_products = set(train_meta[S.POSITIVE_PRODUCT_ID].to_list())
    eval_products = set(eval_meta[S.POSITIVE_PRODUCT_ID].to_list())
    assert not train_products & eval_products
    assert not {lab[0] for lab in train["label"].to_list()} & {lab[0] for lab in evalset["label"]}
    # whole products: every kept row of an eval product is in eval
    assert result.rows_out == train.height + evalset.height
    leakage = json.loads((tmp_path / S.MANIFEST_FILE).read_text())["leakage"]
    assert leakage["ok"] and leakage["positive_products_in_both"] == 0
    assert leakage["eval_products"] == len(eval_products)


def test_product_cap_is_counted(tmp_path, tables):
    result = build(tmp_path, make_config(**{"shards.max_rows_per_product": 2}), tables)
    meta = read_split(tmp_path, "meta")
    assert meta[S.POSITIVE_PRODUCT_ID].value_counts()["count"].max() <= 2
    assert result.dropped_by_reason["product_cap"] > 0
    assert result.balanced()


def test_rows_that_cannot_be_placed_are_reported(tmp_path):
    # one product with 12 rows and only 3 others: at most 4 full blocks of 4 can hold it
    listings = pl.DataFrame(
        {S.LISTING_ID: [f"L{i}" for i in range(16)], S.TITLE: [f"t{i}" for i in range(16)]}
    )
    products = pl.DataFrame(
        {
            S.LISTING_ID: [f"L{i}" for i in range(16)],
            S.PRODUCT_ID: ["head"] * 12 + ["a", "b", "c", "d"],
        }
    )
    clicks = pl.DataFrame(
        {S.QUERY: [f"q{i}" for i in range(15)], S.LISTING_ID: [f"L{i}" for i in range(15)]}
    )
    negatives = pl.DataFrame(
        {
            S.QUERY: [f"q{i}" for i in range(15)],
            S.POSITIVE_LISTING_ID: [f"L{i}" for i in range(15)],
            S.NEGATIVE_LISTING_ID: ["L15"] * 15,
            S.RANK: [1] * 15,
            S.SCORE: [0.5] * 15,
            S.POSITIVE_SCORE: [0.9] * 15,
        }
    )
    cfg = build_config({}, {"shards.batch_size": 4, "mine.num_negatives": 1})
    result = build(
        tmp_path,
        cfg,
        {"clicks": clicks, "listings": listings, "products": products, "negatives": negatives},
    )
    assert result.balanced()
    assert result.dropped_by_reason["unplaceable"] >= 8
    assert_blocks_disjoint(read_split(tmp_path, "train"), 4)


def test_negatives_keyed_on_normalised_query(tmp_path, tables):
    clicks = tables["clicks"]
    norm_of = dict(clicks.select(S.QUERY, S.QUERY_NORM).iter_rows())
    negatives = tables["negatives"].with_columns(pl.col(S.QUERY).replace_strict(norm_of))
    result = build(tmp_path, make_config(), {**tables, "negatives": negatives})
    assert result.details["query_key"] == S.QUERY_NORM
    assert result.balanced() and result.rows_out > 0
    assert result.rows_in == clicks.select(S.QUERY_NORM, S.LISTING_ID).unique().height


def test_missing_column_names_input(tmp_path, tables):
    with pytest.raises(PairsieveError) as err:
        build(tmp_path, make_config(), {**tables, "negatives": tables["negatives"].drop(S.RANK)})
    assert err.value.code == "missing_column" and err.value.column == S.RANK


def test_reads_parquet_paths(tmp_path, tables):
    paths = {}
    for name, frame in tables.items():
        paths[name] = tmp_path / f"{name}.parquet"
        frame.write_parquet(paths[name])
    from_paths = shards.run(make_config(), shards.Inputs(**paths), tmp_path / "out")
    from_frames = build(tmp_path / "frames", make_config(), tables)
    assert from_paths.rows_out == from_frames.rows_out
    assert sha256_file(tmp_path / "out" / "train-00000.parquet") == sha256_file(
        tmp_path / "frames" / "train-00000.parquet"
    )


def test_planner_on_skewed_random_rows():
    rng = np.random.default_rng(1)
    n, n_products = 5000, 2000
    weights = 1 / np.arange(1, n_products + 1) ** 0.6
    weights /= weights.sum()
    positive = rng.choice(n_products, n, p=weights).astype(np.int64)
    negatives = rng.choice(n_products, (n, 4), p=weights).astype(np.int64)
    groups = rng.integers(0, n // 2, n)
    keys = rng.integers(0, 2**63, n).astype(np.uint64)
    plan = batching.plan_product_disjoint(positive, negatives, groups, keys, 32)
    placed = np.concatenate([plan.order, plan.unplaced])
    assert sorted(placed.tolist()) == list(range(n))  # every row placed or reported, once
    possible = np.minimum(np.bincount(positive), -(-n // 32)).sum()  # one row per product per block
    assert len(plan.order) > 0.97 * possible
    for batch in plan.batches()[:-1]:
        assert len(batch) == 32
    for batch in plan.batches():
        assert len(set(positive[batch])) == len(batch)
        assert len(set(groups[batch])) == len(batch)
        for row in batch:  # random negatives may hit the row's own product; mining never does
            assert not set(negatives[row]) & (set(positive[batch]) - {positive[row]})
    again = batching.plan_product_disjoint(positive, negatives, groups, keys, 32)
    assert np.array_equal(plan.order, again.order)


def test_negatives_outside_the_catalog_are_skipped_and_counted(tmp_path, tables):
    stray = (
        tables["negatives"]
        .head(1)
        .with_columns(pl.lit("L-missing").alias(S.NEGATIVE_LISTING_ID), pl.col(S.RANK) * 0)
    )
    with_stray = pl.concat([stray, tables["negatives"]])
    result = build(tmp_path / "a", make_config(), {**tables, "negatives": with_stray})
    plain = build(tmp_path / "b", make_config(), tables)
    assert result.details["negatives_unknown_listing"] == 1
    assert plain.details["negatives_unknown_listing"] == 0
    assert sha256_file(tmp_path / "a" / "train-00000.parquet") == sha256_file(
        tmp_path / "b" / "train-00000.parquet"
    )


def test_pairs_only_when_num_negatives_is_zero(tmp_path, tables):
    result = build(tmp_path, make_config(**{"shards.num_negatives": 0}), tables)
    train = read_split(tmp_path, "train")
    assert train.columns == ["anchor", "positive", "label"]
    assert train["label"].list.len().unique().to_list() == [1]
    assert result.dropped_by_reason["too_few_negatives"] == 0
    assert result.balanced()
    assert_blocks_disjoint(train, 8)
