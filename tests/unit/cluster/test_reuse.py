"""Day-2 reuse of the previous build's clustering (`cluster_reuse`) and mining (`mine_reuse`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import stage as cluster
from pairsieve.cluster.reuse import PreviousClustering, positions, touching
from pairsieve.config import load_config
from pairsieve.core import io
from pairsieve.mine.reuse import PreviousMining, refresh_slot
from tests.paths import SAMPLE_DIR

# --- clustering ----------------------------------------------------------------------------------


def _catalog(rows: list[tuple[str, str]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=[S.LISTING_ID, S.TITLE], orient="row")


def _settled(before: pl.DataFrame, today: pl.DataFrame) -> dict[str, bool]:
    """{representative listing id: settled} for today's nodes."""
    frame = cluster.prepare(today)
    nodes = cluster.node_table(frame)
    empty = pl.DataFrame(schema={c: pl.String for c in ("listing_a", "listing_b")})
    settled = PreviousClustering(before, empty).settled(frame, nodes)
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


def test_pairs_between_settled_nodes_are_mapped_onto_todays_nodes():
    frame = cluster.prepare(
        _catalog([("x", "Nikon Z6 II body"), ("y", "Nikon Z 6II body"), ("z", "Canon R6 body")])
    )
    nodes = cluster.node_table(frame)
    previous = PreviousClustering(
        pl.DataFrame(schema={S.LISTING_ID: pl.String, S.TITLE: pl.String}),
        pl.DataFrame(
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
        ),
    )
    index = {lid: i for i, lid in enumerate(nodes[S.LISTING_ID].to_list())}
    settled = np.ones(len(nodes), dtype=bool)
    mapped = previous.pairs_between(nodes, settled).sort("a", "b")
    assert mapped.select("a", "b").rows() == sorted(
        [tuple(sorted((index["y"], index["z"]))), tuple(sorted((index["x"], index["y"])))]
    )
    assert set(mapped["score"]) == {0.05, 0.8}
    settled[index["z"]] = False
    assert previous.pairs_between(nodes, settled)["score"].to_list() == [0.8]


def test_day_two_of_an_unchanged_catalog_reproduces_day_one_and_a_new_copy_joins_its_product(
    encoder, session_cache_dir, tmp_path
):
    sample = SAMPLE_DIR / "catalog.parquet"
    catalog = pl.read_parquet(sample).sort(S.LISTING_ID).head(400)
    cfg = load_config(None, {"cache_dir": str(session_cache_dir)})
    cluster.run(cfg, catalog, tmp_path / "day1", encoder)
    previous = PreviousClustering(catalog, pl.read_parquet(tmp_path / "day1" / S.PAIRS_FILE))
    result = cluster.run(cfg, catalog, tmp_path / "same", encoder, previous)
    assert result.details["settled_nodes"] == len(cluster.node_table(cluster.prepare(catalog)))
    assert result.details["candidates_by_signal"] == {"code": 0, "minhash": 0, "embedding": 0}
    assert result.details["signatures_computed"] == 0  # all cached by day 1
    for name in (S.PRODUCTS_FILE, S.PAIRS_FILE):
        assert io.sha256_file(tmp_path / "same" / name) == io.sha256_file(tmp_path / "day1" / name)
    day1 = pl.read_parquet(tmp_path / "day1" / S.PRODUCTS_FILE)
    original = day1.filter(pl.col(S.CLUSTER_SIZE) > 1).row(0, named=True)
    copy = catalog.filter(pl.col(S.LISTING_ID) == original[S.LISTING_ID]).with_columns(
        (pl.col(S.LISTING_ID) + "-copy"), pl.col(S.TITLE).str.to_uppercase()
    )
    cluster.run(cfg, pl.concat([catalog, copy]), tmp_path / "day2", encoder, previous)
    day2 = dict(
        pl.read_parquet(tmp_path / "day2" / S.PRODUCTS_FILE)
        .select(S.LISTING_ID, S.PRODUCT_ID)
        .rows()
    )
    assert day2[original[S.LISTING_ID] + "-copy"] == day2[original[S.LISTING_ID]]


