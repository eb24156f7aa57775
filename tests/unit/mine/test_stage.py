"""Hard-negative mining: each filter on hand-built scores, then the stage with the real model."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.config import MineConfig, PairsieveConfig
from pairsieve.core.contract import StageResult
from pairsieve.core.facts import MineFacts
from pairsieve.core.layout import RunLayout
from pairsieve.errors import PairsieveError
from pairsieve.mine import deepen, retrieval
from pairsieve.mine import evaluate as mine_eval
from pairsieve.mine import filters as mine_filter
from pairsieve.mine import stage as mine
from pairsieve.text import attributes as text
from pairsieve.vectors import knn

NO_MARGIN = {"relative_margin": None, "absolute_margin": None}


def frames(
    scores: dict[str, dict[str, float]],
    positives: dict[tuple[str, str], float],
    products: dict[str, str] | None = None,
):
    """Candidate, positive and product frames from {query: {listing: score}} dicts."""
    candidates = pl.DataFrame(
        [(q, lid, s) for q, row in scores.items() for lid, s in row.items()],
        schema={S.QUERY: pl.String, S.NEGATIVE_LISTING_ID: pl.String, S.SCORE: pl.Float32},
        orient="row",
    )
    pos = pl.DataFrame(
        [(q, lid, s) for (q, lid), s in positives.items()],
        schema={S.QUERY: pl.String, S.POSITIVE_LISTING_ID: pl.String, S.POSITIVE_SCORE: pl.Float32},
        orient="row",
    )
    prod = pl.DataFrame(
        list((products or {}).items()),
        schema={S.LISTING_ID: pl.String, S.PRODUCT_ID: pl.String},
        orient="row",
    )
    return candidates, pos, prod


def reasons(dropped: pl.DataFrame, query: str = "q", positive: str | None = None) -> dict:
    rows = dropped.filter(pl.col(S.QUERY) == query)
    if positive is not None:
        rows = rows.filter(pl.col(S.POSITIVE_LISTING_ID) == positive)
    return dict(zip(rows[S.NEGATIVE_LISTING_ID], rows[S.REASON].cast(pl.String), strict=True))


def kept_ids(kept: pl.DataFrame, query: str = "q", positive: str | None = None) -> list[str]:
    rows = kept.filter(pl.col(S.QUERY) == query)
    if positive is not None:
        rows = rows.filter(pl.col(S.POSITIVE_LISTING_ID) == positive)
    return rows[S.NEGATIVE_LISTING_ID].to_list()


NV_MARGIN = 0.05  # NV-Retriever's TopK-PercPos; the filter tests below run with it on


def mine_with(scores, positives, products=None, seed=13, **knobs):
    cfg = MineConfig(**{"num_negatives": 10, "relative_margin": NV_MARGIN, **knobs})
    return mine_filter.filter_candidates(*frames(scores, positives, products), cfg, seed)


def test_positive_itself_is_same_listing_and_copies_are_same_product():
    scores = {"q": {"p": 0.9, "copy": 0.88, "other": 0.5}}
    kept, dropped = mine_with(
        scores, {("q", "p"): 0.9}, {"p": "P", "copy": "P", "other": "O"}, **NO_MARGIN
    )
    assert reasons(dropped) == {"p": "same_listing", "copy": "same_product"}
    assert kept_ids(kept) == ["other"]


def test_unclustered_listing_is_its_own_product():
    scores = {"q": {"p": 0.9, "stranger": 0.5}}
    kept, dropped = mine_with(scores, {("q", "p"): 0.9}, {}, **NO_MARGIN)
    assert kept_ids(kept) == ["stranger"]
    assert reasons(dropped) == {"p": "same_listing"}


def test_absolute_margin_drops_scores_above_positive_minus_m():
    scores = {"q": {"near": 0.85, "edge": 0.79, "far": 0.7}}
    kept, dropped = mine_with(scores, {("q", "p"): 0.9}, absolute_margin=0.1, relative_margin=None)
    assert reasons(dropped) == {"near": "margin"}
    assert kept_ids(kept) == ["edge", "far"]


def test_relative_margin_0_05_keeps_95_percent_of_positive_and_is_the_default():
    scores = {"q": {"inside": 0.86, "outside": 0.85}}
    kept, dropped = mine_with(scores, {("q", "p"): 0.9}, relative_margin=0.05)  # limit 0.855
    assert reasons(dropped) == {"inside": "margin"}
    assert kept_ids(kept) == ["outside"]
    kept, _ = mine_filter.filter_candidates(*frames(scores, {("q", "p"): 0.9}), MineConfig(), 13)
    assert kept_ids(kept) == ["outside"]


def test_relative_margin_with_a_negative_positive_score_still_lowers_the_limit():
    # pos - |pos|*m = -0.2 - 0.01 = -0.21; the naive pos*(1-m) = -0.19 would keep "close".
    scores = {"q": {"close": -0.2, "closer": -0.205, "far": -0.25}}
    kept, dropped = mine_with(scores, {("q", "p"): -0.2}, relative_margin=0.05)
    assert reasons(dropped) == {"close": "margin", "closer": "margin"}
    assert kept_ids(kept) == ["far"]


def test_both_margins_apply_the_tightest():
    scores = {"q": {"a": 0.8, "b": 0.75, "c": 0.6}}
    kept, _ = mine_with(scores, {("q", "p"): 0.9}, absolute_margin=0.2, relative_margin=0.05)
    assert kept_ids(kept) == ["c"]  # absolute limit 0.7 is tighter than relative 0.855


def test_max_and_min_score():
    scores = {"q": {"hi": 0.7, "mid": 0.5, "lo": 0.1}}
    kept, dropped = mine_with(scores, {("q", "p"): 0.9}, max_score=0.6, min_score=0.2)
    assert reasons(dropped) == {"hi": "max_score", "lo": "min_score"}
    assert kept_ids(kept) == ["mid"]


def test_range_min_skips_the_first_survivors_not_the_first_candidates():
    scores = {"q": {"p": 0.95, "a": 0.8, "b": 0.7, "c": 0.6}}
    kept, dropped = mine_with(scores, {("q", "p"): 0.95}, range_min=1)
    assert reasons(dropped) == {"p": "same_listing", "a": "range_min"}
    assert kept_ids(kept) == ["b", "c"]


def test_one_negative_per_product():
    scores = {"q": {"a1": 0.8, "a2": 0.7, "b": 0.6}}
    kept, dropped = mine_with(scores, {("q", "p"): 0.95}, {"a1": "A", "a2": "A", "b": "B"})
    assert reasons(dropped) == {"a2": "product_repeat"}
    assert kept_ids(kept) == ["a1", "b"]


def test_num_negatives_top_takes_the_hardest_and_short_pairs_are_not_padded():
    scores = {"q": {f"n{i}": 0.8 - i / 100 for i in range(6)}, "r": {"x": 0.3}}
    positives = {("q", "p"): 0.95, ("r", "y"): 0.9}
    kept, dropped = mine_with(scores, positives, num_negatives=3)
    assert kept_ids(kept) == ["n0", "n1", "n2"]
    assert set(reasons(dropped).values()) == {"not_sampled"}
    assert kept_ids(kept, "r") == ["x"]
    candidates, pos = frames(scores, positives)[:2]
    counts = deepen.candidate_counts(candidates)
    summary = mine.summarise(
        counts, pos, kept, mine_filter.reason_counts(dropped), MineConfig(num_negatives=3)
    )
    assert summary["pairs_short"] == 1
    assert summary["pairs_without_negatives"] == 0


def test_multi_positive_query_excludes_other_positives_and_uses_weakest_margin():
    scores = {"q": {"p1": 0.9, "p2": 0.6, "p2copy": 0.59, "near": 0.58, "far": 0.5}}
    positives = {("q", "p1"): 0.9, ("q", "p2"): 0.6}
    kept, dropped = mine_with(scores, positives, {"p2": "B", "p2copy": "B"})
    # weakest positive 0.6 -> limit 0.57: "near" (0.58) is within the margin of p2
    assert reasons(dropped, positive="p1") == {
        "p1": "same_listing",
        "p2": "other_positive",
        "p2copy": "same_product",
        "near": "margin",
    }
    assert reasons(dropped, positive="p2") == {
        "p2": "same_listing",
        "p1": "other_positive",
        "p2copy": "same_product",
        "near": "margin",
    }
    assert kept_ids(kept, positive="p1") == kept_ids(kept, positive="p2") == ["far"]


def test_accounting_identity_and_reason_precedence():
    scores = {"q": {"p": 0.9, "a": 0.89, "b": 0.8, "b2": 0.7, "c": 0.6, "d": 0.5, "e": 0.1}}
    positives = {("q", "p"): 0.9}
    candidates, pos, prod = frames(scores, positives, {"b": "B", "b2": "B"})
    cfg = MineConfig(num_negatives=1, range_min=1, min_score=0.2, relative_margin=NV_MARGIN)
    kept, dropped = mine_filter.filter_candidates(candidates, pos, prod, cfg, 13)
    per_reason = mine_filter.reason_counts(dropped)
    summary = mine.summarise(deepen.candidate_counts(candidates), pos, kept, per_reason, cfg)
    assert summary["considered"] == kept.height + sum(summary["dropped_by_reason"].values()) == 7
    # b is skipped by range_min before the one-per-product step, so b2 represents product B
    assert reasons(dropped) == {
        "p": "same_listing",
        "a": "margin",
        "b": "range_min",
        "c": "not_sampled",
        "e": "min_score",
        "d": "not_sampled",
    }
    assert kept_ids(kept) == ["b2"]


def test_duplicate_guard_drops_unclustered_copies_and_refills():
    titles = {
        "p": "apple iphone 8 64gb silver",
        "copy": "apple iphone 8 64 gb space grey",
        "bigger": "apple iphone 8 256gb silver",
        "plus": "apple iphone 8 plus 64gb silver",
        "other": "samsung galaxy s9 64gb",
    }
    scores = {"q": {"copy": 0.8, "bigger": 0.7, "plus": 0.6, "other": 0.5}}
    candidates, pos, _ = frames(scores, {("q", "p"): 0.95})
    listings = pl.DataFrame({S.LISTING_ID: list(titles), S.TITLE: list(titles.values())})
    info = mine.listing_products(
        listings, pl.DataFrame({S.LISTING_ID: list(titles), S.PRODUCT_ID: list(titles)})
    )
    cfg = MineConfig(num_negatives=2)
    kept, dropped = mine_filter.filter_candidates(candidates, pos, info, cfg, 13)
    assert reasons(dropped) == {"copy": "possible_duplicate", "other": "not_sampled"}
    assert kept_ids(kept) == ["bigger", "plus"]  # a capacity and a variant word tell them apart
    off = cfg.model_copy(update={"duplicate_guard_jaccard": None})
    unguarded = mine_filter.filter_candidates(candidates, pos, info, off, 13)[0]
    assert kept_ids(unguarded) == ["copy", "bigger"]


def _titled(titles: dict[str, str]) -> pl.DataFrame:
    """`listing_products` of listings that are each their own product, with their titles."""
    listings = pl.DataFrame({S.LISTING_ID: list(titles), S.TITLE: list(titles.values())})
    return mine.listing_products(
        listings, pl.DataFrame({S.LISTING_ID: list(titles), S.PRODUCT_ID: list(titles)})
    )


def test_titles_are_looked_up_only_for_the_listings_judged():
    """The filter's title lookup extracts the attributes of the listings it is asked about,
    each once, from the catalog's normalised titles; a listing the catalog has no title for
    gets the attributes of an empty title rather than an error."""
    listings = _titled({"a": "Sandisk Ultra 64GB microSDXC", "b": "iPhone 8 case", "c": "x"})
    asked = pl.Series(["b", "a", "b", "gone"], dtype=pl.String)
    found = mine_filter._attributes_of(listings, asked)
    assert sorted(found) == ["a", "b", "gone"]  # "c" was not asked about
    title_of = dict(listings.select(S.LISTING_ID, S.TITLE_NORM).iter_rows())
    assert found["a"] == text.extract_attributes(title_of["a"])
    assert found["a"] != text.extract_attributes("")
    assert found["gone"] == text.extract_attributes("")


def test_a_title_is_parsed_once_across_calls_until_the_memo_is_full(monkeypatch):
    """Mining asks about the same listings in every partition, deepening round and duplicate
    check: a title parsed once is not parsed again, and the memo starts afresh when full."""
    parsed = []
    real = text.extract_attributes
    monkeypatch.setattr(
        mine_filter.text, "extract_attributes", lambda t: parsed.append(t) or real(t)
    )
    monkeypatch.setattr(mine_filter, "_PARSED", {})
    listings = _titled({"a": "Sandisk Ultra 64GB microSDXC", "b": "iPhone 8 case"})
    first = mine_filter._attributes_of(listings, pl.Series(["a", "b"]))
    again = mine_filter._attributes_of(listings, pl.Series(["b", "a"]))
    assert len(parsed) == 2 and again == first
    monkeypatch.setattr(mine_filter, "_PARSED_LIMIT", 2)
    mine_filter._attributes_of(listings, pl.Series(["gone"]))  # a third title: the memo restarts
    assert mine_filter._PARSED == {"": real("")}
    assert mine_filter._attributes_of(listings, pl.Series(["a"]))["a"] == first["a"]
    assert len(parsed) == 4


# Real titles (PriceRunner's CDA fridges, Altosight's SanDisk cards): a positive, another model
# and another capacity the encoder scores above it, and a reworded copy the clusterer missed.
JUDGED_TITLES = {
    "p": "cda fw852 integrated 50/50 fridge freezer",
    "code": "cda fw422 integrated fridge",
    "reworded": "cda fw852 fridge freezer integrated",
    "p2": "sandisk ultra 32gb microsdhc",
    "bigger": "sandisk ultra 64gb microsdxc",
    "below": "bosch serie 4 washing machine",
}
# The queries name the model and the capacity that rule the other model and capacity out.
FRIDGE, CARD = "cda fw852 fridge freezer", "sandisk ultra 32gb"
JUDGED_SCORES = {FRIDGE: {"code": 0.9, "reworded": 0.85, "below": 0.3}, CARD: {"bigger": 0.9}}
JUDGED_POSITIVES = {(FRIDGE, "p"): 0.6, (CARD, "p2"): 0.6}


def _judged(
    density: float | None, scores: dict = JUDGED_SCORES, positives: dict = JUDGED_POSITIVES,
    **settings,
) -> tuple[pl.DataFrame, pl.DataFrame]:  # fmt: skip
    candidates, pos, _ = frames(scores, positives)
    cfg = MineConfig(num_negatives=2, duplicate_guard_jaccard=None, copy_density=density,
                     **settings)  # fmt: skip
    return mine_filter.filter_candidates(candidates, pos, _titled(JUDGED_TITLES), cfg, 13)


def test_where_copies_are_rare_the_judgement_keeps_variants_above_the_positive():
    """Another model code and another capacity are kept although they score above the
    positive; the reworded copy, which nothing tells apart, is still dropped."""
    kept, dropped = _judged(0.005)
    assert kept_ids(kept, FRIDGE) == ["code", "below"]
    assert kept_ids(kept, CARD) == ["bigger"]
    assert reasons(dropped, FRIDGE) == {"reworded": "margin"}


def test_where_copies_are_many_the_judgement_leaves_variants_to_the_margin():
    """The same candidates in a build whose retrieval is full of copies: a conflicting title is
    no longer evidence enough, and the reworded copy is judged a copy outright."""
    kept, dropped = _judged(0.5)
    assert kept_ids(kept, FRIDGE) == ["below"] and kept_ids(kept, CARD) == []
    assert reasons(dropped, FRIDGE) == {"code": "margin", "reworded": "judged_copy"}
    assert reasons(dropped, CARD) == {"bigger": "margin"}


def test_without_the_judgement_the_margin_drops_everything_inside_it():
    kept, dropped = _judged(0.005, judge_margin=False)
    assert kept_ids(kept, FRIDGE) == ["below"] and kept_ids(kept, CARD) == []
    assert reasons(dropped, FRIDGE) == {"code": "margin", "reworded": "margin"}


@pytest.mark.parametrize(
    "query",
    [
        "cda integrated fridge",  # names no model
        "cda fw422 integrated fridge",  # names the other model
    ],
)
def test_another_product_the_query_does_not_rule_out_is_dropped(query):
    """The judgement calls `code` another model, but a query that does not contradict it gives
    no reason to rank the clicked listing above it: it is dropped as `query_cannot_tell`, and
    the next candidate takes its place. Asked not to, mining keeps it."""
    scores = {query: JUDGED_SCORES[FRIDGE]}
    kept, dropped = _judged(0.005, scores, {(query, "p"): 0.6})
    assert kept_ids(kept, query) == ["below"]
    assert reasons(dropped, query) == {"code": "query_cannot_tell", "reworded": "margin"}
    kept, _ = _judged(0.005, scores, {(query, "p"): 0.6}, query_must_rule_out=False)
    assert kept_ids(kept, query) == ["code", "below"]


def test_the_judgement_reads_only_the_first_candidates_inside_the_margin():
    titles = {"p": "apple iphone 8 64gb", **{f"v{i}": f"apple iphone {i} 64gb" for i in (3, 4, 5)}}
    cfg = MineConfig(num_negatives=1, duplicate_guard_jaccard=None, copy_density=1e-4)
    many = {f"v{i}": f"apple iphone {i} 64gb" for i in range(10, 20)}
    query = "apple iphone 8"  # rules out every candidate: another model number
    scores = {query: {k: 0.9 - i / 100 for i, k in enumerate(many)}}
    candidates, pos, _ = frames(scores, {(query, "p"): 0.5})
    listings = _titled({"p": titles["p"], **many})
    table = mine_filter._stamp_filters(candidates, pos, listings, cfg, listings)
    judged = table.filter(pl.col(S.P_COPY).is_not_null()).sort(S.RANK)
    assert judged[S.NEGATIVE_LISTING_ID].to_list() == ["v10", "v11", "v12", "v13"]
    assert table.filter(pl.col(S.REASON).is_null()).height == 4  # the best 4 by rank
    inside = table.filter(pl.col(S.REASON) == "margin").sort(S.RANK)
    assert inside[S.NEGATIVE_LISTING_ID].to_list()[0] == "v14"


def test_copy_density_counts_the_known_copies_among_the_candidates_inside_the_margin():
    """Inside the margin (above 0.57 for a positive at 0.6): a copy the product ids know, two
    other products and a second clicked listing, which is no candidate; below it, a copy."""
    scores = {"q": {"copy": 0.9, "a": 0.8, "b": 0.7, "p2": 0.95, "copy_low": 0.2}}
    positives = {("q", "p"): 0.6, ("q", "p2"): 0.7}
    products = {"p": "P", "copy": "P", "copy_low": "P", "a": "A", "b": "B", "p2": "Q"}
    candidates, pos, prod = frames(scores, positives, products)
    known, considered = mine_filter.density_counts(candidates, pos, prod, MineConfig())
    # per pair: p's candidates copy (known), a, b (p2 is clicked); p2's pair has the same three
    assert (known, considered) == (2, 6)


def test_duplicate_guard_refills_each_pair_as_walking_its_list_would():
    """Pairs lose different numbers of candidates to the guard over several refills; each pair's
    kept negatives are its first num_negatives unflagged survivors, in order, as if walked one by
    one, and exactly the candidates walked past are stamped possible_duplicate."""
    rng = np.random.default_rng(3)
    titles, scores, positives = {}, {}, {}
    for q in range(4):
        for side in ("a", "b"):
            titles[f"p{q}{side}"] = f"acme phone z{q}{side} 64gb black"
            positives[(f"q{q}", f"p{q}{side}")] = 0.95
        scores[f"q{q}"] = {}
        for i in range(14):
            copy_of = rng.choice(["a", "b", None], p=[0.35, 0.35, 0.3])
            lid = f"l{q}_{i}"
            titles[lid] = f"acme phone z{q}{copy_of} 64gb black" if copy_of else f"zeta tab k{i}"
            scores[f"q{q}"][lid] = float(rng.uniform(0.1, 0.8))
    candidates, pos, _ = frames(scores, positives)
    listings = pl.DataFrame({S.LISTING_ID: list(titles), S.TITLE: list(titles.values())})
    info = mine.listing_products(
        listings, pl.DataFrame({S.LISTING_ID: list(titles), S.PRODUCT_ID: list(titles)})
    )
    cfg = MineConfig(num_negatives=3, **NO_MARGIN)
    kept, dropped = mine_filter.filter_candidates(candidates, pos, info, cfg, 13)
    walk = cfg.model_copy(update={"duplicate_guard_jaccard": None, "num_negatives": 100})
    survivors = mine_filter.filter_candidates(candidates, pos, info, walk, 13)[0]
    expect_kept, expect_flagged = [], []
    for (query, positive), rows in survivors.group_by(S.QUERY, S.POSITIVE_LISTING_ID):
        taken = 0
        for candidate in rows.sort(S.RANK)[S.NEGATIVE_LISTING_ID]:
            if taken == cfg.num_negatives:
                break
            if titles[candidate].split()[2] == titles[positive].split()[2]:
                expect_flagged.append((query, positive, candidate))
            else:
                expect_kept.append((query, positive, candidate))
                taken += 1
    columns = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID]
    flagged = dropped.filter(pl.col(S.REASON) == "possible_duplicate").select(columns)
    assert sorted(kept.select(columns).rows()) == sorted(expect_kept)
    assert sorted(flagged.rows()) == sorted(expect_flagged)
    per_pair = [(q, p) for q, p, _ in expect_flagged]
    assert max(per_pair.count(p) for p in per_pair) >= 3  # some pair needed several refills


def random_case():
    rng = np.random.default_rng(0)
    scores = {f"q{j}": {f"l{i}": float(rng.uniform(0, 0.8)) for i in range(40)} for j in range(5)}
    positives = {(f"q{j}", f"p{j}"): 0.9 for j in range(5)}
    products = {f"l{i}": f"P{i % 25}" for i in range(40)}
    return scores, positives, products


def test_random_sampling_is_seeded_and_draws_from_eligible_candidates():
    scores, positives, products = random_case()
    first = mine_with(scores, positives, products, seed=1, sampling="random", num_negatives=5)
    again = mine_with(scores, positives, products, seed=1, sampling="random", num_negatives=5)
    other = mine_with(scores, positives, products, seed=2, sampling="random", num_negatives=5)
    top = mine_with(scores, positives, products, sampling="top", num_negatives=5)
    assert first[0].equals(again[0]) and first[1].equals(again[1])
    assert not first[0].equals(other[0])
    assert not first[0].equals(top[0])
    assert first[0].group_by(S.QUERY).len()["len"].to_list() == [5] * 5
    eligible = mine_with(scores, positives, products, num_negatives=40)[0]
    assert set(first[0][S.NEGATIVE_LISTING_ID]) <= set(eligible[S.NEGATIVE_LISTING_ID])


@pytest.mark.parametrize("sampling", ["top", "random"])
def test_output_is_identical_whatever_the_input_row_order(sampling):
    scores, positives, products = random_case()
    candidates, pos, prod = frames(scores, positives, products)
    cfg = MineConfig(num_negatives=5, sampling=sampling, range_min=1)
    expected = mine_filter.filter_candidates(candidates, pos, prod, cfg, 7)
    for seed in range(3):
        shuffled = [
            f.sample(fraction=1.0, shuffle=True, seed=seed) for f in (candidates, pos, prod)
        ]
        got = mine_filter.filter_candidates(*shuffled, cfg, 7)
        assert got[0].equals(expected[0]) and got[1].equals(expected[1])


def test_candidate_table_skips_missing_neighbours():
    scores = np.array([[0.9, 0.5], [0.7, -1.0]], dtype=np.float32)
    ids = np.array([[1, 0], [0, -1]])
    table = retrieval.candidate_table(["q1", "q2"], pl.Series(["a", "b"]), scores, ids)
    assert table.rows() == [
        ("q1", "b", pytest.approx(0.9)),
        ("q1", "a", pytest.approx(0.5)),
        ("q2", "a", pytest.approx(0.7)),
    ]


def deepening_case(**knobs):
    """q1's positive "p" scores 0.6 and four listings beat it (all inside the margin); q2's
    positive "m" is its top hit and everything else scores 0 for it."""
    q1_scores = {"h1": 0.9, "h2": 0.85, "h3": 0.8, "h4": 0.75, "p": 0.6,
                 "n1": 0.5, "n2": 0.45, "n3": 0.4, "n4": 0.35}  # fmt: skip
    ids = [*q1_scores, "m"]
    vectors = [[s, np.sqrt(1 - s * s), 0.0] for s in q1_scores.values()]
    vectors.append([0.0, np.sqrt(1 - 0.95**2), 0.95])
    embedded = retrieval.Embedded(
        ["q1", "q2"],
        pl.Series(S.LISTING_ID, ids),
        np.eye(3, dtype=np.float32)[[0, 2]],
        np.array(vectors, np.float32),
    )
    cfg = PairsieveConfig().with_(
        **{"mine.search_depth": 3, "mine.range_max": 10, "mine.num_negatives": 2, **knobs}
    )
    positives = frames({}, {("q1", "p"): 0.6, ("q2", "m"): 0.95})[1]
    return retrieval.build_retrieval(embedded, cfg), positives, cfg


def test_queries_left_short_by_the_margin_are_mined_again_below_the_margin_alone():
    retrieval, positives, cfg = deepening_case()
    mined = deepen.mine_pairs(retrieval, positives, frames({}, {})[2], cfg.mine, cfg.seed)
    assert mined.rounds == [
        {"depth": 3, "queries": 2, "short": 1},
        {"depth": 12, "queries": 1, "short": 0},
    ]
    rows = pl.concat(
        [t.select(S.QUERY, S.NEGATIVE_LISTING_ID, S.RANK) for t in (mined.kept, mined.dropped)]
    )
    q1 = rows.filter(pl.col(S.QUERY) == "q1").unique().sort(S.RANK)
    # the head (h1-h3) is listed; h4 and p, above the limit 0.57, are stepped over and counted
    assert q1[S.NEGATIVE_LISTING_ID].to_list() == ["h1", "h2", "h3", "n1", "n2", "n3", "n4", "m"]
    assert q1[S.RANK].to_list() == [1, 2, 3, 6, 7, 8, 9, 10]
    assert mined.skipped_above_ceiling == 2
    assert kept_ids(mined.kept, "q1") == ["n1", "n2"]
    assert reasons(mined.dropped, "q1")["h3"] == "margin"
    assert len(kept_ids(mined.kept, "q2")) == 2
    alone = deepen.mine_pairs(
        retrieval, positives.filter(pl.col(S.QUERY) == "q1"), frames({}, {})[2], cfg.mine, 13
    )
    assert alone.kept.equals(mined.kept.filter(pl.col(S.QUERY) == "q1"))


def test_queries_mined_in_batches_give_the_rows_of_one_batch(monkeypatch, tmp_path):
    retrieval, positives, cfg = deepening_case()
    whole = deepen.mine_pairs(retrieval, positives, frames({}, {})[2], cfg.mine, cfg.seed)
    monkeypatch.setattr(deepen, "_QUERY_BATCH", 1)  # q1 deepens, q2 does not: rounds add up
    batched = deepen.mine_pairs(retrieval, positives, frames({}, {})[2], cfg.mine, cfg.seed)
    assert batched.kept.equals(whole.kept) and batched.dropped.equals(whole.dropped)
    assert batched.counts.sort(S.QUERY).equals(whole.counts.sort(S.QUERY))
    assert batched.rounds == whole.rounds and len(whole.rounds) == 2
    assert batched.skipped_above_ceiling == whole.skipped_above_ceiling == 2
    assert batched.reasons == whole.reasons == mine_filter.reason_counts(whole.dropped)
    # Spilled: one part file per batch, scanned back in order as the same rows.
    spilled = deepen.mine_pairs(
        retrieval, positives, frames({}, {})[2], cfg.mine, cfg.seed, spill=tmp_path
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dropped-0000000000.parquet",
        "dropped-0000000001.parquet",
    ]
    assert isinstance(spilled.dropped, pl.LazyFrame)
    assert spilled.dropped.collect().equals(whole.dropped)
    assert spilled.kept.equals(whole.kept) and spilled.reasons == whole.reasons


def test_below_the_margin_the_ivf_index_probed_whole_finds_the_exact_scans_rows():
    ivf = {"knn.exact_max": 1, "knn.nlist": 2}
    exact, positives, cfg = deepening_case(**ivf, **{"knn.deep_nprobe": None})
    probing = deepening_case(**ivf, **{"knn.deep_nprobe": 2})[0]
    assert exact.index.kind == probing.index.kind == "IndexIVFFlat"
    assert (exact.deep_nprobe, probing.deep_nprobe) == (None, 2)
    products = frames({}, {})[2]
    scanned = deepen.mine_pairs(exact, positives, products, cfg.mine, cfg.seed)
    probed = deepen.mine_pairs(probing, positives, products, cfg.mine, cfg.seed)
    assert probed.rounds == scanned.rounds and len(scanned.rounds) == 2
    for frame in ("kept", "dropped"):
        left, right = getattr(probed, frame), getattr(scanned, frame)
        assert left.drop(S.SCORE).equals(right.drop(S.SCORE))
        assert np.allclose(left[S.SCORE], right[S.SCORE], atol=1e-6)
    assert probed.skipped_above_ceiling == scanned.skipped_above_ceiling == 2
    assert (exact.info["scanned_below"], probing.info["scanned_below"]) == (1, 0)


def test_deepening_stops_at_range_max_and_keeps_short_pairs_short():
    retrieval, positives, cfg = deepening_case(**{"mine.range_max": 3})
    mined = deepen.mine_pairs(retrieval, positives, frames({}, {})[2], cfg.mine, cfg.seed)
    assert mined.rounds == [{"depth": 3, "queries": 2, "short": 1}]
    assert kept_ids(mined.kept, "q1") == []
    reasons = mine_filter.reason_counts(mined.dropped)
    summary = mine.summarise(mined.counts, positives, mined.kept, reasons, cfg.mine)
    assert summary["pairs_without_negatives"] == 1 and mined.skipped_above_ceiling == 0
    assert summary["considered"] == 6 == mined.kept.height + mined.dropped.height


# --- the stage with the real model ---------------------------------------------------------------

CATALOG = [
    ("l1", "apple iphone 8 64gb silver", "iphone8-64"),
    ("l2", "Apple iPhone 8 64 GB Silber smartphone", "iphone8-64"),
    ("l3", "iphone 8 64gb silver sim free", "iphone8-64"),
    ("l4", "apple iphone 8 256gb silver", "iphone8-256"),
    ("l5", "apple iphone 8 plus 64gb silver", "iphone8plus-64"),
    ("l6", "samsung galaxy s9 64gb black", "s9-64"),
    ("l7", "samsung galaxy s9 plus 128gb blue", "s9plus-128"),
    ("l8", "bosch serie 4 washing machine 8kg", "bosch-wm"),
    ("l9", "sony wh-1000xm3 wireless headphones black", "sony-xm3"),
    ("l10", "sony wh1000xm3 noise cancelling headphones", "sony-xm3"),
    ("l11", "sony wh-1000xm2 headphones", "sony-xm2"),
    ("l12", "bose quietcomfort 35 ii headphones", "bose-qc35"),
]
CLICKS = [
    ("iphone 8 64gb", "l1"),
    ("iphone 8 64gb", "l1"),
    ("sony wh-1000xm3", "l9"),
    ("sony wh-1000xm3", "l11"),
    ("galaxy s9", "l6"),
]


@pytest.fixture()
def tiny(tmp_path, session_cache_dir):
    listings = pl.DataFrame(
        CATALOG, schema=[S.LISTING_ID, S.TITLE, S.TRUE_PRODUCT_ID], orient="row"
    )
    clicks = pl.DataFrame(CLICKS, schema=[S.QUERY, S.LISTING_ID], orient="row")
    products = listings.select(S.LISTING_ID, pl.col(S.TRUE_PRODUCT_ID).alias(S.PRODUCT_ID))
    for name, frame in (("clicks", clicks), ("listings", listings), ("products", products)):
        frame.write_parquet(tmp_path / f"{name}.parquet")
    cfg = PairsieveConfig(cache_dir=str(session_cache_dir)).with_(
        **{"mine.num_negatives": 3, "mine.relative_margin": NV_MARGIN}
    )
    return cfg, tmp_path


def test_run_with_the_real_model_never_returns_a_copy_of_the_positive(tiny, encoder):
    cfg, folder = tiny
    names = ("clicks", "listings", "products")
    inputs = mine.Inputs(*(folder / f"{name}.parquet" for name in names))
    result = mine.run(cfg, inputs, folder / "mine", encoder=encoder)
    kept = pl.read_parquet(folder / "mine" / S.NEGATIVES_FILE)
    dropped = pl.read_parquet(folder / "mine" / S.NEGATIVES_DROPPED_FILE)
    assert result.balanced() and result.rows_out == kept.height
    assert result.rows_in == kept.height + dropped.height == 4 * len(CATALOG)
    assert list(kept.columns) == list(mine_filter.NEGATIVE_COLUMNS)
    iphone = kept.filter(pl.col(S.QUERY) == "iphone 8 64gb")
    assert not set(iphone[S.NEGATIVE_LISTING_ID]) & {"l1", "l2", "l3"}
    assert reasons(dropped, "iphone 8 64gb")["l2"] == "same_product"
    sony = reasons(dropped, "sony wh-1000xm3", "l9")
    assert sony["l11"] == "other_positive" and sony["l10"] in {"same_product", "margin"}
    assert result.details["pairs_short"] == 0 and result.details["pairs"] == 4
    density = result.details["copy_density"]  # the judgement's prior, from the build itself
    recorded = StageResult.from_json(json.loads(json.dumps(result.to_json())))
    assert MineFacts.of(recorded).copy_density == density["value"]
    assert density["source"] == "estimated" and density["queries"] == 3  # distinct queries
    assert density["known_copies"] <= density["inside_margin"]
    assert 0 < density["value"] < 1
    assert sum(result.dropped_by_reason.values()) == dropped.height
    # the batches' spilled dropped rows are gone once their file is written
    assert sorted(p.name for p in (folder / "mine").iterdir() if p.is_dir()) == []


def test_run_builds_its_ivf_index_on_the_cluster_stages_layout_when_given_one(tiny, encoder):
    """Mining's IVF index takes the coarse lists of the layout it is given (the cluster
    stage's, over the same titles) instead of training its own, and writes them on."""
    cfg, folder = tiny
    cfg = cfg.with_(**{"knn.exact_max": 1, "knn.nlist": 2})
    names = ("clicks", "listings", "products")
    inputs = mine.Inputs(*(folder / f"{name}.parquet" for name in names))
    trained = mine.run(cfg, inputs, folder / "trained", encoder=encoder)
    assert trained.details["ivf_centroids"] == "trained"
    titles = pl.read_parquet(folder / "listings.parquet")[S.TITLE].to_list()
    centroids = encoder.encode([titles[0], titles[-1]])  # not what training finds
    given = knn.IvfLayout(centroids, np.empty(0, np.uint64), np.empty(0, np.int64))
    given.write(folder / "cluster")
    built = mine.run(
        cfg, replace(inputs, ivf=folder / "cluster"), folder / "built", encoder=encoder
    )
    assert built.details["ivf_centroids"] == "reused"
    written = knn.IvfLayout.read(folder / "built")
    assert np.array_equal(written.centroids, centroids) and len(written.lists) == len(titles)
    assert not np.array_equal(knn.IvfLayout.read(folder / "trained").centroids, centroids)
    assert mine.Inputs.of(RunLayout(folder)).ivf == folder / "cluster"


