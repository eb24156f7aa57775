"""Ingest: read the click log and the catalog, quarantine bad rows with a reason, normalise text,
and aggregate repeated clicks.

Every input row ends in exactly one place: an output row, a quarantine row with a stable reason
code, or (clicks only) merged into another row of the same (normalised query, listing) pair,
counted as ``aggregated``. So ``rows_in == rows_out + sum(dropped_by_reason)`` holds per input and
in total. Outputs are sorted on content only, so the same rows in any file order, row order or
format give byte-identical parquet.

The click log is read, validated and aggregated in `pairsieve.ingest.clicks` (streamed in batches).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve.config import IngestConfig, PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult
from pairsieve.core.memory import check_ingest_budget
from pairsieve.errors import PairsieveError
from pairsieve.schemas import (
    BRAND,
    CATALOG_REQUIRED,
    CATEGORY,
    CLICKS_FILE,
    CLICKS_REQUIRED,
    DESCRIPTION,
    LISTING_ID,
    LISTINGS_FILE,
    PRICE,
    QUARANTINE_FILE,
    RAW,
    REASON,
    ROW_NUMBER,
    SELLER_ID,
    SOURCE_FILE,
    TABLE,
    TITLE,
    TITLE_NORM,
)
from pairsieve.text.attributes import normalize_expr

log = logging.getLogger(__name__)

# --- stable reason codes (quarantine.parquet `reason`, stage.json `dropped_by_reason`) ----------
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
_CONTROL = r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"
# What a lossy decode leaves where bytes did not decode: the mark of a wrong csv_encoding.
_REPLACEMENT = "\ufffd"
# Working columns carry this prefix, so no input column (even one named "_id") is mistaken for one.
_INTERNAL = "__pairsieve_"
_KEY = f"{_INTERNAL}listing_key"  # listing id with surrounding whitespace removed: the join key
_ORDER = (SOURCE_FILE, ROW_NUMBER)
CATALOG_OPTIONAL = (DESCRIPTION, BRAND, SELLER_ID, PRICE, CATEGORY)


def _blank(column: str) -> pl.Expr:
    """NULL, empty or whitespace-only."""
    return pl.col(column).is_null() | (pl.col(column).str.strip_chars() == "")


def _text_columns(schema: pl.Schema) -> list[str]:
    return [name for name, dtype in schema.items() if dtype == pl.String]


def _raw_columns(schema: pl.Schema) -> list[str]:
    return [n for n in schema.names() if n not in _ORDER and not n.startswith(_INTERNAL)]


def _first_reason(checks: list[tuple[str, pl.Expr]]) -> pl.Expr:
    """The first failing check's reason code (checks in priority order), else null."""
    return pl.coalesce(
        [pl.when(cond.fill_null(False)).then(pl.lit(reason)) for reason, cond in checks]
    ).alias(REASON)


def _bad_encoding(schema: pl.Schema) -> pl.Expr:
    return pl.any_horizontal(
        [pl.col(c).str.contains(_REPLACEMENT, literal=True) for c in _text_columns(schema)]
    )


def _catalog_checks(cfg: IngestConfig, schema: pl.Schema) -> list[tuple[str, pl.Expr]]:
    return [
        (MISSING_LISTING_ID, _blank(LISTING_ID)),
        (EMPTY_TITLE, _blank(TITLE)),
        (BAD_ENCODING, _bad_encoding(schema)),
        (CONTROL_CHARACTERS, pl.col(TITLE).str.contains(_CONTROL)),
        (EMPTY_TITLE, pl.col(TITLE_NORM) == ""),
        (TITLE_TOO_LONG, pl.col(TITLE).str.len_chars() > cfg.max_title_chars),
    ]


def _mark_duplicates(frame: pl.DataFrame) -> pl.DataFrame:
    """Quarantine all but the first valid row of each listing id, first by (file, row)."""
    frame = frame.sort(list(_ORDER))
    valid_key = pl.when(pl.col(REASON).is_null()).then(pl.col(_KEY))
    duplicate = pl.col(REASON).is_null() & ~valid_key.is_first_distinct()
    return frame.with_columns(
        pl.when(duplicate)
        .then(pl.lit(DUPLICATE_LISTING_ID))
        .otherwise(pl.col(REASON))
        .alias(REASON)
    )


