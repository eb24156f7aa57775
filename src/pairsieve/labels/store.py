"""The label file: one JSON object per line, a pair to judge and, once answered, its label.

Fields: ``pair_id``, ``listing_a``, ``listing_b`` (where known), ``text_a``, ``text_b``,
``p_same``, ``stratum``, ``weight`` (the inverse inclusion probability), ``source``
(``candidate``, ``negative``: a negative a build kept above the margin, or ``audit``) and
``label``: null until answered, then true (same product) or false. A person edits it through
the labelling page or by hand, so reading it checks every line and names the line of anything
wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from pairsieve.core.io import atomic_path
from pairsieve.errors import PairsieveError

FIELDS = (
    "pair_id",
    "listing_a",
    "listing_b",
    "text_a",
    "text_b",
    "p_same",
    "stratum",
    "weight",
    "source",
    "label",
)
SOURCES = ("candidate", "negative", "audit")
SCHEMA = {
    "pair_id": pl.String,
    "listing_a": pl.String,
    "listing_b": pl.String,
    "text_a": pl.String,
    "text_b": pl.String,
    "p_same": pl.Float64,
    "stratum": pl.Int64,
    "weight": pl.Float64,
    "source": pl.String,
    "label": pl.Boolean,
}


def write_labels(rows: pl.DataFrame, path: str | Path) -> Path:
    """Write ``rows`` (the `FIELDS` columns) as the label file, atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for row in rows.select(FIELDS).iter_rows(named=True):
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return Path(path)


def _check(row: object, path: Path, line: int) -> dict:
    def bad(message: str, column: str | None = None) -> PairsieveError:
        return PairsieveError("bad_labels", message, file=str(path), row=line, column=column)

    if not isinstance(row, dict):
        raise bad("a line must be one JSON object")
    if not isinstance(row.get("pair_id"), str) or not row["pair_id"]:
        raise bad("no pair_id", "pair_id")
    if row.get("label") not in (None, True, False):
        raise bad(f"label must be true, false or null, not {row['label']!r}", "label")
    if row.get("source", "candidate") not in SOURCES:
        raise bad(f"source must be one of {', '.join(SOURCES)}", "source")
    return {name: row.get(name) for name in FIELDS}


def read_labels(path: str | Path) -> pl.DataFrame:
    """Every line of a label file as a frame (`SCHEMA`), answered or not.

    Raises:
        PairsieveError: ``missing_file``, or ``bad_labels`` naming the line (1-based) of broken
        JSON, a missing ``pair_id``, a label that is not true/false/null, an unknown source, or
        a pair_id given twice.
    """
    path = Path(path)
    if not path.is_file():
        raise PairsieveError("missing_file", "no label file", file=str(path))
    rows, seen = [], {}
    with open(path, encoding="utf-8") as handle:
        for line, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                row = _check(json.loads(text), path, line)
            except json.JSONDecodeError as err:
                raise PairsieveError(
                    "bad_labels", f"not JSON ({err.msg})", file=str(path), row=line
                ) from None
            if row["pair_id"] in seen:
                raise PairsieveError(
                    "bad_labels",
                    f"pair_id {row['pair_id']} also on line {seen[row['pair_id']]}",
                    file=str(path),
                    row=line,
                    column="pair_id",
                )
            seen[row["pair_id"]] = line
            rows.append(row)
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


ANSWER_COLUMNS = ("pair_id", "label", "source", "listing_a", "listing_b")


def answered(paths: list[str | Path]) -> pl.DataFrame:
    """The answered labels of several files (`ANSWER_COLUMNS`); a pair answered in two files
    keeps the later file's answer."""
    frames = [read_labels(p).filter(pl.col("label").is_not_null()) for p in paths]
    if not frames:
        return pl.DataFrame(schema={k: SCHEMA[k] for k in ANSWER_COLUMNS})
    return (
        pl.concat(frames).unique("pair_id", keep="last", maintain_order=True).select(ANSWER_COLUMNS)
    )
