"""Ingest's click-log half: read, validate and aggregate the click log.

It is a module of its own because the click log is the input that outgrows memory: it is
streamed BATCH_ROWS rows at a time and, across batches, only the merged rows of each distinct raw
(query, listing) pair, the query spellings and the quarantined rows are kept, so memory grows with
distinct pairs, not with raw rows. Reason codes and the checks shared with the catalog are
`pairsieve.ingest.rules`; the stage (accounting, `run`) is `pairsieve.ingest.stage`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from pairsieve.config import IngestConfig
from pairsieve.core import io
from pairsieve.core.hashing import hex_digest
from pairsieve.errors import PairsieveError
from pairsieve.ingest import rules
from pairsieve.schemas import (
    CLICK_ROWS,
    CLICKS,
    LISTING_ID,
    POSITION,
    QUERY,
    QUERY_ID,
    QUERY_NORM,
    REASON,
    SESSION_ID,
    TS,
    WEIGHT,
)
from pairsieve.text.attributes import normalize_expr

# Click counts are summed in integer micro-units: exact and independent of row order, where a
# float sum's last bits depend on the order the engine adds partial sums in.
_MICRO = 1_000_000
# Larger clicks/weight/position values are logging faults (bad_value); the bound keeps a value in
# micro-units, and the sum of millions of them per pair, inside int64.
_MAX_NUMBER = 1e6
_TYPED = f"{rules.INTERNAL}typed_"  # prefix of the parsed copies of clicks/weight/position/ts
_TS_FORMATS = (
    "%Y-%m-%dT%H:%M:%S%.f%z",
    "%Y-%m-%d %H:%M:%S%.f%z",
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y-%m-%d",
)
CLICKS_OPTIONAL = (TS, SESSION_ID, POSITION)


def _timestamp(text: pl.Expr) -> pl.Expr:
    """ISO-8601-like text ("T" or space, optional fraction, offset, "Z" or "UTC") as UTC
    microseconds; naive times are taken as UTC."""
    text = text.str.strip_chars().str.replace(r"(?i)\s*(utc|z)$", "+00:00")
    return pl.coalesce(
        [
            text.str.to_datetime(f, time_unit="us", time_zone="UTC", strict=False)
            for f in _TS_FORMATS
        ]
    )


def _to_utc(value: pl.Expr, dtype: pl.DataType) -> pl.Expr:
    """A typed date or timestamp as UTC microseconds (naive times are taken as UTC)."""
    if not isinstance(dtype, pl.Datetime):
        return value.cast(pl.Datetime("us")).dt.replace_time_zone("UTC")
    value = value.dt.cast_time_unit("us")
    if dtype.time_zone is None:
        return value.dt.replace_time_zone("UTC")
    return value.dt.convert_time_zone("UTC")


def _parse_inferred(raw: pl.Series, anchor: str | None) -> tuple[pl.Series, str | None]:
    """Parse ``raw`` with the format polars infers, as if the whole log were one series.

    polars infers a format family from the first value that matches one (the ``anchor``) and
    tries only that family. The log is read in batches, so later batches are parsed with the
    anchor of the log prepended: the same values parse as they did when the log was one frame.
    Returns the parsed batch and the anchor (None until a value has parsed).
    """
    options = {"time_unit": "us", "time_zone": "UTC", "strict": False}
    if anchor is not None:
        return pl.concat([pl.Series([anchor]), raw]).str.to_datetime(**options).slice(1), anchor
    parsed = raw.str.to_datetime(**options)
    for value in raw.filter(parsed.is_not_null()):
        if pl.Series([value]).str.to_datetime(**options).is_not_null().all():
            return parsed, value
    return parsed, None


def _check_timestamps(data: pl.DataFrame, anchor: str | None) -> tuple[pl.DataFrame, str | None]:
    """Parse ``ts`` into ``_typed_ts``; a given ts that does not parse is a ``bad_value``.

    Parsing, rather than keeping text, makes a parquet timestamp and its CSV rendering the same
    value. polars infers one format from the first value (2.4 CPU-s for 5M rows); only rows that
    miss it try each accepted format (13.8 CPU-s if every row did). Returns the anchor of the
    inferred format for the next batch (see `_parse_inferred`).
    """
    if data.schema[TS].is_temporal():  # typed in the file: only the zone and unit to align
        return data.with_columns(_to_utc(pl.col(TS), data.schema[TS]).alias(_TYPED + TS)), anchor
    raw = data[TS].str.strip_chars()
    parsed, anchor = _parse_inferred(raw, anchor)
    given = raw.is_not_null() & (raw != "")
    missed = (parsed.is_null() & given).arg_true()
    if missed.len():
        retry = raw.gather(missed).to_frame().select(_timestamp(pl.col(TS))).to_series()
        parsed = parsed.scatter(missed, retry)
    bad = pl.col(REASON).is_null() & pl.Series(given & parsed.is_null())
    checked = data.with_columns(
        parsed.alias(_TYPED + TS),
        pl.when(bad).then(pl.lit(rules.BAD_VALUE)).otherwise(pl.col(REASON)).alias(REASON),
    )
    return checked, anchor


def _parse_typed(schema: pl.Schema) -> list[pl.Expr]:
    """Parsed copies (``_typed_<name>``) of the numeric optional click columns present."""
    return [
        pl.col(name).str.strip_chars().cast(pl.Float64, strict=False).alias(_TYPED + name)
        for name in (CLICKS, WEIGHT, POSITION)
        if name in schema
    ]


def _bad_value(schema: pl.Schema) -> pl.Expr:
    """A numeric column given but unusable: counts must be finite and >= 0; position, if
    given, a whole number >= 0. (``ts`` is checked by `_check_timestamps`.)"""
    bad = []
    for name in (CLICKS, WEIGHT, POSITION):
        if name not in schema:
            continue
        value = pl.col(_TYPED + name)
        ok = value.is_finite() & (value >= 0) & (value <= _MAX_NUMBER)
        if name == POSITION:
            ok = rules.blank(name) | (ok & (value == value.floor()))
        bad.append(~ok.fill_null(False))
    return pl.any_horizontal(bad) if bad else pl.lit(False)


def _typed_values(columns: list[str]) -> list[pl.Expr]:
    """The parsed values that replace the text of valid rows: counts in integer micro-units."""
    out = []
    for name in (CLICKS, WEIGHT, POSITION, TS):
        if _TYPED + name not in columns:
            continue
        value = pl.col(_TYPED + name)
        if name in (CLICKS, WEIGHT):
            value = (value * _MICRO).round().cast(pl.Int64)
        elif name == POSITION:
            value = value.cast(pl.Int64)
        out.append(value.alias(name))
    return out


def _clicks_checks(cfg: IngestConfig, schema: pl.Schema) -> list[tuple[str, pl.Expr]]:
    return [
        (rules.MISSING_QUERY, rules.blank(QUERY)),
        (rules.MISSING_LISTING_ID, rules.blank(LISTING_ID)),
        (rules.BAD_ENCODING, rules.bad_encoding(schema)),
        (rules.CONTROL_CHARACTERS, pl.col(QUERY).str.contains(rules.CONTROL)),
        (rules.QUERY_TOO_LONG, pl.col(QUERY).str.len_chars() > cfg.max_query_chars),
        (rules.BAD_VALUE, _bad_value(schema)),
    ]


# The click log is read and validated BATCH_ROWS rows at a time (one slice of the lazy scan
# each), so ingest's memory is bounded by a batch plus what it keeps (the catalog, one row per
# distinct raw (query, listing) pair, the query spellings, the quarantined rows), not by the
# number of click rows: against one catalog, 5M rows use 1.33x the working memory of 1M, where
# collecting the log used 3.7x (benchmarks/memory.py). A parquet slice reads only its row
# groups; a CSV slice skips the lines before it (0.11 CPU-s to reach row 4.75M of 5M). 500k-row
# batches saved 5% CPU and cost 60 MB.
BATCH_ROWS = 250_000


def _batches(
    reader: io.TableReader, frame: pl.LazyFrame, files: list[str]
) -> Iterator[pl.DataFrame]:
    """The rows of ``frame`` in order, BATCH_ROWS at a time.

    Raises:
        PairsieveError: ``unreadable_file`` naming the file (see `io.TableReader.collect`),
            ``empty_input`` when there are no rows at all.
    """
    offset = 0
    while True:
        batch = reader.collect(frame.slice(offset, BATCH_ROWS), files)
        if batch.height == 0 and offset == 0:
            raise PairsieveError("empty_input", "input has no data rows", file=", ".join(files))
        if batch.height:
            yield batch
        if batch.height < BATCH_ROWS:
            return
        offset += batch.height


def _compact(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with its text in buffers of its own. polars text columns are views into shared
    buffers, so a few groups or filtered rows kept from a batch keep the whole batch's text
    alive (20 batches of 200k strings, 4k of them kept: 322 MB resident against 110 MB after
    this copy). Kept across batches, only what is kept may stay."""
    text = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    return frame.with_columns(pl.concat_str(pl.col(name), pl.lit("")) for name in text)


