"""Ingest: read the click log and the catalog, quarantine bad rows with a reason, normalise text,
and aggregate repeated clicks.

Every input row ends in exactly one place: an output row, a quarantine row with a stable reason
code, or (clicks only) merged into another row of the same (normalised query, listing) pair,
counted as ``aggregated``. So ``rows_in == rows_out + sum(dropped_by_reason)`` holds per input and
in total. Outputs are sorted on content only, so the same rows in any file order, row order or
format give byte-identical parquet.

The catalog is read and validated in `pairsieve.ingest.catalog`, the click log in
`pairsieve.ingest.clicks` (streamed in batches); the reason codes both use are in
`pairsieve.ingest.rules`.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult
from pairsieve.core.memory import check_ingest_budget
from pairsieve.ingest import rules
from pairsieve.ingest.catalog import validate_catalog
from pairsieve.ingest.clicks import ClickRows, aggregate_clicks, validate_clicks
from pairsieve.schemas import (
    CLICKS_FILE,
    LISTING_ID,
    LISTINGS_FILE,
    QUARANTINE_FILE,
    REASON,
    ROW_NUMBER,
    SOURCE_FILE,
    TABLE,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inputs:
    """What ingest reads: the click log and the catalog, each one file, a glob or a list of
    files (any format `pairsieve.core.io` reads)."""

    clicks: str | list[str]
    catalog: str | list[str]

    def fingerprint(self) -> str:
        """Content hash of every resolved input file, independent of listing order.

        Each file contributes its name and bytes (like `io.fingerprint`), grouped by role so that
        swapping clicks and catalog changes the hash.

        Raises:
            PairsieveError: ``missing_file`` when an input matches nothing.
        """
        parts = []
        for role, spec in ((rules.CLICKS_TABLE, self.clicks), (rules.CATALOG_TABLE, self.catalog)):
            digests = sorted(
                f"{path.rsplit('/', 1)[-1]}:{io.content_digest(path)}"
                for path in io.resolve_inputs(spec)
            )
            parts.append(f"{role}={','.join(digests)}")
        return io.sha256_text("|".join(parts))


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
    if acc.dropped_by_reason.get(rules.BAD_ENCODING):
        log.warning(
            "%s: %d rows hold undecodable bytes; if the CSV files are not %s, set "
            "ingest.csv_encoding (e.g. latin-1)",
            table,
            acc.dropped_by_reason[rules.BAD_ENCODING],
            encoding,
        )


def _accounting(
    listings: pl.DataFrame,
    catalog_bad: pl.DataFrame,
    catalog_files: list[str],
    rows: ClickRows,
    pairs: pl.DataFrame,
) -> tuple[TableAccounting, TableAccounting]:
    """Row accounting of the catalog and of the click log, where valid click rows of one
    (query, listing) pair merged into one row count as ``aggregated``."""
    catalog_acc = TableAccounting(
        catalog_files,
        listings.height + catalog_bad.height,
        listings.height,
        _reason_counts(catalog_bad),
    )
    n_valid = rows.valid_rows
    merged = {rules.AGGREGATED: n_valid - pairs.height} if n_valid > pairs.height else {}
    clicks_acc = TableAccounting(
        rows.files,
        n_valid + rows.quarantine.height,
        pairs.height,
        {**_reason_counts(rows.quarantine), **merged},
    )
    return catalog_acc, clicks_acc


def run(cfg: PairsieveConfig, inputs: Inputs, out_dir: Path) -> StageResult:
    """Validate both inputs and write clicks.parquet, listings.parquet and quarantine.parquet.

    Nothing is written unless both inputs pass the file-level checks.

    Raises:
        PairsieveError: ``missing_file``, ``unreadable_file``, ``missing_column``, ``empty_input``
            naming the file (and column); ``memory_budget`` before reading anything.
    """
    check_ingest_budget(cfg, inputs.clicks, inputs.catalog)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    listings, catalog_bad, catalog_files = validate_catalog(cfg.ingest, inputs.catalog)
    timings["catalog_s"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    rows = validate_clicks(cfg.ingest, inputs.clicks, listings[LISTING_ID])
    pairs = aggregate_clicks(rows)
    timings["clicks_s"] = round(time.perf_counter() - started, 3)

    catalog_acc, clicks_acc = _accounting(listings, catalog_bad, catalog_files, rows, pairs)
    _log_table(rules.CATALOG_TABLE, catalog_acc, cfg.ingest.csv_encoding)
    _log_table(rules.CLICKS_TABLE, clicks_acc, cfg.ingest.csv_encoding)

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
        details={
            rules.CLICKS_TABLE: clicks_acc.to_json(),
            rules.CATALOG_TABLE: catalog_acc.to_json(),
        },
    )
