"""A synthetic marketplace with known products: catalog, search clicks and ground truth.

Products come in families (brand, product line, generation) of ``VARIANTS_PER_FAMILY`` variants that
differ only in tier ("Pro", "Plus", "Max", "F") or capacity/size (64 GB vs 128 GB): the near misses
a matcher must keep apart. Generations 2k and 2k+1 of a line share their variant set, so "Galaxy S20
128GB" and "Galaxy S21 128GB" both exist. Each product is sold by several distinct sellers whose
titles differ the way PriceRunner's do: word order, "64 GB" / "64gb" / "64 Go", colour words in
German, French or Swedish, marketing words, part numbers with region suffixes, letter case, typos.
A seller has a house style that most of its titles follow. Colour is an offer attribute, not part of
product identity (as in PriceRunner, where "silver" and "spacegrau" offers share a product).

Every random choice is a hash of (seed, product index, draw), so a product's listings do not depend
on the chunk it is generated in: `generate` streams chunks to files with bounded memory and any
``chunk_size`` gives the same rows. Clicks come from `clicklog.derive_clicks`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq

from pairsieve import schemas as S
from pairsieve.core.io import PARQUET_OPTIONS, atomic_path
from pairsieve.datasets.clicklog import (
    ClickModel,
    derive_clicks,
    expand,
    geometric,
    subkeys,
    typo,
    uniform,
)
from pairsieve.datasets.synth_vocab import REGIONS, build_tables
from pairsieve.errors import PairsieveError

log = logging.getLogger(__name__)

VARIANTS_PER_FAMILY = 4
MEAN_EXTRA_SELLERS = 3.5  # 1 + geometric(3.5): ~4.3 offers per product, ~22% sold by one seller
MAX_SELLERS = 12
FOLLOW_HOUSE_STYLE = 0.75  # share of a seller's titles written in its house style
FORMATS = ("parquet", "csv", "jsonl")


LANGUAGE_CDF = np.array([0.55, 0.75, 0.85, 1.0])  # English, German, French, Swedish colour words
CASE_CDF = np.array([0.6, 0.9, 1.0])  # as written, lower case (PriceRunner style), upper case
# Word orders: 0 brand model size colour | 1 colour before size | 2 ", colour" | 3 " - " separated
# | 4 marketing word first | 5 part number after brand | 6 "(part number)" last
# | 7 "(size, colour)" | 8 no brand
TEMPLATE_CDF = np.cumsum([0.3, 0.12, 0.1, 0.1, 0.08, 0.1, 0.08, 0.07, 0.05])


_T = build_tables()


def _gather(table: str, index: np.ndarray) -> pl.Series:
    return _T.strings[table].gather(index)


def _seed_keys(seed: int, index: np.ndarray) -> np.ndarray:
    base = np.full(index.size, seed & 0xFFFF_FFFF_FFFF_FFFF, dtype=np.uint64)
    return subkeys(base, index.astype(np.uint64))


# --- products ------------------------------------------------------------------------------------


def _products(start: int, stop: int, seed: int) -> dict[str, np.ndarray]:
    """Attribute indices of products ``start..stop-1``; a pure function of (index, seed)."""
    idx = np.arange(start, stop, dtype=np.int64)
    family, variant = np.divmod(idx, VARIANTS_PER_FAMILY)
    n_lines = _T.line_cat.size
    line = family % n_lines
    gen = _T.line_first_gen[line] + family // n_lines
    cat = _T.line_cat[line]
    n_combos = _T.cat_tiers[cat] * _T.cat_sizes[cat]
    # Shared by generations 2k and 2k+1 of a line, so generation near misses exist.
    line_offset = (uniform(_seed_keys(seed, line + 1_000_000), 1) * 64).astype(np.int64)
    combo = (line_offset + (gen // 2) * VARIANTS_PER_FAMILY + variant) % n_combos
    keys = _seed_keys(seed, idx)
    return {
        "idx": idx,
        "keys": keys,
        "line": line,
        "gen": gen,
        "cat": cat,
        "tier": combo // _T.cat_sizes[cat],
        "size": combo % _T.cat_sizes[cat],
        "colour": (uniform(keys, 1) * _T.cat_colours[cat]).astype(np.int64),
        "sellers": np.minimum(
            MAX_SELLERS, 1 + geometric(np.full(idx.size, MEAN_EXTRA_SELLERS), uniform(keys, 2))
        ),
    }


def _seller_pool(n_products: int) -> int:
    """A prime number of sellers (~1 per 25 products, at least 61): stepping through it with a
    per-product stride gives up to ``MAX_SELLERS`` distinct sellers for every product."""
    n = max(61, n_products // 25)
    while any(n % d == 0 for d in range(2, int(n**0.5) + 1)):
        n += 1
    return n


def _listing_ids(product: np.ndarray, slot: np.ndarray) -> pl.Series:
    """Opaque unique ids: a bijection of (product, slot) on 40 bits, so ids reveal no product."""
    mask = np.uint64((1 << 40) - 1)
    x = ((product.astype(np.uint64) << np.uint64(5)) | slot.astype(np.uint64)) ^ np.uint64(
        0x5DEECE66D
    )
    for mult in (np.uint64(0x9E3779B97F), np.uint64(0xC2B2AE3D27)):  # odd: invertible mod 2^40
        x = (x * mult) & mask
        x ^= x >> np.uint64(20)
    return "L" + pl.Series(x).cast(pl.String).str.zfill(13)


def _style(listing_keys: np.ndarray, seller_keys: np.ndarray, stream: int) -> np.ndarray:
    """A uniform that is the seller's house style with probability FOLLOW_HOUSE_STYLE."""
    own = uniform(listing_keys, 100 + stream) >= FOLLOW_HOUSE_STYLE
    return np.where(own, uniform(listing_keys, stream), uniform(seller_keys, stream))


