"""Real-data loaders (PriceRunner, Abt-Buy) and the click-log derivation."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.datasets import abtbuy, clicklog, files, pricerunner
from pairsieve.errors import PairsieveError


@pytest.fixture(scope="module")
def pricerunner_catalog(shared_data):
    return pricerunner.load_catalog(shared_data)


@pytest.fixture(scope="module")
def abtbuy_catalog(shared_data):
    return abtbuy.load_catalog(shared_data / "abt-buy")


def test_pricerunner_counts_and_contract(pricerunner_catalog):
    cat = pricerunner_catalog
    assert cat.height == 35_311
    assert cat[S.TRUE_PRODUCT_ID].n_unique() == 13_233
    assert cat[S.LISTING_ID].is_unique().all()
    for column in (S.LISTING_ID, S.TITLE, S.SELLER_ID, S.CATEGORY, S.TRUE_PRODUCT_ID):
        assert cat.schema[column] == pl.String
        assert cat[column].null_count() == 0
    first = cat.row(0, named=True)
    assert first[S.TITLE] == "apple iphone 8 plus 64gb silver"
    assert first[S.TRUE_PRODUCT_NAME] == "Apple iPhone 8 Plus 64GB"
    # documented property of the data set: no merchant twice within one product
    assert cat.select(S.TRUE_PRODUCT_ID, S.SELLER_ID).is_duplicated().sum() == 0


def test_abtbuy_counts_and_components(abtbuy_catalog, shared_data):
    cat = abtbuy_catalog
    assert cat.height == 2_173
    assert cat[S.LISTING_ID].is_unique().all()
    assert cat.filter(pl.col(S.SELLER_ID) == "abt").height == 1_081
    sizes = cat.group_by(S.TRUE_PRODUCT_ID).len()["len"]
    assert sizes.len() == 1_076
    assert (sizes == 3).sum() == 21
    # every one of the 1,097 mapped pairs lies within one product
    mapping_file = shared_data / "abt-buy" / "abt_buy_perfectMapping.csv"
    mapping = pl.read_csv(mapping_file, infer_schema=False)
    truth = dict(zip(cat[S.LISTING_ID], cat[S.TRUE_PRODUCT_ID], strict=True))
    same = [truth[f"abt:{a}"] == truth[f"buy:{b}"] for a, b in mapping.iter_rows()]
    assert len(same) == 1_097 and all(same)
    # component id is its smallest member
    smallest = cat.group_by(S.TRUE_PRODUCT_ID).agg(pl.col(S.LISTING_ID).min().alias("m"))
    assert (smallest["m"] == smallest[S.TRUE_PRODUCT_ID]).all()


def test_abt_latin1_decoded(abtbuy_catalog):
    row = abtbuy_catalog.filter(pl.col(S.LISTING_ID) == "abt:580").row(0, named=True)
    assert row[S.PRICE] == 399.0
    texts = abtbuy_catalog.filter(pl.col(S.SELLER_ID) == "abt")[S.DESCRIPTION].drop_nulls()
    assert texts.str.contains("Remote Commander®", literal=True).any()
    assert not texts.str.contains("\ufffd", literal=True).any()
    assert not texts.str.contains("Â®", literal=True).any()
    buy = abtbuy_catalog.filter(pl.col(S.SELLER_ID) == "buy")
    assert buy[S.BRAND].null_count() < buy.height


def test_loader_missing_file_names_it(tmp_path):
    with pytest.raises(PairsieveError) as info:
        pricerunner.load_catalog(tmp_path)
    assert info.value.code == "missing_file"
    assert "pricerunner_aggregate.csv" in info.value.message
    with pytest.raises(PairsieveError):
        abtbuy.load_catalog(tmp_path)


def test_components_smallest_member():
    roots = files.components(["c", "a", "b", "d"], [("c", "b"), ("b", "a")])
    assert roots == {"a": "a", "b": "a", "c": "a", "d": "d"}


# --- click-log derivation ------------------------------------------------------------------------


def _word(i: int, position: int) -> str:
    """A letters-only word unique to (product i, position)."""
    letters = "".join(chr(97 + (i // 26**k) % 26) for k in range(3))
    return letters + "xyzw"[position]


@pytest.fixture(scope="module")
def toy_catalog() -> pl.DataFrame:
    """60 products whose names share no word, each sold 1-5 times."""
    rows = []
    for i in range(60):
        name = f"{_word(i, 0).title()} {_word(i, 1)} {_word(i, 2)} {64 * (1 + i % 3)}GB Black"
        for j in range(1 + i % 5):
            rows.append((f"l{i}-{j}", f"{name} offer {j}", f"p{i}", name))
    return pl.DataFrame(
        rows, schema=[S.LISTING_ID, S.TITLE, S.TRUE_PRODUCT_ID, S.TRUE_PRODUCT_NAME], orient="row"
    )


def test_derive_clicks_deterministic_and_order_free(toy_catalog):
    first = clicklog.derive_clicks(toy_catalog, seed=7, queries_per_product=6)
    again = clicklog.derive_clicks(toy_catalog.reverse(), seed=7, queries_per_product=6)
    other = clicklog.derive_clicks(toy_catalog, seed=8, queries_per_product=6)
    assert first.height > 100
    assert first.equals(again)
    assert not first.equals(other)
    assert first.columns == [S.QUERY, S.LISTING_ID, S.CLICKS, S.POSITION, S.SESSION_ID, S.TS]
    assert first[S.CLICKS].min() >= 1 and first[S.POSITION].min() >= 1


def test_clicks_land_on_the_product_the_query_names(toy_catalog):
    clicks = clicklog.derive_clicks(toy_catalog, seed=3, queries_per_product=8)
    truth = dict(zip(toy_catalog[S.LISTING_ID], toy_catalog[S.TRUE_PRODUCT_ID], strict=True))
    owner = {_word(i, k): f"p{i}" for i in range(60) for k in range(3)}
    for query, listing in clicks.select(S.QUERY, S.LISTING_ID).iter_rows():
        named = {owner[w] for w in query.lower().split() if w in owner}
        # a typo can spoil one word, but at least one name word survives every edit
        assert named == {truth[listing]}, (query, listing)
    per_session = clicks.with_columns(pl.col(S.LISTING_ID).replace_strict(truth).alias("p"))
    assert per_session.group_by(S.SESSION_ID).agg(pl.col("p").n_unique())["p"].max() == 1
    # a session issues one query
    assert clicks.group_by(S.SESSION_ID).agg(pl.col(S.QUERY).n_unique())[S.QUERY].max() == 1


def test_click_model_shapes(pricerunner_catalog):
    clicks = clicklog.derive_clicks(pricerunner_catalog, seed=1, queries_per_product=4)
    truth = dict(
        zip(pricerunner_catalog[S.LISTING_ID], pricerunner_catalog[S.TRUE_PRODUCT_ID], strict=True)
    )
    sessions = clicks.with_columns(pl.col(S.LISTING_ID).replace_strict(truth).alias("p"))
    per_product = sessions.group_by("p").agg(pl.col(S.SESSION_ID).n_unique().alias("n"))
    counts = per_product["n"].sort(descending=True)
    # Zipf: the top 10% of searched products get a large share; many products get no search
    assert counts.head(counts.len() // 10).sum() > 0.4 * counts.sum()
    assert per_product.height < 0.8 * pricerunner_catalog[S.TRUE_PRODUCT_ID].n_unique()
    # position bias: the first slot is clicked most, and clicks thin out further down
    by_position = clicks.group_by(S.POSITION).agg(pl.col(S.CLICKS).sum()).sort(S.POSITION)
    shares = by_position[S.CLICKS].to_list()
    assert shares[0] == max(shares) and shares[0] > 3 * shares[5]
    # the plain name (lower-cased PriceRunner label) is a common query; many others are edited
    plain = pricerunner_catalog[S.TRUE_PRODUCT_NAME].str.to_lowercase().unique()
    is_plain = clicks[S.QUERY].is_in(plain.implode())
    assert 0.15 < is_plain.mean() < 0.8


def test_query_edits_look_like_shoppers():
    names = pl.Series(["Apple iPhone 8 Plus 64GB Space grey"] * 4000)
    keys = clicklog.subkeys(np.full(4000, 11, dtype=np.uint64), np.arange(4000))
    queries = clicklog.query_variants(names, keys, np.zeros(4000, dtype=bool))
    assert queries.str.contains("64 gb").any() and queries.str.contains("64gb").any()
    assert (~queries.str.contains("apple", literal=True)).any()
    assert (~queries.str.contains("grey", literal=True)).mean() > 0.4
    assert queries.is_in(["apple iphone 8", "iphone 8"]).any()  # brand+model only
    assert queries.str.starts_with("space grey").any() or queries.str.starts_with("grey").any()
    # typos touch letters only, never the model or capacity digits
    digits = queries.str.extract_all(r"\d+").list.sort().list.join(",")
    assert digits.is_in(["64,8", "8", ""]).all()
    plain = clicklog.query_variants(names[:50], keys[:50], np.ones(50, dtype=bool))
    assert plain.str.to_lowercase().str.replace(" gb", "gb").unique().to_list() == [
        "apple iphone 8 plus 64gb space grey"
    ]


def test_the_five_benchmarks_load_under_their_names(shared_data):
    from pairsieve.datasets.benchmarks import BENCHMARKS, benchmark

    expected = {  # listings, products, from each data set's README
        "pricerunner": (35_311, 13_233),
        "abt-buy": (2_173, 1_076),
        "walmart-amazon": (24_623, 24_623 - 853),
        "altosight": (13_958, 456),
        "alaska-cameras": (5_786, None),
    }
    assert list(BENCHMARKS) == list(expected)
    for name, (listings, products) in expected.items():
        cat = benchmark(name).load(shared_data)
        assert cat.height == listings and cat[S.LISTING_ID].is_unique().all(), name
        assert cat[S.TITLE].null_count() == 0 and cat[S.TRUE_PRODUCT_ID].null_count() == 0, name
        if products is not None:
            assert cat[S.TRUE_PRODUCT_ID].n_unique() == products, name
    with pytest.raises(PairsieveError) as unknown:
        benchmark("walmart")
    assert unknown.value.code == "bad_argument" and "walmart-amazon" in unknown.value.message


def test_match_lists_become_products(shared_data):
    from pairsieve.datasets import alaska, walmart_amazon

    walmart = walmart_amazon.load_catalog(shared_data)
    truth = dict(zip(walmart[S.LISTING_ID], walmart[S.TRUE_PRODUCT_ID], strict=True))
    gt = pl.read_csv(shared_data / "walmart-amazon" / "gt.csv", separator="|", infer_schema=False)
    assert all(truth[f"walmart:{a}"] == truth[f"amazon:{b}"] for a, b in gt.iter_rows())
    # the truth links the shops only: no product holds two listings of one shop
    assert walmart.select(S.TRUE_PRODUCT_ID, S.SELLER_ID).is_duplicated().sum() == 0
    cameras = alaska.load_catalog(shared_data)
    truth = dict(zip(cameras[S.LISTING_ID], cameras[S.TRUE_PRODUCT_ID], strict=True))
    matches = pl.read_csv(shared_data / "alaska-cameras" / "matches.csv", infer_schema=False)
    linked = [(a, b) for a, b in matches.iter_rows() if a in truth and b in truth]
    assert len(linked) > 11_000 and all(truth[a] == truth[b] for a, b in linked)
    assert cameras[S.SELLER_ID].value_counts().sort("count")[-1, S.SELLER_ID] == "www.ebay.com"
