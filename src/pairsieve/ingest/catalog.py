"""Ingest's catalog half: read the listing catalog and validate it row by row.

`read_catalog` is the one way pairsieve reads a catalog (the build's ingest, `pairsieve cluster`
and the audit), so column renames, CSV encoding and separator mean the same everywhere.
"""

from __future__ import annotations

import logging

import polars as pl

from pairsieve.config import IngestConfig
from pairsieve.ingest import rules
from pairsieve.schemas import (
    BRAND,
    CATEGORY,
    DESCRIPTION,
    LISTING_ID,
    PRICE,
    REASON,
    SELLER_ID,
    TITLE,
    TITLE_NORM,
)
from pairsieve.text.attributes import normalize_expr

log = logging.getLogger(__name__)

CATALOG_OPTIONAL = (DESCRIPTION, BRAND, SELLER_ID, PRICE, CATEGORY)


def read_catalog(spec: str | list[str], cfg: IngestConfig) -> pl.DataFrame:
    """A catalog (parquet, CSV or JSONL; file, glob or folder) read as text columns, with the
    configured column renames, encoding and separator; not validated row by row.

    Raises:
        PairsieveError: ``missing_file`` / ``unreadable_file`` / ``missing_column`` (see
            `io.TableReader.scan`).
    """
    reader = rules.reader_for(cfg, rules.CATALOG_TABLE)
    frame, files = reader.scan(spec)
    return reader.collect(frame, files)


def catalog_checks(cfg: IngestConfig, schema: pl.Schema) -> list[tuple[str, pl.Expr]]:
    return [
        (rules.MISSING_LISTING_ID, rules.blank(LISTING_ID)),
        (rules.EMPTY_TITLE, rules.blank(TITLE)),
        (rules.BAD_ENCODING, rules.bad_encoding(schema)),
        (rules.CONTROL_CHARACTERS, pl.col(TITLE).str.contains(rules.CONTROL)),
        (rules.EMPTY_TITLE, pl.col(TITLE_NORM) == ""),
        (rules.TITLE_TOO_LONG, pl.col(TITLE).str.len_chars() > cfg.max_title_chars),
    ]


def _mark_duplicates(frame: pl.DataFrame) -> pl.DataFrame:
    """Quarantine all but the first valid row of each listing id, first by (file, row)."""
    frame = frame.sort(list(rules.ORDER))
    valid_key = pl.when(pl.col(REASON).is_null()).then(pl.col(rules.KEY))
    duplicate = pl.col(REASON).is_null() & ~valid_key.is_first_distinct()
    return frame.with_columns(
        pl.when(duplicate)
        .then(pl.lit(rules.DUPLICATE_LISTING_ID))
        .otherwise(pl.col(REASON))
        .alias(REASON)
    )


def validate_catalog(
    cfg: IngestConfig, spec: str | list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Read and validate the catalog: (listings, quarantined rows with ``reason``, files read).

    Raises:
        PairsieveError: file-level problems (see `io.TableReader.scan`), ``empty_input``.
    """
    reader = rules.reader_for(cfg, rules.CATALOG_TABLE)
    frame, files = reader.scan(spec)
    schema = frame.collect_schema()
    if cfg.truth_column and cfg.truth_column not in schema:
        log.warning("catalog has no truth column %r (ingest.truth_column)", cfg.truth_column)
    frame = frame.with_columns(
        pl.col(LISTING_ID).str.strip_chars().alias(rules.KEY),
        normalize_expr(pl.col(TITLE)).alias(TITLE_NORM),
    ).with_columns(rules.first_reason(catalog_checks(cfg, schema)))
    data = _mark_duplicates(rules.collect_rows(reader, frame, files))
    leading = (LISTING_ID, TITLE, TITLE_NORM, *CATALOG_OPTIONAL)
    listings = (
        data.filter(pl.col(REASON).is_null())
        .with_columns(pl.col(rules.KEY).alias(LISTING_ID))
        .select(rules.ordered_columns(data.columns, leading))
        .sort(LISTING_ID)
    )
    rejected = data.filter(pl.col(REASON).is_not_null())
    return (
        listings,
        rules.quarantine_rows(rejected, rules.raw_columns(schema), rules.CATALOG_TABLE),
        files,
    )