def _sellers(
    prod: dict[str, np.ndarray], local: np.ndarray, slot: np.ndarray, pool: int
) -> np.ndarray:
    """Seller of each offer: distinct within a product (a prime pool walked with a stride)."""
    pkeys = prod["keys"][local]
    first = (uniform(pkeys, 3) * pool).astype(np.int64)
    stride = 1 + (uniform(pkeys, 4) * (pool - 1)).astype(np.int64)
    return (first + slot * stride) % pool


def _seller_style(keys: np.ndarray, skeys: np.ndarray) -> dict[str, np.ndarray]:
    """How this offer's title is written: mostly the seller's house style."""
    return {
        "template": np.searchsorted(TEMPLATE_CDF, _style(keys, skeys, 1) * TEMPLATE_CDF[-1]),
        "unit_style": (_style(keys, skeys, 2) * 4).astype(np.int64),
        "language": np.searchsorted(LANGUAGE_CDF, _style(keys, skeys, 3)),
        "case": np.searchsorted(CASE_CDF, _style(keys, skeys, 4)),
        "with_part": _style(keys, skeys, 5) < 0.3,
        "region": (_style(keys, skeys, 6) * len(REGIONS)).astype(np.int64),
        "brand_upper": _style(keys, skeys, 13) < 0.15,
    }


def _listings(prod: dict[str, np.ndarray], pool: int, seed: int) -> pl.DataFrame:
    """One row per (product, seller) with every title field rendered (null = left out)."""
    local, slot = expand(prod["sellers"])
    keys = subkeys(prod["keys"][local], slot + 1)
    cat, line, size_index = prod["cat"][local], prod["line"][local], prod["size"][local]
    seller = _sellers(prod, local, slot, pool)
    style = _seller_style(keys, _seed_keys(seed, seller + 2_000_000))
    # 60% of offers show the product's colour, the rest another colour of the same product
    other = (uniform(keys, 9) * _T.cat_colours[cat]).astype(np.int64)
    colour = np.where(uniform(keys, 8) < 0.6, prod["colour"][local], other)
    tier = _T.tier_offset[cat] + prod["tier"][local]
    size = _T.size_offset[cat] + size_index
    word = _T.word_offset[cat] + (uniform(keys, 11) * _T.cat_words[cat]).astype(np.int64)
    price = _T.cat_price[cat] * (1 + 0.35 * size_index) * (1 + 0.2 * prod["tier"][local])
    price *= 0.9 + 0.25 * uniform(keys, 10)
    return pl.DataFrame(
        {
            S.LISTING_ID: _listing_ids(prod["idx"][local], slot),
            S.TRUE_PRODUCT_ID: "p" + pl.Series(prod["idx"][local]).cast(pl.String).str.zfill(10),
            "brand": _gather("brand", line),
            "model": _model_text(line, prod["gen"][local]),
            "tier": _gather("tier", tier),
            "tier_letter": _gather("tier_letter", tier),
            "glue": _T.cat_glue[cat],
            "size": _gather("size", size * 4 + style["unit_style"]),
            "size_plain": _gather("size", size * 4),
            "colour": _gather("colour", colour * 4 + style["language"]),
            "has_colour": (_T.cat_colours[cat] > 0) & (uniform(keys, 7) >= 0.25),
            "colour_en": _gather("colour", prod["colour"][local] * 4),
            "colourful": _T.cat_colours[cat] > 0,
            "code": _gather("code", line),
            "region": _gather("region", style["region"]),
            "gen": prod["gen"][local],
            "size_index": size_index,
            "word": _gather("word", word),
            "with_word": uniform(keys, 12) < 0.25,
            "typo": uniform(keys, 14) < 0.06,
            "u_typo": uniform(keys, 15),
            "u_kind": uniform(keys, 16),
            **{k: style[k] for k in ("template", "case", "with_part", "brand_upper")},
            S.SELLER_ID: "seller-" + pl.Series(seller).cast(pl.String).str.zfill(5),
            S.PRICE: np.floor(price) + 0.99,
            S.CATEGORY: _gather("category", cat),
        }
    )


