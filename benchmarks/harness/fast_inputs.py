"""A catalog and its click log as parquet, generated in seconds at the millions of rows ingest is
measured on: four listings a product, titles varied by seller word order, colour and extras;
Pareto listing popularity and queries typed four ways from the product; a few planted bad rows
of each kind ingest quarantines.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

BRANDS = [
    "Apple", "Samsung", "Sony", "LG", "Philips", "Bosch", "Dell", "HP", "Lenovo", "Asus",
    "Acer", "Canon", "Nikon", "Bose", "JBL", "Xiaomi", "Huawei", "Garmin", "Logitech", "Dyson",
]  # fmt: skip
NOUNS = [
    "Smartphone", "Laptop", "Headphones", "Monitor", "Tablet", "Camera", "Speaker", "Router",
    "Smartwatch", "Keyboard", "Mouse", "Vacuum Cleaner", "Hair Dryer", "Coffee Machine",
    "Television", "Soundbar", "Printer", "Projector", "Microwave", "Kettle",
]  # fmt: skip
CAPACITY = ["32 GB", "64GB", "128 GB", "256GB", "512 GB", "1TB", "500 W", "1200W", "27 inch", ""]
COLOURS = ["Black", "White", "Silver", "Space Grey", "Blue", "Schwarz", "Noir", "Röd", "", ""]
EXTRAS = ["", "", "New", "2024 Model", "Free Shipping", "EU Version", "Refurbished", "Bundle"]
ROW_GROUP = 250_000


def _pick(words: list[str], index: np.ndarray) -> pl.Series:
    return pl.Series(words).gather(pl.Series(index))


def _where(mask: np.ndarray, value: pl.Expr, otherwise: pl.Expr | str) -> pl.Expr:
    return pl.when(pl.Series(mask)).then(value).otherwise(otherwise)


def _padded(prefix: str, numbers: np.ndarray) -> pl.Expr:
    return pl.format(prefix + "{}", pl.Series(numbers).cast(pl.String).str.zfill(8))


def _catalog(n: int, rng: np.random.Generator) -> pl.DataFrame:
    """n listings of n/4 products; titles vary by seller word order, colour and extras."""
    product = np.arange(n) // 4
    frame = pl.DataFrame(
        {
            "brand": _pick(BRANDS, product % len(BRANDS)),
            "noun": _pick(NOUNS, (product // len(BRANDS)) % len(NOUNS)),
            "model": pl.Series((product % 9973).astype(np.int64)).cast(pl.String),
            "cap": _pick(CAPACITY, (product // 7) % len(CAPACITY)),
            "colour": _pick(COLOURS, rng.integers(0, len(COLOURS), n)),
            "extra": _pick(EXTRAS, rng.integers(0, len(EXTRAS), n)),
        }
    )
    code = pl.concat_str(pl.col("brand").str.slice(0, 2).str.to_uppercase(), pl.col("model"))
    usual = pl.concat_str("brand", "noun", code, "cap", "colour", "extra", separator=" ")
    flipped = pl.concat_str("brand", code, "noun", "colour", "cap", separator=" ")
    title = _where(rng.random(n) < 0.5, flipped, usual).str.replace_all(r"\s+", " ")
    bad = rng.random(n)
    return frame.select(
        _where(bad < 0.002, _padded("L", product * 4), _padded("L", np.arange(n))).alias(
            "listing_id"
        ),  # ~0.2% reuse their product's first id: duplicate_listing_id
        _where((bad >= 0.002) & (bad < 0.003), pl.lit("  "), title.str.strip_chars()).alias(
            "title"
        ),  # ~0.1% blank: empty_title
        "brand",
        pl.Series("seller_id", rng.integers(0, 5000, n)).cast(pl.String),
        pl.Series("price", np.round(rng.uniform(5, 2000, n), 2)),
        pl.Series("true_product_id", product).cast(pl.String),
    )


def _clicks(n: int, n_listings: int, rng: np.random.Generator) -> pl.DataFrame:
    """n click rows: Pareto listing popularity, queries typed 4 ways from the product."""
    listing = np.minimum((rng.pareto(1.1, n) * n_listings / 50).astype(np.int64), n_listings - 1)
    product = listing // 4
    frame = pl.DataFrame(
        {
            "brand": _pick(BRANDS, product % len(BRANDS)),
            "noun": _pick(NOUNS, (product // len(BRANDS)) % len(NOUNS)),
            "model": pl.Series((product % 9973).astype(np.int64)).cast(pl.String),
        }
    )
    code = pl.concat_str(pl.col("brand").str.slice(0, 2), pl.col("model"))
    style = rng.integers(0, 4, n)
    query = _where(
        style == 0,
        pl.concat_str("brand", "noun", separator=" ").str.to_lowercase(),
        _where(
            style == 1,
            pl.concat_str("noun", code, separator=" "),
            _where(
                style == 2,
                pl.concat_str("brand", code, separator="  ").str.to_uppercase(),
                code.str.to_lowercase(),
            ),
        ),
    )
    bad = rng.random(n)
    positions = pl.Series(rng.integers(1, 40, n)).cast(pl.String)
    return frame.select(
        _where(bad < 0.001, pl.lit(None, pl.String), query).alias("query"),
        _where((bad >= 0.001) & (bad < 0.006), pl.lit("L99999999x"), _padded("L", listing)).alias(
            "listing_id"
        ),  # ~0.5% unknown_listing
        _where((bad >= 0.006) & (bad < 0.008), pl.lit("top"), pl.lit(positions)).alias(
            "position"
        ),  # ~0.2% bad_value
        pl.format("s{}", pl.Series(rng.integers(0, n // 5, n)).cast(pl.String)).alias("session_id"),
    )


def generate_fast(data: Path, n_listings: int, n_clicks: int, seed: int) -> tuple[Path, Path]:
    """Write catalog and clicks parquet files into ``data`` (reused when already there)."""
    data.mkdir(parents=True, exist_ok=True)
    catalog, clicks = data / f"catalog-{n_listings}.parquet", data / f"clicks-{n_clicks}.parquet"
    rng = np.random.default_rng(seed)
    if not catalog.exists():
        _catalog(n_listings, rng).write_parquet(catalog, row_group_size=ROW_GROUP)
    if not clicks.exists():
        _clicks(n_clicks, n_listings, rng).write_parquet(clicks, row_group_size=ROW_GROUP)
    return clicks, catalog