def _group_spellings(valid: pl.LazyFrame, fold: bool) -> pl.DataFrame:
    """Valid rows (or, with ``fold``, earlier groups) grouped by raw (query, listing):
    ``click_rows``, summed counts (integer micro-units: exact in any order), smallest others."""
    names = valid.collect_schema().names()
    counts = [c for c in (CLICKS, WEIGHT) if c in names]
    keys = (QUERY, rules.KEY, LISTING_ID, CLICK_ROWS)
    others = [c for c in names if c not in (*counts, *keys)]
    rows = pl.col(CLICK_ROWS).sum() if fold else pl.len().cast(pl.Int64).alias(CLICK_ROWS)
    grouped = valid.group_by(QUERY, rules.KEY).agg(
        rows, *[pl.col(c).sum() for c in counts], *[pl.col(c).min() for c in others]
    )
    return _compact(grouped.collect(engine="streaming"))


class _ClickLog:
    """What ingest keeps of the click log while it streams through it: per raw (query, listing)
    pair the merged valid rows (``groups``), the normalised form of each valid spelling
    (``spellings``), the quarantined rows and the count of valid rows."""

    def __init__(self, schema: pl.Schema, files: list[str]) -> None:
        self.schema, self.files = schema, files
        self.anchor: str | None = None  # see _parse_inferred
        self.spellings: pl.DataFrame | None = None  # query -> query_norm, "" included
        self.groups: list[pl.DataFrame] = []  # per raw (query, listing), see _fold
        self.quarantine: list[pl.DataFrame] = []
        self.valid_rows = 0

    def add(self, data: pl.DataFrame) -> None:
        """Finish the checks of one batch (``reason`` of the per-row checks set) and keep it.

        Two checks run after the per-row ones, on rows that passed them: a ``ts`` that does
        not parse (``bad_value``) and a query that normalises to nothing (``missing_query``).
        """
        if TS in self.schema:
            data, self.anchor = _check_timestamps(data, self.anchor)
        batch = data.filter(pl.col(REASON).is_null()).select(pl.col(QUERY).unique())
        self._normalise(batch)
        empty = self.spellings.filter(pl.col(QUERY_NORM) == "")[QUERY]
        if empty.len():
            unusable = pl.col(REASON).is_null() & pl.col(QUERY).is_in(empty.implode())
            data = data.with_columns(
                pl.when(unusable)
                .then(pl.lit(rules.MISSING_QUERY))
                .otherwise(pl.col(REASON))
                .alias(REASON)
            )
        valid = data.filter(pl.col(REASON).is_null()).with_columns(_typed_values(data.columns))
        rejected = data.filter(pl.col(REASON).is_not_null())
        rejected = rules.quarantine_rows(
            rejected, rules.raw_columns(self.schema), rules.CLICKS_TABLE
        )
        self.quarantine.append(_compact(rejected))
        temporary = [c for c in valid.columns if c.startswith(_TYPED)]
        self.valid_rows += valid.height
        valid = valid.lazy().drop(REASON, *rules.ORDER, *temporary)
        self.groups.append(_group_spellings(valid, fold=False))
        if sum(g.height for g in self.groups[1:]) > self.groups[0].height:
            self._fold()

    def _fold(self) -> None:
        """Merge the groups of the batches so far into one frame, once the unmerged ones
        outgrow the merged one: each row is merged O(log batches) times, not once a batch."""
        if len(self.groups) > 1:
            # A lazy concat: the engine streams the groups instead of copying them first.
            folded = pl.concat([g.lazy() for g in self.groups])
            self.groups = [_group_spellings(folded, fold=True)]

    def _normalise(self, batch: pl.DataFrame) -> None:
        """Normalise each raw spelling once, not per row: logs repeat popular queries (5M
        benchmark rows hold 0.3M spellings), and normalising every row took 15 of 55 seconds."""
        new = batch if self.spellings is None else batch.join(self.spellings, on=QUERY, how="anti")
        new = _compact(new.with_columns(normalize_expr(pl.col(QUERY)).alias(QUERY_NORM)))
        self.spellings = new if self.spellings is None else pl.concat([self.spellings, new])

    def rows(self) -> ClickRows:
        self._fold()
        quarantine = pl.concat(self.quarantine)
        norms = self.spellings.filter(pl.col(QUERY_NORM) != "")
        return ClickRows(self.groups[0], norms, quarantine, self.files, self.valid_rows)


