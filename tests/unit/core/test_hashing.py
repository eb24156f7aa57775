"""Golden values of every stable hash: product ids, cache keys, shard order, held-out products and
synthetic data are functions of these, so a change here changes artifacts users hold."""

from __future__ import annotations

import numpy as np
import polars as pl

from pairsieve.core import hashing

EDGES = np.array([0, 1, 2**64 - 1], dtype=np.uint64)


def test_string_hashes_keep_their_values():
    assert hashing.hex_digest("iphone 12") == "d918f5842347836e"
    assert hashing.hex_digest("listing-1", 4) == "9e7a1fbc"
    assert hashing.text_keys(["Apple iPhone 8 64GB", "", "ü"]).tolist() == [
        8324234404115708366,
        16476032584258269876,
        6192904641445441335,
    ]
    assert hashing.text_keys([]).dtype == np.uint64
    assert hashing.seeded_key(7, "eval", "p1") == 1655243226855920606
    assert hashing.seeded_keys(["a", "b"], 3).tolist() == [
        254125237955152243,
        10776793797392705776,
    ]
    assert hashing.label_int("p0123abcd") == 4972172820624419146


def test_a_column_is_keyed_like_its_values_one_by_one():
    column = pl.Series(["b", "a", "b", None])
    keys = hashing.column_keys(column).to_list()
    assert keys[:3] == [9543904841865449333, 4681665781835383343, 9543904841865449333]
    assert keys[:3] == [hashing.text_key(v) for v in ["b", "a", "b"]]
    assert keys[3] is None


def test_the_two_mixers_keep_their_values_and_differ_by_the_increment():
    assert hashing.avalanche64(EDGES).tolist() == [
        0,
        6238072747940578789,
        13029008266876403067,
    ]
    assert hashing.splitmix64(EDGES).tolist() == [
        16294208416658607535,
        10451216379200822465,
        16490336266968443936,
    ]
    gamma = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(hashing.splitmix64(EDGES), hashing.avalanche64(EDGES + gamma))


def test_label_ints_are_non_negative_int64():
    labels = [hashing.label_int(f"p{i}") for i in range(1000)]
    assert all(0 <= label < 2**63 for label in labels)
    assert len(set(labels)) == 1000
