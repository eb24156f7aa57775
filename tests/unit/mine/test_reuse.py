"""Day-2 reuse of the previous build's mining (`mine.reuse`): which queries keep their rows,
which are refiltered and which are mined again."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.mine import judgement
from pairsieve.mine.reuse import PreviousMining, refresh_slot

_EVERY = 1_000_003  # no query is due for refresh in these tests unless chosen to be


def mined_rows(query: str, positive: str, negatives: list[str]) -> pl.DataFrame:
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
    kept = pl.concat([mined_rows("q1", "l1", ["l2", "l3"]), mined_rows("q2", "l5", ["l1"])])
    dropped = mined_rows("q1", "l1", ["l4"]).with_columns(pl.lit("product_repeat").alias(S.REASON))
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


def test_a_dropped_candidate_retitled_or_removed_is_forgotten_not_mined_again():
    """q1 only retrieved and dropped l4: no kept row rests on it, so q1 keeps its rows, less
    l4's, and is refiltered without it when it gains a click."""
    state, pairs, listings, products = _state()
    for changed in (
        listings.with_columns(pl.col(S.TITLE).replace({"t4": "t4b"})),
        listings.filter(pl.col(S.LISTING_ID) != "l4"),
    ):
        plan = state.plan(pairs, changed, products, (1, _EVERY))
        assert plan.reused.to_list() == ["q1", "q2"] and plan.gone.to_list() == ["l4"]
        kept, dropped = state.forgetting(plan.gone).rows_of(pl.Series(S.QUERY, ["q1"]))
        assert kept.equals(state.rows_of(pl.Series(S.QUERY, ["q1"]))[0]) and dropped.is_empty()
        gained = pl.concat([pairs, pl.DataFrame({S.QUERY: ["q1"], S.LISTING_ID: ["l5"]})])
        assert _refiltered(state, gained, changed, products) == ["q1"]
        forgotten = state.forgetting(plan.gone).candidates_of(pl.Series(S.QUERY, ["q1"]))
        assert forgotten[S.NEGATIVE_LISTING_ID].to_list() == ["l2", "l3"]


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
    two_positives = pl.concat([state.kept, mined_rows("q1", "l5", ["l2", "l3"])])
    state = PreviousMining(two_positives, state.dropped, state.pairs, state.listings)
    candidates = state.candidates_of(pl.Series(S.QUERY, ["q1"]))
    assert sorted(candidates[S.NEGATIVE_LISTING_ID].to_list()) == ["l2", "l3", "l4"]
    assert candidates.columns == [S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK]


def test_reused_rows_are_the_previous_rows_of_those_queries():
    state, *_ = _state()
    kept, dropped = state.rows_of(pl.Series(S.QUERY, ["q1"]))
    assert kept[S.NEGATIVE_LISTING_ID].to_list() == ["l2", "l3"]
    assert dropped[S.NEGATIVE_LISTING_ID].to_list() == ["l4"]


def test_reused_rows_are_judged_at_todays_copy_density_as_a_full_build_would_judge_them():
    """The density is the copy model's offset, so moving a previous p_copy to today's density
    gives what judging the same features at today's density gives; rows the judgement did not
    decide stay undecided."""
    model = judgement.load_copy_model()
    rng = np.random.default_rng(5)
    features = {name: rng.random(6) for name in judgement.FEATURES}
    before, today = model.probability(features, 0.004), model.probability(features, 0.03)
    state, *_ = _state()
    kept = state.kept.with_columns(pl.Series(S.P_COPY, [*before[:2], None]))
    judged = replace(state, kept=kept, density=0.004).judged_at(0.03)
    assert judged.density == 0.03
    assert judged.kept[S.P_COPY].to_list()[:2] == pytest.approx(today[:2].tolist(), rel=1e-9)
    assert judged.kept[S.P_COPY][2] is None
    assert judged.kept.drop(S.P_COPY).equals(state.kept)
    moved = judgement.at_density(before, 0.004, 0.03)
    assert moved == pytest.approx(today, rel=1e-9) and not np.allclose(before, today, rtol=0.1)
    same = replace(state, kept=kept, density=0.03)
    assert same.judged_at(0.03) is same and same.judged_at(None) is same