@dataclass(frozen=True)
class ClickRows:
    """The validated click log: ``per_spelling`` (valid rows merged per raw query and listing),
    ``norms`` (each distinct raw ``query`` of them -> ``query_norm``), ``quarantine`` rows, the
    ``files`` read and the number of ``valid_rows``."""

    per_spelling: pl.DataFrame
    norms: pl.DataFrame
    quarantine: pl.DataFrame
    files: list[str]
    valid_rows: int


def validate_clicks(cfg: IngestConfig, spec: str | list[str], listing_ids: pl.Series) -> ClickRows:
    """Read and validate the click log against the validated catalog's ``listing_ids``, one
    batch of rows at a time (see BATCH_ROWS).

    Raises:
        PairsieveError: file-level problems (see `io.TableReader.scan`), ``empty_input``.
    """
    reader = rules.reader_for(cfg, rules.CLICKS_TABLE)
    frame, files = reader.scan(spec)
    schema = frame.collect_schema()
    # A cast to an Enum of the catalog's ids hashes them once; `is_in` rebuilt its set for every
    # batch (1.8 of 3.2 CPU-s for 1M rows against 1M listings). Unknown ids cast to null.
    known = pl.col(rules.KEY).cast(pl.Enum(listing_ids), strict=False).is_not_null()
    frame = frame.with_columns(
        pl.col(LISTING_ID).str.strip_chars().alias(rules.KEY), *_parse_typed(schema)
    ).with_columns(
        rules.first_reason([*_clicks_checks(cfg, schema), (rules.UNKNOWN_LISTING, ~known)])
    )
    log_rows = _ClickLog(schema, files)
    for batch in _batches(reader, frame, files):
        log_rows.add(batch)
    return log_rows.rows()


