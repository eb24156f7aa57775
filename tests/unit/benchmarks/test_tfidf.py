"""The TF-IDF top-k candidate source of the benchmarks: word-named titles that share a rare name
meet, words common in the catalog carry nothing, and each title proposes at most k pairs."""

from __future__ import annotations

import polars as pl

from pairsieve import schemas as S
from pairsieve.text.attributes import normalize
from tests.unit.benchmarks.scripts import benchmark_module

TITLES = [
    "Adobe Photoshop Elements 4.0 Win",
    "Photoshop Elements 4.0 for Windows (Adobe)",
    "Intuit Quicken Deluxe 2011",
    "Quicken 2011 Deluxe - Intuit",
    "Bosch washing machine",
    "Miele washing machine",
    "Zanussi washing machine",
    "Nero Burning ROM 7 Ultra Edition",
]


def test_titles_that_share_rare_words_are_each_others_nearest():
    with benchmark_module("harness.tfidf") as tfidf:
        pairs = tfidf.top_k_pairs([normalize(t) for t in TITLES], k=1)
    found = {tuple(p) for p in pairs.tolist()}
    assert (0, 1) in found and (2, 3) in found
    assert all(a < b for a, b in found)
    # "washing" and "machine" are on three of eight titles: left out, so those titles share
    # nothing, and a title whose words no other title holds meets no one
    assert not {i for pair in found for i in pair} & {4, 5, 6, 7}


def test_each_title_proposes_at_most_k_pairs():
    lines = ["elph", "ixus", "sx", "g", "s"]
    finishes = ["red", "blue", "grey", "gold", "pink", "jet"]
    titles = [f"canon powershot {line} {finish}" for line in lines for finish in finishes]
    with benchmark_module("harness.tfidf") as tfidf:
        pairs = tfidf.top_k_pairs(titles, k=3, max_df_share=1.0)
    assert len(pairs) <= 3 * len(titles)
    assert set(pairs.ravel().tolist()) == set(range(len(titles)))  # each shares a line or finish
    assert len({tuple(p) for p in pairs.tolist()}) == len(pairs)


def test_listing_pairs_name_one_listing_per_distinct_title():
    catalog = pl.DataFrame(
        {
            S.LISTING_ID: ["a", "b", "c", "d"],
            S.TITLE: [TITLES[0], TITLES[0].upper(), TITLES[1], TITLES[7]],
        }
    )
    with benchmark_module("harness.tfidf") as tfidf:
        pairs = tfidf.listing_pairs(catalog, k=2)
    assert pairs.columns == [S.LISTING_A, S.LISTING_B]
    assert pairs.height == 1 and {pairs[S.LISTING_A][0], pairs[S.LISTING_B][0]} <= {"a", "b", "c"}
    assert "c" in (pairs[S.LISTING_A][0], pairs[S.LISTING_B][0])