def test_run_is_byte_identical_whatever_the_click_order(tiny, encoder):
    cfg, folder = tiny
    clicks = pl.read_parquet(folder / "clicks.parquet")
    listings = pl.read_parquet(folder / "listings.parquet")
    products = pl.read_parquet(folder / "products.parquet")
    first = mine.run(cfg, mine.Inputs(clicks, listings, products), folder / "a", encoder=encoder)
    reversed_inputs = mine.Inputs(clicks.reverse(), listings.reverse(), products.reverse())
    second = mine.run(cfg, reversed_inputs, folder / "b", encoder=encoder)
    assert second.details["copy_density"] == first.details["copy_density"]
    for name in (S.NEGATIVES_FILE, S.NEGATIVES_DROPPED_FILE, S.NEGATIVES_JUDGEMENT_FILE):
        assert (folder / "a" / name).read_bytes() == (folder / "b" / name).read_bytes()


def test_run_writes_the_judgement_of_the_kept_negatives_it_made(tiny, encoder):
    """The file the report reads: the kept negatives the judgement decided, in their order, with
    the p_copy the stage's filter gave them at the density the stage used: what filtering all
    the stage's candidates at once gives, carried out of its batches, not judged again."""
    cfg, folder = tiny
    cfg = cfg.with_(**{"mine.relative_margin": 0.3, "mine.copy_density": 0.005})  # judge many
    names = ("clicks", "listings", "products")
    inputs = mine.Inputs(*(folder / f"{name}.parquet" for name in names))
    result = mine.run(cfg, inputs, folder / "mine", encoder=encoder)
    assert result.outputs["judgement"] == S.NEGATIVES_JUDGEMENT_FILE
    keys = [S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID]
    kept = pl.read_parquet(folder / "mine" / S.NEGATIVES_FILE)
    dropped = pl.read_parquet(folder / "mine" / S.NEGATIVES_DROPPED_FILE)
    judged = pl.read_parquet(folder / "mine" / S.NEGATIVES_JUDGEMENT_FILE)
    assert judged.columns == [*keys, S.P_COPY] and judged.height > 0
    assert kept.height > judged.height  # kept rows below the margin were not judged
    rows = pl.concat([kept, dropped.drop(S.REASON)])
    listings = pl.read_parquet(folder / "listings.parquet")
    products = mine.listing_products(listings, pl.read_parquet(folder / "products.parquet"))
    again, _ = mine_filter.filter_candidates(
        rows.select(S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK).unique().sort(S.QUERY, S.RANK),
        rows.select(S.QUERY, S.POSITIVE_LISTING_ID, S.POSITIVE_SCORE).unique(),
        products,
        cfg.mine,  # the density is set, so the stage judged at exactly this one
        cfg.seed,
    )
    assert again.select(keys).equals(kept.select(keys))
    assert again.drop_nulls(S.P_COPY).select(*keys, S.P_COPY).equals(judged)
    without = mine.run(
        cfg.with_(**{"mine.judge_margin": False}), inputs, folder / "plain", encoder=encoder
    )
    assert "judgement" not in without.outputs
    assert not (folder / "plain" / S.NEGATIVES_JUDGEMENT_FILE).exists()