def _ordered_columns(names: list[str], leading: tuple[str, ...]) -> list[str]:
    """Contract columns first in a fixed order, then extra columns by name (not file order)."""
    front = [c for c in leading if c in names]
    rest = [c for c in names if c not in (*front, *_ORDER, REASON) and not c.startswith(_INTERNAL)]
    return front + sorted(rest)


def _reader(cfg: IngestConfig, table: str) -> io.TableReader:
    required, rename = (
        (CATALOG_REQUIRED, cfg.catalog_columns)
        if table == CATALOG_TABLE
        else (CLICKS_REQUIRED, cfg.clicks_columns)
    )
    return io.TableReader(required, dict(rename), cfg.csv_encoding, cfg.csv_separator)


def _collect(reader: io.TableReader, frame: pl.LazyFrame, files: list[str]) -> pl.DataFrame:
    data = reader.collect(frame, files)
    if data.height == 0:
        raise PairsieveError("empty_input", "input has no data rows", file=", ".join(files))
    return data


def validate_catalog(
    cfg: IngestConfig, spec: str | list[str]
) -> tuple[pl.DataFrame, pl.DataFrame, list[str]]:
    """Read and validate the catalog: (listings, quarantined rows with ``reason``, files read).

    Raises:
        PairsieveError: file-level problems (see `io.TableReader.scan`), ``empty_input``.
    """
    reader = _reader(cfg, CATALOG_TABLE)
    frame, files = reader.scan(spec)
    schema = frame.collect_schema()
    if cfg.truth_column and cfg.truth_column not in schema:
        log.warning("catalog has no truth column %r (ingest.truth_column)", cfg.truth_column)
    frame = frame.with_columns(
        pl.col(LISTING_ID).str.strip_chars().alias(_KEY),
        normalize_expr(pl.col(TITLE)).alias(TITLE_NORM),
    ).with_columns(_first_reason(_catalog_checks(cfg, schema)))
    data = _mark_duplicates(_collect(reader, frame, files))
    leading = (LISTING_ID, TITLE, TITLE_NORM, *CATALOG_OPTIONAL)
    listings = (
        data.filter(pl.col(REASON).is_null())
        .with_columns(pl.col(_KEY).alias(LISTING_ID))
        .select(_ordered_columns(data.columns, leading))
        .sort(LISTING_ID)
    )
    rejected = data.filter(pl.col(REASON).is_not_null())
    return listings, _quarantine_rows(rejected, _raw_columns(schema), CATALOG_TABLE), files


def _quarantine_rows(rejected: pl.DataFrame, raw_columns: list[str], table: str) -> pl.DataFrame:
    raw = pl.struct(raw_columns).struct.json_encode() if raw_columns else pl.lit("{}")
    return rejected.select(
        pl.lit(table).alias(TABLE),
        pl.col(SOURCE_FILE).cast(pl.String),
        pl.col(ROW_NUMBER).cast(pl.Int64),
        pl.col(REASON),
        raw.alias(RAW),
    )


@dataclass(frozen=True)
class TableAccounting:
    """Row accounting of one input: ``rows_in == rows_out + sum(dropped_by_reason)``."""

    files: list[str]
    rows_in: int
    rows_out: int
    dropped_by_reason: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "dropped_by_reason": dict(sorted(self.dropped_by_reason.items()))}


def _reason_counts(quarantine: pl.DataFrame) -> dict[str, int]:
    counts = quarantine.group_by(REASON).len()
    return dict(zip(counts[REASON].to_list(), counts["len"].to_list(), strict=True))


