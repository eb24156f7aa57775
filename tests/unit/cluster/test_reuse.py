"""Day-2 reuse of the previous build's clustering (`cluster.reuse`), and what a previous build
must hold for either stage to reuse it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.cluster import nodes as cluster_nodes
from pairsieve.cluster import reuse
from pairsieve.cluster import stage as cluster
from pairsieve.cluster.reuse import PreviousClustering, positions, touching
from pairsieve.config import PairsieveConfig, load_config
from pairsieve.core import io
from pairsieve.core.partitions import Mapper
from pairsieve.mine.reuse import PreviousMining
from tests import maps
from tests.paths import SAMPLE_DIR
from tests.unit.mine.test_reuse import mined_rows

# --- clustering ----------------------------------------------------------------------------------


def _catalog(rows: list[tuple[str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=[S.LISTING_ID, S.TITLE], orient="row")


def _settled(before: pl.DataFrame, today: pl.DataFrame) -> dict[str, bool]:
    """{representative listing id: settled} for today's nodes."""
    frame = cluster_nodes.prepare(today)
    nodes = cluster_nodes.node_table(frame)
    settled = PreviousClustering(before, Path("never-read.parquet")).settled(frame, nodes)
    return dict(zip(nodes[S.LISTING_ID].to_list(), settled.tolist(), strict=True))


def test_a_node_is_settled_only_when_its_pairs_were_computed_from_the_same_text():
    before = _catalog(
        [
            ("a1", "Samsung Galaxy S21 128GB"),
            ("b1", "Apple iPhone 13 Pro 256GB"),
            ("c1", "Sony WH-1000XM4 headphones"),
            ("c2", "Sony WH-1000XM4 headphones"),  # same title as c1: one node, c1 represents it
            ("d1", "Bosch WAU28T64GB washing machine"),
            ("e1", "Nikon Z6 II body"),
        ]
    )
    today = _catalog(
        [
            ("a1", "Samsung Galaxy S21 128GB"),  # unchanged
            ("b1", "Apple iPhone 13 Pro Max 256GB"),  # retitled
            ("c2", "Sony WH-1000XM4 headphones"),  # c1 left: c2 now represents the node
            ("d0", "Bosch WAU28T64GB washing machine"),  # a new copy with a smaller id
            ("d1", "Bosch WAU28T64GB washing machine"),
            ("e1", "Nikon Z6 II body"),
            ("f1", "Canon EOS R6 body"),  # new
        ]
    )
    assert _settled(before, today) == {
        "a1": True,
        "b1": False,
        "c2": False,
        "d0": False,
        "e1": True,
        "f1": False,
    }


def test_touching_keeps_pairs_with_an_unsettled_end():
    pairs = np.array([[0, 1], [0, 2], [1, 2], [2, 3]])
    unsettled = np.array([False, False, True, False])
    assert touching(pairs, unsettled).tolist() == [[0, 2], [1, 2], [2, 3]]
    assert touching(pairs, None) is pairs


def test_positions_find_each_value_in_the_table_as_a_string_join_does():
    rng = np.random.default_rng(3)
    table = pl.Series([f"L{i:06d}" for i in rng.permutation(5_000)])
    values = pl.Series([f"L{i:06d}" for i in rng.integers(0, 6_000, 20_000)])  # some absent
    lookup = pl.DataFrame({"_v": table}).with_row_index("_i")
    joined = values.to_frame("_v").join(lookup, on="_v", how="left", maintain_order="left")
    expected = joined["_i"].fill_null(-1).to_numpy()
    found = positions(values, table)
    assert np.array_equal(found, expected) and (found == -1).any() and (found >= 0).any()
    assert positions(pl.Series([], dtype=pl.String), table).shape == (0,)


def test_pairs_between_settled_nodes_are_mapped_onto_todays_nodes(tmp_path):
    frame = cluster_nodes.prepare(
        _catalog([("x", "Nikon Z6 II body"), ("y", "Nikon Z 6II body"), ("z", "Canon R6 body")])
    )
    nodes = cluster_nodes.node_table(frame)
    pairs = pl.DataFrame(
        {
            S.LISTING_A: ["y", "x"],
            S.LISTING_B: ["z", "y"],
            S.SIGNAL: ["embedding", "minhash"],
            S.JACCARD: [0.1, 0.5],
            S.COSINE: [0.4, 0.9],
            S.LINK_SCORE: [0.05, 0.8],
            S.ACCEPTED: [False, True],
            S.VETO_REASON: ["model_code_conflict", None],
        }
    )
    listings = pl.DataFrame(schema={S.LISTING_ID: pl.String, S.TITLE: pl.String})
    previous = PreviousClustering(listings, io.write_parquet(pairs, tmp_path / S.PAIRS_FILE))
    index = {lid: i for i, lid in enumerate(nodes[S.LISTING_ID].to_list())}
    settled = np.ones(len(nodes), dtype=bool)
    cfg = PairsieveConfig()
    here = Mapper.local(tmp_path / "here")
    mapped = previous.pairs_between(nodes, settled, cfg, here).collect().sort("a", "b")
    assert mapped.select("a", "b").rows() == sorted(
        [tuple(sorted((index["y"], index["z"]))), tuple(sorted((index["x"], index["y"])))]
    )
    assert set(mapped["score"]) == {0.05, 0.8}
    settled[index["z"]] = False
    assert previous.pairs_between(nodes, settled, cfg, here).collect()["score"].to_list() == [0.8]


