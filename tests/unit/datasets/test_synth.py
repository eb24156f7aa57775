"""The synthetic marketplace: determinism, streaming, near misses, realistic seller wording."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from pairsieve import schemas as S
from pairsieve.cli import app
from pairsieve.core.io import sha256_file
from pairsieve.datasets import synth, synth_vocab
from pairsieve.datasets.clicklog import COLOUR_WORDS
from pairsieve.errors import PairsieveError
from tests.paths import SAMPLE_DIR

SAMPLE = SAMPLE_DIR


@pytest.fixture(scope="module")
def market(tmp_path_factory) -> tuple[pl.DataFrame, pl.DataFrame]:
    out = tmp_path_factory.mktemp("market")
    synth.generate(out, 400, seed=5, chunk_size=400)
    return pl.read_parquet(out / "catalog.parquet"), pl.read_parquet(out / "clicks.parquet")


def test_same_seed_gives_byte_identical_files(tmp_path):
    summaries = [synth.generate(tmp_path / name, 120, seed=2) for name in ("a", "b")]
    synth.generate(tmp_path / "c", 120, seed=3)
    for name in ("catalog.parquet", "clicks.parquet"):
        assert sha256_file(tmp_path / "a" / name) == sha256_file(tmp_path / "b" / name)
        assert sha256_file(tmp_path / "a" / name) != sha256_file(tmp_path / "c" / name)
    assert (summaries[0].listings, summaries[0].click_rows) == (
        summaries[1].listings,
        summaries[1].click_rows,
    )
    assert summaries[0].listings == pl.read_parquet(tmp_path / "a" / "catalog.parquet").height


def test_chunked_generation_gives_the_same_rows(tmp_path):
    synth.generate(tmp_path / "one", 300, seed=4, chunk_size=300)
    synth.generate(tmp_path / "many", 300, seed=4, chunk_size=37)
    for name in ("catalog.parquet", "clicks.parquet"):
        whole = pl.read_parquet(tmp_path / "one" / name)
        parts = pl.read_parquet(tmp_path / "many" / name)
        assert whole.height > 0 and whole.equals(parts)
    assert len(pq_row_groups(tmp_path / "many" / "catalog.parquet")) == 9  # really streamed


def pq_row_groups(path: Path) -> list[int]:
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def test_catalog_contract_and_sellers(market):
    catalog, _ = market
    assert catalog[S.LISTING_ID].is_unique().all()
    for column in (S.LISTING_ID, S.TITLE, S.SELLER_ID, S.TRUE_PRODUCT_ID, S.CATEGORY):
        assert catalog[column].null_count() == 0
    assert catalog[S.TRUE_PRODUCT_ID].n_unique() == 400
    assert 3.0 < catalog.height / 400 < 6.0
    # a seller lists a product once; ids do not give the product away
    assert not catalog.select(S.TRUE_PRODUCT_ID, S.SELLER_ID).is_duplicated().any()
    assert catalog[S.LISTING_ID].str.contains(r"^L\d{13}$").all()
    assert catalog[S.CATEGORY].n_unique() == len(synth_vocab.CATEGORIES)


def _name_tokens(name: str) -> list[str]:
    return [t for t in name.lower().split() if t not in COLOUR_WORDS]


def test_near_miss_products_exist(market):
    catalog, _ = market
    names = catalog.select(S.TRUE_PRODUCT_ID, S.TRUE_PRODUCT_NAME).unique()[S.TRUE_PRODUCT_NAME]
    tokens = {tuple(_name_tokens(n)) for n in names}
    kinds = set()
    for a, b in itertools.combinations(tokens, 2):
        if len(a) != len(b):
            if a[:2] == b[:2] and a[-1] == b[-1]:
                kinds.add("tier")  # "iphone 9 128gb" vs "iphone 9 pro 128gb"
            continue
        diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
        if len(diff) != 1:
            continue
        x, y = diff[0]
        if re.fullmatch(r"\d+(gb|kg|\")", x) and re.fullmatch(r"\d+(gb|kg|\")", y):
            kinds.add("capacity")  # 64GB vs 128GB
        elif re.sub(r"\d", "", x) == re.sub(r"\d", "", y):
            kinds.add("generation")  # Galaxy S8 vs S9, iPhone 8 vs 9
        else:
            kinds.add("tier")  # Plus vs Pro, 12400K vs 12400F
    assert kinds == {"capacity", "generation", "tier"}


def test_every_title_keeps_the_attributes_that_separate_near_misses(market):
    catalog, _ = market
    for title, name in catalog.select(S.TITLE, S.TRUE_PRODUCT_NAME).iter_rows():
        size = re.search(r"(\d+)(GB|kg|\")", name)
        if size is None:
            continue
        value = int(size.group(1))
        assert str(value) in title or str(round(value * 2.54)) in title, (title, name)
        generation = re.findall(r"\d+", name)[0]
        assert generation in title, (title, name)


def test_titles_vary_like_real_sellers(market):
    catalog, _ = market
    titles = catalog[S.TITLE]
    per_product = catalog.group_by(S.TRUE_PRODUCT_ID).agg(
        pl.len().alias("n"), pl.col(S.TITLE).n_unique().alias("distinct")
    )
    multi = per_product.filter(pl.col("n") >= 3)
    assert (multi["distinct"] == multi["n"]).mean() > 0.8
    lower = titles.str.to_lowercase()
    for pattern in (
        r"\d+gb\b",
        r"\d+ gb\b",
        r"\d+ go\b",
        r"\bschwarz\b|\bspacegrau\b",
        r"\bnoir\b",
    ):
        assert lower.str.contains(pattern).any(), pattern
    assert titles.str.contains(r"\(.*\)").any()  # part numbers and "(128GB, Black)"
    assert titles.str.contains(r"/DS|B/A|ZD/A|LL/A|XEU").any()  # region suffixes
    assert (titles == titles.str.to_lowercase()).mean() > 0.15  # PriceRunner-style lower case


def test_clicks_point_at_the_searched_product(market):
    catalog, clicks = market
    truth = dict(zip(catalog[S.LISTING_ID], catalog[S.TRUE_PRODUCT_ID], strict=True))
    assert clicks[S.LISTING_ID].is_in(catalog[S.LISTING_ID].implode()).all()
    products = clicks.with_columns(pl.col(S.LISTING_ID).replace_strict(truth).alias("p"))
    assert products.group_by(S.SESSION_ID).agg(pl.col("p").n_unique())["p"].max() == 1
    assert clicks[S.QUERY].str.len_chars().min() > 0
    assert clicks[S.QUERY].n_unique() < clicks.height


def test_text_formats_hold_the_same_rows(tmp_path):
    options = synth.SynthOptions(formats=("csv", "jsonl", "parquet"))
    synth.generate(tmp_path, 60, seed=1, chunk_size=25, options=options)
    parquet = pl.read_parquet(tmp_path / "catalog.parquet")
    csv = pl.read_csv(tmp_path / "catalog.csv", infer_schema=False)
    jsonl = pl.read_ndjson(tmp_path / "catalog.jsonl")
    assert csv[S.TITLE].equals(parquet[S.TITLE])
    assert jsonl.select(S.LISTING_ID, S.TITLE).equals(parquet.select(S.LISTING_ID, S.TITLE))
    assert (
        pl.read_csv(tmp_path / "clicks.csv").height
        == pl.read_parquet(tmp_path / "clicks.parquet").height
    )


def test_bad_arguments_write_nothing(tmp_path):
    with pytest.raises(PairsieveError) as info:
        synth.generate(tmp_path / "x", 10, options=synth.SynthOptions(formats=("xml",)))
    assert info.value.code == "bad_argument"
    with pytest.raises(PairsieveError):
        synth.generate(tmp_path / "x", 0)
    assert not (tmp_path / "x").exists()


def test_cli_synth(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["synth", "--out", str(tmp_path), "--products", "30", "--seed", "9"])
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "catalog.parquet").exists() and (tmp_path / "clicks.parquet").exists()
    bad = runner.invoke(app, ["synth", "--out", str(tmp_path / "b"), "--format", "xml"])
    assert bad.exit_code == 2


def test_committed_sample_is_what_the_readme_command_makes(tmp_path):
    """data/sample/README.md names the command; regenerating gives the same rows."""
    readme = (SAMPLE / "README.md").read_text()
    assert "--products 550 --seed 0 --queries-per-product 10" in readme
    options = synth.SynthOptions(queries_per_product=10)
    summary = synth.generate(tmp_path, 550, seed=0, options=options)
    for name in ("catalog.parquet", "clicks.parquet"):
        assert pl.read_parquet(SAMPLE / name).equals(pl.read_parquet(tmp_path / name))
    size = sum((SAMPLE / n).stat().st_size for n in ("catalog.parquet", "clicks.parquet"))
    assert size < 2_000_000
    assert summary.listings < 3_000
    assert pl.read_parquet(SAMPLE / "clicks.parquet")[S.QUERY].n_unique() < 2_000