def _log_table(table: str, acc: TableAccounting, encoding: str) -> None:
    detail = ", ".join(f"{k}={v}" for k, v in sorted(acc.dropped_by_reason.items())) or "none"
    log.info(
        "%s: %d rows in from %d file(s), %d kept, dropped: %s",
        table,
        acc.rows_in,
        len(acc.files),
        acc.rows_out,
        detail,
    )
    if acc.dropped_by_reason.get(BAD_ENCODING):
        log.warning(
            "%s: %d rows hold undecodable bytes; if the CSV files are not %s, set "
            "ingest.csv_encoding (e.g. latin-1)",
            table,
            acc.dropped_by_reason[BAD_ENCODING],
            encoding,
        )


def input_fingerprint(clicks: str | list[str], catalog: str | list[str]) -> str:
    """Content hash of every resolved input file, independent of listing order.

    Each file contributes its name and bytes (like `io.fingerprint`), grouped by role so that
    swapping clicks and catalog changes the hash.

    Raises:
        PairsieveError: ``missing_file`` when an input matches nothing.
    """
    parts = []
    for role, spec in ((CLICKS_TABLE, clicks), (CATALOG_TABLE, catalog)):
        digests = sorted(
            f"{path.rsplit('/', 1)[-1]}:{io.content_digest(path)}"
            for path in io.resolve_inputs(spec)
        )
        parts.append(f"{role}={','.join(digests)}")
    return io.sha256_text("|".join(parts))


def run(
    cfg: PairsieveConfig, clicks: str | list[str], catalog: str | list[str], out_dir: Path
) -> StageResult:
    """Validate both inputs and write clicks.parquet, listings.parquet and quarantine.parquet.

    Nothing is written unless both inputs pass the file-level checks.

    Raises:
        PairsieveError: ``missing_file``, ``unreadable_file``, ``missing_column``, ``empty_input``
            naming the file (and column); ``memory_budget`` before reading anything.
    """
    # Imported here: ingest_clicks builds on this module's reason codes and helpers.
    from pairsieve.ingest.clicks import aggregate_clicks, validate_clicks

    check_ingest_budget(cfg, clicks, catalog)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    listings, catalog_bad, catalog_files = validate_catalog(cfg.ingest, catalog)
    timings["catalog_s"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    rows = validate_clicks(cfg.ingest, clicks, listings[LISTING_ID])
    pairs = aggregate_clicks(rows)
    timings["clicks_s"] = round(time.perf_counter() - started, 3)

    catalog_acc = TableAccounting(
        catalog_files,
        listings.height + catalog_bad.height,
        listings.height,
        _reason_counts(catalog_bad),
    )
    n_valid = rows.valid_rows
    merged = {AGGREGATED: n_valid - pairs.height} if n_valid > pairs.height else {}
    clicks_acc = TableAccounting(
        rows.files,
        n_valid + rows.quarantine.height,
        pairs.height,
        {**_reason_counts(rows.quarantine), **merged},
    )
    _log_table(CATALOG_TABLE, catalog_acc, cfg.ingest.csv_encoding)
    _log_table(CLICKS_TABLE, clicks_acc, cfg.ingest.csv_encoding)

    started = time.perf_counter()
    quarantine = pl.concat([catalog_bad, rows.quarantine]).sort(TABLE, SOURCE_FILE, ROW_NUMBER)
    outputs = {}
    for name, frame in (
        (CLICKS_FILE, pairs),
        (LISTINGS_FILE, listings),
        (QUARANTINE_FILE, quarantine),
    ):
        io.write_parquet(frame.rechunk(), Path(out_dir) / name)
        outputs[name.removesuffix(".parquet")] = name
    timings["write_s"] = round(time.perf_counter() - started, 3)

    dropped = Counter(catalog_acc.dropped_by_reason) + Counter(clicks_acc.dropped_by_reason)
    return StageResult(
        stage="ingest",
        rows_in=catalog_acc.rows_in + clicks_acc.rows_in,
        rows_out=catalog_acc.rows_out + clicks_acc.rows_out,
        dropped_by_reason=dict(sorted(dropped.items())),
        timings=timings,
        outputs=outputs,
        details={CLICKS_TABLE: clicks_acc.to_json(), CATALOG_TABLE: catalog_acc.to_json()},
    )