@pytest.mark.parametrize("runs", [maps.from_disk, maps.in_processes])
def test_pairs_between_mapped_over_spans_of_the_previous_pairs_are_the_pairs_of_one_read(
    monkeypatch, tmp_path, runs
):
    rng = np.random.default_rng(4)
    ids = [f"L{i:04d}" for i in range(60)]
    titles = [f"product {i % 20} model x{i}" for i in range(60)]
    frame = cluster_nodes.prepare(pl.DataFrame({S.LISTING_ID: ids, S.TITLE: titles}))
    nodes = cluster_nodes.node_table(frame)
    a, b = rng.integers(0, 70, 500), rng.integers(0, 70, 500)  # some ids left the catalog
    pairs = pl.DataFrame(
        {
            S.LISTING_A: [f"L{i:04d}" for i in a],
            S.LISTING_B: [f"L{i:04d}" for i in b],
            S.SIGNAL: "minhash",
            S.JACCARD: rng.random(500),
            S.COSINE: rng.random(500),
            S.LINK_SCORE: rng.random(500),
            S.ACCEPTED: rng.random(500) < 0.5,
            S.VETO_REASON: None,
        },
        schema_overrides={S.VETO_REASON: pl.String},
    )
    previous = PreviousClustering(frame, io.write_parquet(pairs, tmp_path / S.PAIRS_FILE))
    settled = rng.random(len(nodes)) < 0.8
    cfg = PairsieveConfig()
    reps = nodes[S.LISTING_ID].filter(pl.Series(settled))
    plan = reuse.SettledTitles("", reps, np.flatnonzero(settled).astype(np.int64))
    whole = reuse.between(plan, pl.read_parquet(tmp_path / S.PAIRS_FILE))  # one read, no map
    monkeypatch.setattr(reuse, "REUSE_ROWS", 64)  # eight spans
    mapper = Mapper(tmp_path / "partitions", runs)
    mapped = previous.pairs_between(nodes, settled, cfg, mapper).collect()
    assert mapped.equals(whole)
    assert 0 < len(whole) < 500
    assert len(list((tmp_path / "partitions").glob("reused-*.parquet"))) == 8


def test_day_two_of_an_unchanged_catalog_reproduces_day_one_and_a_new_copy_joins_its_product(
    encoder, session_cache_dir, tmp_path
):
    sample = SAMPLE_DIR / "catalog.parquet"
    catalog = pl.read_parquet(sample).sort(S.LISTING_ID).head(400)
    cfg = load_config(None, {"cache_dir": str(session_cache_dir)})
    cluster.run(cfg, cluster.Inputs(catalog), tmp_path / "day1", encoder=encoder)
    previous = PreviousClustering(catalog, tmp_path / "day1" / S.PAIRS_FILE)
    same = cluster.Inputs(catalog)
    result = cluster.run(cfg, same, tmp_path / "same", encoder=encoder, previous=previous)
    every_node = cluster_nodes.node_table(cluster_nodes.prepare(catalog))
    assert result.details["settled_nodes"] == len(every_node)
    assert result.details["candidates_by_signal"] == {"code": 0, "minhash": 0, "embedding": 0}
    assert result.details["signatures_computed"] == 0  # all cached by day 1
    for name in (S.PRODUCTS_FILE, S.PAIRS_FILE):
        assert io.sha256_file(tmp_path / "same" / name) == io.sha256_file(tmp_path / "day1" / name)
    day1 = pl.read_parquet(tmp_path / "day1" / S.PRODUCTS_FILE)
    original = day1.filter(pl.col(S.CLUSTER_SIZE) > 1).row(0, named=True)
    copy = catalog.filter(pl.col(S.LISTING_ID) == original[S.LISTING_ID]).with_columns(
        (pl.col(S.LISTING_ID) + "-copy"), pl.col(S.TITLE).str.to_uppercase()
    )
    day2_inputs = cluster.Inputs(pl.concat([catalog, copy]))
    cluster.run(cfg, day2_inputs, tmp_path / "day2", encoder=encoder, previous=previous)
    day2 = dict(
        pl.read_parquet(tmp_path / "day2" / S.PRODUCTS_FILE)
        .select(S.LISTING_ID, S.PRODUCT_ID)
        .rows()
    )
    assert day2[original[S.LISTING_ID] + "-copy"] == day2[original[S.LISTING_ID]]


def test_a_previous_build_with_another_config_or_older_files_is_not_reused(tmp_path):
    from pairsieve.core.contract import StageResult, run_stage

    def stage(name: str, files: dict[str, pl.DataFrame]) -> None:
        def body(folder: Path) -> StageResult:
            for file, frame in files.items():
                frame.write_parquet(folder / file)
            return StageResult(stage=name, rows_in=0, rows_out=0)

        run_stage(name, tmp_path, "hash-1", "inputs", body)

    listings = pl.DataFrame({S.LISTING_ID: ["a"], S.TITLE: ["t"]})
    stage(
        "ingest",
        {
            S.LISTINGS_FILE: listings,
            S.CLICKS_FILE: pl.DataFrame({S.QUERY: ["q"], S.LISTING_ID: ["a"]}),
        },
    )
    old_pairs = pl.DataFrame({S.LISTING_A: ["a"], S.LISTING_B: ["b"], S.SIGNAL: ["minhash"]})
    stage(
        "cluster",
        {
            S.PAIRS_FILE: old_pairs,
            S.PRODUCTS_FILE: listings.select(S.LISTING_ID, product_id=pl.lit("p")),
        },
    )
    assert "different config" in PreviousClustering.load(tmp_path, "hash-2")
    assert "no link_score" in PreviousClustering.load(tmp_path, "hash-1")
    assert "different config" in PreviousMining.load(tmp_path, "hash-1")  # never mined
    stage("mine", {S.NEGATIVES_FILE: mined_rows("q", "a", [])})
    assert "lacks" in PreviousMining.load(tmp_path, "hash-1")
    assert "different config" in PreviousMining.load(tmp_path, "hash-2")
