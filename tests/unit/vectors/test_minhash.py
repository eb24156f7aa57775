"""MinHash signatures equal datasketch's, LSH parameters match its derivation, banding works."""

from __future__ import annotations

import itertools
import random

import numpy as np
import polars as pl
import pytest
from datasketch import MinHash
from datasketch.lsh import _optimal_param

from pairsieve.vectors import minhash

TITLES = [
    "apple iphone 8 plus 64gb silver",
    "apple iphone 8 plus 64gb spacegrau",
    "samsung ue55nu8000 55 8 series hdr1000 flat led tv",
    "bosch waw325h0gb serie 8 9kg 1600 spin washing machine",
    "x",
    "",
]


@pytest.mark.parametrize(("kind", "size"), [("word", 1), ("word", 2), ("char", 3), ("char", 5)])
@pytest.mark.parametrize(("num_perm", "seed"), [(128, 1), (64, 13)])
def test_signatures_bit_identical_to_datasketch(kind, size, num_perm, seed) -> None:
    shingles = pl.select(minhash.shingle_expr(pl.lit(pl.Series(TITLES)), kind, size)).to_series()
    sig = minhash.signatures(shingles, num_perm, seed)
    assert sig.shape == (len(TITLES), num_perm) and sig.dtype == np.uint32
    for row, doc in zip(sig, shingles.to_list(), strict=True):
        reference = MinHash(num_perm=num_perm, seed=seed)
        for shingle in doc:
            reference.update(shingle.encode("utf-8"))
        np.testing.assert_array_equal(row, reference.hashvalues)


def test_word_shingles_are_unique_ngrams() -> None:
    got = pl.select(minhash.shingle_expr(pl.lit("a b a b"), "word", 2)).item().to_list()
    assert sorted(got) == ["a b", "b a"]


@pytest.mark.parametrize("threshold", [0.3, 0.5, 0.8])
def test_lsh_params_match_datasketch(threshold: float) -> None:
    assert minhash.lsh_params(threshold, 128) == _optimal_param(threshold, 128, 0.5, 0.5)


def test_pairs_within_groups_brute_force() -> None:
    rng = random.Random(3)
    keys = np.array([rng.randint(0, 9) for _ in range(60)], dtype=np.int64)
    pairs, skipped = minhash.pairs_within_groups(keys, max_group=8)
    sizes = np.bincount(keys)
    want = {
        (i, j)
        for i, j in itertools.combinations(range(len(keys)), 2)
        if keys[i] == keys[j] and sizes[keys[i]] <= 8
    }
    assert {tuple(p) for p in pairs.tolist()} == want
    assert skipped == int(np.sum(sizes > 8))


def test_wanted_groups_give_every_full_pair_touching_a_wanted_row() -> None:
    from pairsieve.cluster.reuse import touching

    rng = np.random.default_rng(5)
    keys = rng.integers(0, 12, size=80)
    wanted = rng.random(80) < 0.1
    full, skipped = minhash.pairs_within_groups(keys, max_group=9)
    some, some_skipped = minhash.pairs_within_groups(keys, max_group=9, wanted=wanted)
    assert len(some) < len(full)
    assert touching(some, wanted).tolist() == touching(full, wanted).tolist()
    assert some_skipped == skipped


def test_signatures_are_cached_per_text_and_read_back_identical(tmp_path) -> None:
    from pairsieve.vectors.embed import embed_texts

    docs = [
        "samsung ue55nu8000 55 inch",
        "bosch waw325h0gb washing machine",
        "samsung ue55nu8000 55 inch",
    ]
    encoder = minhash.SignatureEncoder("word", 1, 64, 3)
    cache = minhash.SignatureCache(tmp_path, encoder.model_key)
    first, stats = embed_texts(docs, encoder, cache)
    again, again_stats = embed_texts(
        docs[:2], encoder, minhash.SignatureCache(tmp_path, encoder.model_key)
    )
    shingles = pl.select(minhash.shingle_expr(pl.lit(pl.Series(docs)), "word", 1)).to_series()
    assert first.dtype == np.uint32 and again.dtype == np.uint32
    assert np.array_equal(first, minhash.signatures(shingles, 64, 3))
    assert np.array_equal(again, first[:2])
    assert (stats.encoded, again_stats.encoded, again_stats.cache_hits) == (2, 0, 2)


def test_lsh_finds_near_duplicates_not_strangers() -> None:
    docs = [
        "samsung ue55nu8000 55 inch 4k hdr smart led tv black",
        "samsung ue55nu8000 55 inch 4k hdr smart led tv",
        "bosch serie 8 waw325h0gb 9kg 1600rpm washing machine white",
    ]
    shingles = pl.select(minhash.shingle_expr(pl.lit(pl.Series(docs)), "word", 1)).to_series()
    sig = minhash.signatures(shingles, 128, 1)
    bands, rows = minhash.lsh_params(0.5, 128)
    pairs, _ = minhash.lsh_pairs(sig, bands, rows, max_bucket=50)
    assert pairs.tolist() == [[0, 1]]