def _canonical_queries(per_spelling: pl.DataFrame, norms: pl.DataFrame) -> pl.DataFrame:
    """Per normalised query: the most frequent raw spelling (ties: smallest string), its id."""
    forms = per_spelling.group_by(QUERY).agg(pl.col(CLICK_ROWS).sum()).join(norms, on=QUERY)
    top = pl.col(CLICK_ROWS) == pl.col(CLICK_ROWS).max().over(QUERY_NORM)
    canonical = forms.filter(top).group_by(QUERY_NORM).agg(pl.col(QUERY).min())
    ids = [hex_digest(text) for text in canonical[QUERY_NORM].to_list()]
    return canonical.with_columns(pl.Series(QUERY_ID, ids, dtype=pl.String))


def aggregate_clicks(rows: ClickRows) -> pl.DataFrame:
    """One row per (query_norm, listing_id): ``clicks`` = summed clicks/weight (else the row
    count), ``click_rows`` = rows merged; other columns keep their smallest value (earliest
    ``ts``, best ``position``) so the result does not depend on row order.

    Rows are first grouped by raw (query, listing) while the log streams (`_ClickLog`), then by
    normalised query: 3.4 + 1.3 s on the 5M-row benchmark against 1.1 + 6.9 s for joining the
    normalised query onto every row.
    """
    per_spelling = rows.per_spelling
    counts = [c for c in (CLICKS, WEIGHT) if c in per_spelling.columns]
    others = [c for c in per_spelling.columns if c not in (*counts, QUERY, rules.KEY, CLICK_ROWS)]
    grouped = (
        per_spelling.lazy()
        .join(rows.norms.lazy(), on=QUERY)
        .group_by(QUERY_NORM, rules.KEY)
        .agg(
            pl.col(CLICK_ROWS).sum(),
            *[(pl.col(c).sum() / _MICRO).alias(c) for c in counts],
            *[pl.col(c).min() for c in others],
        )
        .collect(engine="streaming")
    )
    if not counts:
        grouped = grouped.with_columns(pl.col(CLICK_ROWS).cast(pl.Float64).alias(CLICKS))
    elif counts == [WEIGHT]:
        grouped = grouped.rename({WEIGHT: CLICKS})
    canonical = _canonical_queries(per_spelling, rows.norms)
    merged = grouped.rename({rules.KEY: LISTING_ID}).join(canonical, on=QUERY_NORM, how="left")
    leading = (QUERY_ID, QUERY, QUERY_NORM, LISTING_ID, CLICKS, CLICK_ROWS, *CLICKS_OPTIONAL)
    return merged.select(rules.ordered_columns(merged.columns, leading)).sort(
        QUERY_ID, LISTING_ID, QUERY_NORM
    )