def test_run_rejects_bad_inputs(tiny, encoder):
    cfg, folder = tiny
    listings = pl.read_parquet(folder / "listings.parquet")
    products = pl.read_parquet(folder / "products.parquet")
    with pytest.raises(PairsieveError) as missing:
        mine.run(cfg, mine.Inputs(listings, listings, products), folder / "x", encoder=encoder)
    assert missing.value.code == "missing_column" and missing.value.column == S.QUERY
    unknown = pl.DataFrame({S.QUERY: ["q"], S.LISTING_ID: ["nope"]})
    with pytest.raises(PairsieveError) as bad:
        mine.run(cfg, mine.Inputs(unknown, listings, products), folder / "x", encoder=encoder)
    assert bad.value.code == "unknown_listing"
    with pytest.raises(PairsieveError) as absent:
        absent_clicks = mine.Inputs(folder / "none.parquet", listings, products)
        mine.run(cfg, absent_clicks, folder / "x", encoder=encoder)
    assert absent.value.code == "missing_file"


def test_eval_product_exclusion_removes_false_negatives_naive_mining_keeps(tiny, encoder):
    cfg, folder = tiny
    listings = pl.read_parquet(folder / "listings.parquet")
    clicks = pl.read_parquet(folder / "clicks.parquet")
    products = pl.read_parquet(folder / "products.parquet")
    result = mine_eval.evaluate(cfg, listings, clicks, products, encoder)
    variants = result["variants"]
    assert variants["a_naive"]["false_negatives"] > 0
    assert variants["c_product"]["false_negatives"] == variants["d_both"]["false_negatives"] == 0
    assert "| d_both |" in mine_eval.format_table(result)


def test_mine_eval_command_writes_json_and_table(tmp_path, session_cache_dir, encoder):
    from typer.testing import CliRunner

    from pairsieve.cli import app

    catalog = tmp_path / "catalog.csv"
    pl.DataFrame(CATALOG, schema=[S.LISTING_ID, S.TITLE, "truth"], orient="row").write_csv(catalog)
    args = [
        "mine-eval",
        "--catalog",
        str(catalog),
        "--truth-column",
        "truth",
        "--out",
        str(tmp_path / "out"),
        "--set",
        f"cache_dir='{session_cache_dir}'",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "| d_both |" in result.stdout
    saved = json.loads((tmp_path / "out" / "mine_eval.json").read_text())
    assert set(saved["variants"]) >= {"a_naive", "b_margin", "c_product", "d_both"}
    assert saved["pairs"] > 0
    missing = CliRunner().invoke(app, [*args[:3], "--truth-column", "nope", *args[5:]])
    assert missing.exit_code == 2
