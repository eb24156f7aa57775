"""A contrastive dataset built elsewhere, read into one shape: anchor, positive, negatives.

sentence-transformers' `mine_hard_negatives` writes `anchor`, `positive` and `negative` or
`negative_1` … `negative_k`; FlagEmbedding writes JSONL `query`, a `pos` list and a `neg` list
(one row per positive here). Either may be one file or a folder of files.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.audits.pairs import NEGATIVES
from pairsieve.errors import PairsieveError

_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".json")


def dataset_files(path: Path) -> list[Path]:
    """The data files of ``path``: itself, or the parquet/JSONL files of a folder (only
    ``train-*.parquet`` for a pairsieve shards folder, whose meta files are not training rows).

    Raises:
        PairsieveError: ``missing_file`` when nothing readable is there.
    """
    if path.is_dir():
        files = sorted(path.glob("train-*.parquet")) or sorted(
            f for f in path.iterdir() if f.suffix.lower() in _SUFFIXES
        )
    else:
        files = [path] if path.is_file() else []
    if not files:
        raise PairsieveError("missing_file", "no parquet/JSONL dataset found", file=str(path))
    return files


def read_file(path: Path) -> pl.DataFrame:
    """One data file as it is (parquet, or JSONL by any other supported suffix)."""
    if path.suffix.lower() == ".parquet":
        return pl.read_parquet(path)
    if path.suffix.lower() in _SUFFIXES:
        return pl.read_ndjson(path)
    raise PairsieveError("bad_format", "dataset must be parquet or JSONL", file=str(path))


def negative_columns(columns: list[str]) -> list[str]:
    """sentence-transformers' negative columns in order: `negative`, then `negative_1` …."""
    numbered = [c for c in columns if c.startswith("negative_") and c[9:].isdigit()]
    numbered.sort(key=lambda c: int(c[9:]))
    return (["negative"] if "negative" in columns else []) + numbered


def normalise_dataset(frame: pl.DataFrame, source: str, keep: tuple[str, ...] = ()) -> pl.DataFrame:
    """(anchor, positive, negatives: list[str]) from either supported layout, after the columns
    ``keep`` of ``frame`` (carried along, e.g. a row number).

    Raises:
        PairsieveError: ``missing_column`` naming the file and the absent column.
    """
    if S.ANCHOR in frame.columns:
        if S.POSITIVE not in frame.columns:
            raise PairsieveError(
                "missing_column", "no positive column", file=source, column=S.POSITIVE
            )
        negs = negative_columns(frame.columns)
        if not negs:
            raise PairsieveError(
                "missing_column",
                "no negative or negative_1 … columns",
                file=source,
                column="negative_1",
            )
        return frame.select(
            *keep,
            pl.col(S.ANCHOR).cast(pl.String),
            pl.col(S.POSITIVE).cast(pl.String),
            pl.concat_list([pl.col(c).cast(pl.String) for c in negs]).alias(NEGATIVES),
        )
    for column in ("query", "pos", "neg"):
        if column not in frame.columns:
            raise PairsieveError(
                "missing_column",
                "expected anchor/positive/negative_* (sentence-transformers) or query/pos/neg "
                "(FlagEmbedding) columns",
                file=source,
                column=column,
            )
    return (
        frame.select(
            *keep,
            pl.col("query").cast(pl.String).alias(S.ANCHOR),
            _as_list(frame, "pos").alias(S.POSITIVE),
            _as_list(frame, "neg").cast(pl.List(pl.String)).alias(NEGATIVES),
        )
        .explode(S.POSITIVE)
        .with_columns(pl.col(S.POSITIVE).cast(pl.String))
    )


def _as_list(frame: pl.DataFrame, column: str) -> pl.Expr:
    """A list column as is; a single text per row as a one-element list."""
    if isinstance(frame.schema[column], pl.List):
        return pl.col(column)
    return pl.concat_list(pl.col(column).cast(pl.String))


def read_dataset(path: Path) -> tuple[pl.DataFrame, dict[str, int]]:
    """All rows of the dataset in file order, and rows dropped per reason (missing texts)."""
    frames = [normalise_dataset(read_file(f), str(f)) for f in dataset_files(path)]
    data = pl.concat(frames).with_columns(pl.col(NEGATIVES).list.drop_nulls())
    missing = pl.col(S.ANCHOR).is_null() | pl.col(S.POSITIVE).is_null()
    dropped = {
        "missing_anchor_or_positive": int(data.select(missing.sum()).item()),
        "no_negatives": int(
            data.filter(~missing).select((pl.col(NEGATIVES).list.len() == 0).sum()).item()
        ),
    }
    kept = data.filter(~missing & (pl.col(NEGATIVES).list.len() > 0))
    return kept, dropped