def _model_text(line: np.ndarray, gen: np.ndarray) -> pl.Series:
    """ "iPhone {g}" with the generation filled in."""
    head, tail = _gather("model_head", line), _gather("model_tail", line)
    return head + pl.Series(gen).cast(pl.String) + tail


# --- titles --------------------------------------------------------------------------------------


def _join(parts: list[pl.Expr], separator: str = " ") -> pl.Expr:
    """Join the non-null parts; null when all are null (so no stray separators)."""
    joined = pl.concat_str(parts, separator=separator, ignore_nulls=True)
    return joined.replace("", None)


def _paren(expr: pl.Expr) -> pl.Expr:
    return pl.concat_str(pl.lit("("), expr, pl.lit(")"))


def _title_fields() -> dict[str, pl.Expr]:
    col = pl.col
    tier_glued = col("glue") & col("tier").is_not_null()
    part = pl.concat_str(
        col("code"),
        col("gen").cast(pl.String),
        col("tier_letter"),
        col("size_index").cast(pl.String),
        col("region"),
    )
    return {
        "B": pl.when(col("brand_upper")).then(col("brand").str.to_uppercase()).otherwise("brand"),
        "M": pl.when(tier_glued).then(col("model") + col("tier")).otherwise("model"),
        "T": pl.when(~col("glue")).then("tier"),
        "Z": col("size"),
        "C": pl.when(col("has_colour")).then("colour"),
        "P": pl.when(col("with_part")).then(part),
        "X": pl.when(col("with_word")).then("word"),
        "W": col("word"),
    }


def _titles(listings: pl.DataFrame) -> pl.Series:
    """The seller's title: one of nine word orders, then letter case, then maybe a typo.

    Each word order is built only on its own rows and typos only on the 6% that get one: a
    when/then chain evaluates every branch on every row (measured 4x slower on 213k listings).
    """
    col = pl.col
    B, M, T, Z, C, P, X, W = (col(k) for k in "BMTZCPXW")  # noqa: N806
    templates = [
        _join([B, M, T, Z, C, X]),
        _join([B, M, T, C, Z, X]),
        _join([_join([_join([B, M, T, Z]), C], ", "), X]),
        _join([_join([_join([B, M, T]), Z, C], " - "), X]),
        _join([W, B, M, T, Z, C]),
        _join([B, P, M, T, Z, C, X]),
        _join([B, M, T, Z, C, _paren(P), X]),
        _join([B, M, T, _paren(_join([Z, C], ", ")), X]),
        _join([M, T, Z, C, X]),
    ]
    text = col(S.TITLE)
    cased = (
        pl.when(col("case") == 1)
        .then(text.str.to_lowercase())
        .when(col("case") == 2)
        .then(text.str.to_uppercase())
        .otherwise(text)
    )
    frame = listings.with_columns(**_title_fields()).with_row_index("row")
    parts = [
        frame.filter(col("template") == i).with_columns(template.alias(S.TITLE))
        for i, template in enumerate(templates)
    ]
    frame = pl.concat(parts).sort("row").with_columns(cased.alias(S.TITLE))
    slips = frame.filter(col("typo")).select(
        "row", typo(text, col("typo"), col("u_typo"), col("u_kind")).alias(S.TITLE)
    )
    return frame[S.TITLE].scatter(slips["row"], slips[S.TITLE])


def _canonical_name() -> pl.Expr:
    """The product's name as its maker writes it; queries are derived from it."""
    col = pl.col
    tier = (
        pl.when(col("glue"))
        .then(col("model") + col("tier"))
        .otherwise(pl.concat_str(col("model"), col("tier"), separator=" ", ignore_nulls=True))
    )
    return pl.concat_str(
        col("brand"),
        pl.when(col("tier").is_null()).then("model").otherwise(tier),
        col("size_plain"),
        pl.when(col("colourful")).then("colour_en"),
        separator=" ",
        ignore_nulls=True,
    )


