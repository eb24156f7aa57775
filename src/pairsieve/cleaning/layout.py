"""A dataset read so that it can be written back in its own layout.

`audits.dataset` reads every supported layout into one shape (anchor, positive, negatives) for
judging. A repaired dataset must come back as it came in: the same files, the same columns in
the same order, other columns untouched, sentence-transformers' `negative` / `negative_1` …
columns or FlagEmbedding's `neg` list refilled, and a `label` column when asked. So each file is
kept as read, and each normalised row carries the file and the row it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.audits.dataset import dataset_files, negative_columns, normalise_dataset, read_file
from pairsieve.audits.pairs import NEGATIVES
from pairsieve.core import io

SENTENCE_TRANSFORMERS = "sentence-transformers"
FLAGEMBEDDING = "flagembedding"
FILE, ROW = "_file", "_row"  # where a normalised row came from: file number, row in that file


@dataclass(frozen=True)
class DatasetFile:
    """One file as read, and where its negatives sit: sentence-transformers' negative columns
    (one text each) or FlagEmbedding's `neg` list."""

    path: Path
    frame: pl.DataFrame
    layout: str
    negative_columns: tuple[str, ...]

    @property
    def fixed_width(self) -> bool:
        """Whether every row must keep exactly as many negatives as it has columns."""
        return self.layout == SENTENCE_TRANSFORMERS


def read_files(path: Path) -> list[DatasetFile]:
    """The dataset's files, each as read, with its layout.

    Raises:
        PairsieveError: ``missing_file``, ``bad_format`` or ``missing_column``.
    """
    files = []
    for file in dataset_files(path):
        frame = read_file(file)
        normalise_dataset(frame.head(0), str(file))  # the layout's columns are there
        if S.ANCHOR in frame.columns:
            negatives = tuple(negative_columns(frame.columns))
            files.append(DatasetFile(file, frame, SENTENCE_TRANSFORMERS, negatives))
        else:
            files.append(DatasetFile(file, frame, FLAGEMBEDDING, ("neg",)))
    return files


def normalised_rows(files: list[DatasetFile]) -> pl.DataFrame:
    """(``_file``, ``_row``, anchor, positive, negatives) of every file in order: one row per
    positive (a FlagEmbedding row with several positives gives several), nulls kept, so every
    row of every file is accounted for by the caller."""
    frames = []
    for number, file in enumerate(files):
        rows = normalise_dataset(file.frame.with_row_index(ROW), str(file.path), keep=(ROW,))
        frames.append(rows.with_columns(pl.lit(number, pl.UInt32).alias(FILE)))
    data = pl.concat(frames).select(FILE, ROW, S.ANCHOR, S.POSITIVE, NEGATIVES)
    return data.with_columns(pl.col(NEGATIVES).list.drop_nulls())


def write_back(
    file: DatasetFile, negatives: pl.DataFrame, labels: pl.DataFrame | None, out: Path
) -> Path:
    """``file`` with its negatives replaced and its dropped rows removed, as ``out`` (parquet or
    JSONL by the file's own suffix).

    ``negatives``: (``_row``, negatives) for every row kept, in the file's order; ``labels``:
    (``_row``, label) or None.
    """
    frame = file.frame.with_row_index(ROW)
    frame = frame.join(negatives, on=ROW, how="semi", maintain_order="left")
    kept = negatives.sort(ROW)[NEGATIVES]
    if file.fixed_width:
        refilled = [
            pl.Series(column, [row[i] for row in kept.to_list()], dtype=pl.String)
            for i, column in enumerate(file.negative_columns)
        ]
    else:
        refilled = [kept.alias("neg")]
    frame = frame.with_columns(refilled)
    if labels is not None:
        frame = frame.with_columns(labels.sort(ROW)[S.LABEL].alias(S.LABEL))
    frame = frame.drop(ROW)
    if file.path.suffix.lower() == ".parquet":
        io.write_parquet(frame, out)
    else:
        with io.atomic_path(out) as tmp:
            frame.write_ndjson(tmp)
    return out
