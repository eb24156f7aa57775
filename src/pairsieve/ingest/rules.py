"""Ingest's shared rules: the stable reason codes a quarantined row carries, the checks both
inputs run, and how a rejected row is written to quarantine.parquet.

The catalog (`pairsieve.ingest.catalog`) and the click log (`pairsieve.ingest.clicks`) are read
and validated by modules of their own; both build on these, so a reason code or a check means the
same thing on either input.
"""

from __future__ import annotations

import polars as pl

from pairsieve.config import IngestConfig
from pairsieve.core import io
from pairsieve.errors import PairsieveError
from pairsieve.schemas import (
    CATALOG_REQUIRED,
    CLICKS_REQUIRED,
    RAW,
    REASON,
    ROW_NUMBER,
    SOURCE_FILE,
    TABLE,
)

# Stable reason codes (quarantine.parquet `reason`, stage.json `dropped_by_reason`).
MISSING_LISTING_ID = "missing_listing_id"
EMPTY_TITLE = "empty_title"
DUPLICATE_LISTING_ID = "duplicate_listing_id"
TITLE_TOO_LONG = "title_too_long"
BAD_ENCODING = "bad_encoding"
CONTROL_CHARACTERS = "control_characters"
MISSING_QUERY = "missing_query"
QUERY_TOO_LONG = "query_too_long"
UNKNOWN_LISTING = "unknown_listing"
BAD_VALUE = "bad_value"
AGGREGATED = "aggregated"  # a valid click row merged into another row of the same pair

CATALOG_TABLE = "catalog"
CLICKS_TABLE = "clicks"

# C0 and C1 control characters except tab, newline and carriage return (which CSV line endings and
# multi-line descriptions legitimately carry).
CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
# What a lossy decode leaves where bytes did not decode: the mark of a wrong csv_encoding.
REPLACEMENT = "\ufffd"
# Working columns carry this prefix, so no input column (even one named "_id") is mistaken for one.
INTERNAL = "__pairsieve_"
KEY = f"{INTERNAL}listing_key"  # listing id with surrounding whitespace removed: the join key
ORDER = (SOURCE_FILE, ROW_NUMBER)


def blank(column: str) -> pl.Expr:
    """NULL, empty or whitespace-only."""
    return pl.col(column).is_null() | (pl.col(column).str.strip_chars() == "")


def text_columns(schema: pl.Schema) -> list[str]:
    return [name for name, dtype in schema.items() if dtype == pl.String]


def raw_columns(schema: pl.Schema) -> list[str]:
    return [n for n in schema.names() if n not in ORDER and not n.startswith(INTERNAL)]


def first_reason(checks: list[tuple[str, pl.Expr]]) -> pl.Expr:
    """The first failing check's reason code (checks in priority order), else null."""
    return pl.coalesce(
        [pl.when(cond.fill_null(False)).then(pl.lit(reason)) for reason, cond in checks]
    ).alias(REASON)


def bad_encoding(schema: pl.Schema) -> pl.Expr:
    return pl.any_horizontal(
        [pl.col(c).str.contains(REPLACEMENT, literal=True) for c in text_columns(schema)]
    )


def ordered_columns(names: list[str], leading: tuple[str, ...]) -> list[str]:
    """Contract columns first in a fixed order, then extra columns by name (not file order)."""
    front = [c for c in leading if c in names]
    rest = [c for c in names if c not in (*front, *ORDER, REASON) and not c.startswith(INTERNAL)]
    return front + sorted(rest)


def reader_for(cfg: IngestConfig, table: str) -> io.TableReader:
    required, rename = (
        (CATALOG_REQUIRED, cfg.catalog_columns)
        if table == CATALOG_TABLE
        else (CLICKS_REQUIRED, cfg.clicks_columns)
    )
    return io.TableReader(required, dict(rename), cfg.csv_encoding, cfg.csv_separator)


def collect_rows(reader: io.TableReader, frame: pl.LazyFrame, files: list[str]) -> pl.DataFrame:
    data = reader.collect(frame, files)
    if data.height == 0:
        raise PairsieveError("empty_input", "input has no data rows", file=", ".join(files))
    return data


def quarantine_rows(rejected: pl.DataFrame, raw_columns: list[str], table: str) -> pl.DataFrame:
    raw = pl.struct(raw_columns).struct.json_encode() if raw_columns else pl.lit("{}")
    return rejected.select(
        pl.lit(table).alias(TABLE),
        pl.col(SOURCE_FILE).cast(pl.String),
        pl.col(ROW_NUMBER).cast(pl.Int64),
        pl.col(REASON),
        raw.alias(RAW),
    )