def catalog_chunk(start: int, stop: int, n_products: int, seed: int) -> pl.DataFrame:
    """Listings of products ``start..stop-1`` of an ``n_products`` marketplace, in the catalog
    contract plus ``true_product_id`` and ``true_product_name`` (ground truth, evaluation only)."""
    listings = _listings(_products(start, stop, seed), _seller_pool(n_products), seed)
    return listings.with_columns(_titles(listings)).select(
        S.LISTING_ID,
        S.TITLE,
        pl.col("brand").alias(S.BRAND),
        S.SELLER_ID,
        S.PRICE,
        S.CATEGORY,
        S.TRUE_PRODUCT_ID,
        _canonical_name().alias(S.TRUE_PRODUCT_NAME),
    )


# --- streaming output ----------------------------------------------------------------------------


class _Sink:
    """Appends chunks to one file: parquet row groups, or CSV/JSONL text."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        self._parquet: pq.ParquetWriter | None = None
        self._handle = open(path, "wb") if fmt != "parquet" else None  # noqa: SIM115
        self._first = True

    def write(self, frame: pl.DataFrame) -> None:
        if self.fmt == "parquet":
            table = frame.to_arrow()
            if self._parquet is None:
                self._parquet = pq.ParquetWriter(
                    self.path,
                    table.schema,
                    compression=PARQUET_OPTIONS["compression"],
                    compression_level=PARQUET_OPTIONS["compression_level"],
                )
            self._parquet.write_table(table.cast(self._parquet.schema))
        elif self.fmt == "csv":
            frame.write_csv(self._handle, include_header=self._first)
        else:
            frame.write_ndjson(self._handle)
        self._first = False

    def close(self) -> None:
        if self._parquet is not None:
            self._parquet.close()
        if self._handle is not None:
            self._handle.close()


@dataclass(frozen=True)
class SynthOptions:
    """Output formats and click volume of `generate`.

    ``queries_per_product`` is the mean number of search sessions per product (each gives ~1.3
    click rows); raise it for click-heavy benchmarks.
    """

    formats: tuple[str, ...] = ("parquet",)
    queries_per_product: float = 4.0
    click_model: ClickModel = field(default_factory=ClickModel)


@dataclass(frozen=True)
class SynthSummary:
    """What `generate` wrote."""

    products: int
    listings: int
    click_rows: int
    files: tuple[str, ...]
    seconds: float


def _check(n_products: int, chunk_size: int, options: SynthOptions) -> tuple[str, ...]:
    if n_products < 1 or chunk_size < 1:
        raise PairsieveError("bad_argument", "products and chunk size must be >= 1")
    if options.queries_per_product < 0:
        raise PairsieveError("bad_argument", "queries per product must be >= 0")
    formats = tuple(dict.fromkeys(options.formats))
    unknown = sorted(set(formats) - set(FORMATS))
    if unknown or not formats:
        raise PairsieveError("bad_argument", f"format must be one of {FORMATS}, got {unknown}")
    return formats


def generate(
    out_dir: Path,
    n_products: int,
    seed: int = 0,
    chunk_size: int = 50_000,
    options: SynthOptions | None = None,
) -> SynthSummary:
    """Write ``catalog.<fmt>`` and ``clicks.<fmt>`` for ``n_products`` products into ``out_dir``.

    Products are generated ``chunk_size`` at a time (memory ~ chunk_size) and appended to each
    file, which appears atomically when complete. Same arguments -> byte-identical files; a
    different ``chunk_size`` gives the same rows (only parquet row groups differ).

    Raises:
        PairsieveError: ``bad_argument`` for a non-positive count or an unknown format.
    """
    options = options or SynthOptions()
    formats = _check(n_products, chunk_size, options)
    started = time.perf_counter()
    files = [Path(out_dir) / f"{name}.{fmt}" for fmt in formats for name in ("catalog", "clicks")]
    listings = clicks = 0
    with contextlib.ExitStack() as stack:
        sinks = [_Sink(stack.enter_context(atomic_path(path)), path.suffix[1:]) for path in files]
        try:
            for start in range(0, n_products, chunk_size):
                stop = min(start + chunk_size, n_products)
                catalog = catalog_chunk(start, stop, n_products, seed)
                click_log = derive_clicks(
                    catalog,
                    S.TRUE_PRODUCT_ID,
                    seed,
                    options.queries_per_product,
                    options.click_model,
                )
                for path, sink in zip(files, sinks, strict=True):
                    sink.write(catalog if path.stem == "catalog" else click_log)
                listings, clicks = listings + catalog.height, clicks + click_log.height
                log.info("synth: products %d-%d: %d listings", start, stop - 1, catalog.height)
        finally:
            for sink in sinks:
                sink.close()
    seconds = time.perf_counter() - started
    return SynthSummary(n_products, listings, clicks, tuple(map(str, files)), seconds)