# --- mining --------------------------------------------------------------------------------------

_EVERY = 1_000_003  # no query is due for refresh in these tests unless chosen to be


def _rows(query: str, positive: str, negatives: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            S.QUERY: query,
            S.POSITIVE_LISTING_ID: positive,
            S.NEGATIVE_LISTING_ID: negatives,
            S.RANK: pl.Series(range(1, len(negatives) + 1), dtype=pl.Int32),
            S.SCORE: pl.Series([0.5] * len(negatives), dtype=pl.Float32),
            S.POSITIVE_SCORE: pl.Series([0.9] * len(negatives), dtype=pl.Float32),
        }
    )


def _state() -> tuple[PreviousMining, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Two queries over five listings; the previous state and today's identical inputs."""
    listings = pl.DataFrame(
        {
            S.LISTING_ID: ["l1", "l2", "l3", "l4", "l5"],
            S.TITLE: ["t1", "t2", "t3", "t4", "t5"],
            S.PRODUCT_ID: ["p1", "p2", "p3", "p3", "p5"],
        }
    )
    pairs = pl.DataFrame({S.QUERY: ["q1", "q2"], S.LISTING_ID: ["l1", "l5"]})
    kept = pl.concat([_rows("q1", "l1", ["l2", "l3"]), _rows("q2", "l5", ["l1"])])
    dropped = _rows("q1", "l1", ["l4"]).with_columns(pl.lit("product_repeat").alias(S.REASON))
    state = PreviousMining(kept, dropped, pairs, listings)
    return state, pairs, listings.drop(S.PRODUCT_ID), listings.select(S.LISTING_ID, S.PRODUCT_ID)


def _reused(state, pairs, listings, products, build=1, every=_EVERY) -> list[str]:
    return state.plan(pairs, listings, products, (build, every)).reused.to_list()


def _refiltered(state, pairs, listings, products, build=1, every=_EVERY) -> list[str]:
    return state.plan(pairs, listings, products, (build, every)).refiltered.to_list()


def test_unchanged_queries_are_reused_and_a_new_product_id_alone_changes_nothing():
    state, pairs, listings, products = _state()
    assert _reused(state, pairs, listings, products) == ["q1", "q2"]
    renamed = products.with_columns(pl.col(S.PRODUCT_ID).replace({"p3": "p9"}))
    assert _reused(state, pairs, listings, renamed) == ["q1", "q2"]


def test_regrouped_queries_are_refiltered_and_retitled_or_removed_listings_send_theirs_to_mining():
    state, pairs, listings, products = _state()
    split = products.with_columns(
        pl.when(pl.col(S.LISTING_ID) == "l4")
        .then(pl.lit("p4"))
        .otherwise(pl.col(S.PRODUCT_ID))
        .alias(S.PRODUCT_ID)
    )
    # l4 was only a dropped candidate of q1: its new product changes no kept row.
    assert _reused(state, pairs, listings, split) == ["q1", "q2"]
    merged = products.with_columns(pl.col(S.PRODUCT_ID).replace({"p2": "p1"}))
    assert _reused(state, pairs, listings, merged) == ["q2"]  # q1's negative l2 joined l1
    assert _refiltered(state, pairs, listings, merged) == ["q1"]  # its candidates still stand
    negatives_merged = products.with_columns(pl.col(S.PRODUCT_ID).replace({"p3": "p2"}))
    assert _reused(state, pairs, listings, negatives_merged) == ["q2"]  # q1: l2, l3 one product
    assert _refiltered(state, pairs, listings, negatives_merged) == ["q1"]
    assert _refiltered(state, pairs, listings, merged, every=1) == []  # due: mined
    retitled = listings.with_columns(pl.col(S.TITLE).replace({"t5": "t5b"}))
    assert _reused(state, pairs, retitled, products) == ["q1"]
    removed = listings.filter(pl.col(S.LISTING_ID) != "l3")
    assert _reused(state, pairs, removed, products) == ["q2"]
    # A changed listing a query saw sends it to mining, regrouped or not.
    assert _refiltered(state, pairs, retitled, merged) == ["q1"]  # only q2 saw the retitled l5
    assert _refiltered(state, pairs, removed, merged) == []  # q1 saw the removed l3
    # A new listing changes nothing for queries that never saw it.
    added = pl.concat([listings, pl.DataFrame({S.LISTING_ID: ["l6"], S.TITLE: ["t6"]})])
    assert _reused(state, pairs, added, products) == ["q1", "q2"]


def test_new_clicks_and_the_refresh_slot_send_queries_back_to_mining():
    state, pairs, listings, products = _state()
    clicked = pl.concat([pairs, pl.DataFrame({S.QUERY: ["q2"], S.LISTING_ID: ["l2"]})])
    assert _reused(state, clicked, listings, products) == ["q1"]
    assert _reused(state, pairs.filter(pl.col(S.QUERY) == "q1"), listings, products) == ["q1"]
    every = 7
    due = refresh_slot("q1", every)
    assert _reused(state, pairs, listings, products, build=due, every=every) == (
        ["q2"] if refresh_slot("q2", every) != due else []
    )
    assert _reused(state, pairs, listings, products, every=1) == []


def test_queries_that_only_gained_clicks_are_refiltered_unless_a_listing_they_saw_changed():
    state, pairs, listings, products = _state()
    assert _refiltered(state, pairs, listings, products) == []
    gained = pl.concat([pairs, pl.DataFrame({S.QUERY: ["q2", "q3"], S.LISTING_ID: ["l2"] * 2})])
    assert _refiltered(state, gained, listings, products) == ["q2"]  # q3 is new: mined
    # A regrouped product is fine (the filter runs on today's products), a changed title is not.
    merged = products.with_columns(pl.col(S.PRODUCT_ID).replace({"p1": "p5"}))
    assert _refiltered(state, gained, listings, merged) == ["q2"]
    retitled = listings.with_columns(pl.col(S.TITLE).replace({"t1": "t1b"}))
    assert _refiltered(state, gained, retitled, products) == []
    # Swapping a click is not gaining one; the refresh slot applies as to reuse.
    swapped = pl.DataFrame({S.QUERY: ["q1", "q2"], S.LISTING_ID: ["l1", "l2"]})
    assert _refiltered(state, swapped, listings, products) == []
    assert _refiltered(state, gained, listings, products, every=1) == []


def test_previous_candidates_are_every_listing_a_query_was_shown_once():
    state, *_ = _state()
    two_positives = pl.concat([state.kept, _rows("q1", "l5", ["l2", "l3"])])
    state = PreviousMining(two_positives, state.dropped, state.pairs, state.listings)
    candidates = state.candidates_of(pl.Series(S.QUERY, ["q1"]))
    assert sorted(candidates[S.NEGATIVE_LISTING_ID].to_list()) == ["l2", "l3", "l4"]
    assert candidates.columns == [S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK]


def test_reused_rows_are_the_previous_rows_of_those_queries():
    state, *_ = _state()
    kept, dropped = state.rows_of(pl.Series(S.QUERY, ["q1"]))
    assert kept[S.NEGATIVE_LISTING_ID].to_list() == ["l2", "l3"]
    assert dropped[S.NEGATIVE_LISTING_ID].to_list() == ["l4"]


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
    stage("mine", {S.NEGATIVES_FILE: _rows("q", "a", [])})
    assert "lacks" in PreviousMining.load(tmp_path, "hash-1")
    assert "different config" in PreviousMining.load(tmp_path, "hash-2")
