"""core.plans: a mapped step's plan round-trips through its folder by its fields' kinds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pairsieve.core import partitions
from pairsieve.core.plans import Plan


@dataclass(frozen=True)
class Note:
    """Something with a `write`: stored in a subfolder, read back by the plan's reader."""

    text: str

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "note.txt").write_text(self.text)

    @staticmethod
    def read(folder: Path) -> Note:
        return Note((folder / "note.txt").read_text())


@dataclass(frozen=True)
class Everything(Plan):
    readers = {"note": Note.read}

    vectors: np.ndarray
    names: pl.Series
    whole: pl.DataFrame
    scanned: pl.DataFrame | pl.LazyFrame
    threshold: float
    path: str
    knobs: dict
    note: Note
    opaque: tuple
    missing: np.ndarray | None = None


def _plan() -> Everything:
    return Everything(
        vectors=np.arange(12, dtype=np.float32).reshape(4, 3),
        names=pl.Series("query", ["b", "a"]),
        whole=pl.DataFrame({"x": [1, 2, 3]}),
        scanned=pl.DataFrame({"y": ["p", "q"]}).lazy(),
        threshold=0.25,
        path="/some/file.parquet",
        knobs={"k": 3},
        note=Note("hello"),
        opaque=(1, "two", 3.0),
    )


def test_a_plan_read_back_equals_the_plan_written(tmp_path):
    plan = _plan()
    folder = plan.write(tmp_path / "plan")
    back = Everything.read(folder)
    assert np.array_equal(back.vectors, plan.vectors) and isinstance(back.vectors, np.memmap)
    assert back.names.name == "query" and back.names.to_list() == ["b", "a"]
    assert isinstance(back.whole, pl.DataFrame) and back.whole.equals(plan.whole)
    assert isinstance(back.scanned, pl.LazyFrame)
    assert back.scanned.collect().equals(plan.scanned.collect())
    assert (back.threshold, back.path, back.knobs) == (0.25, "/some/file.parquet", {"k": 3})
    assert back.note == Note("hello") and back.opaque == (1, "two", 3.0)
    assert back.missing is None and not any(folder.glob("missing*"))


def test_the_writer_holds_its_plan_and_a_worker_reads_the_folder(tmp_path):
    plan = _plan()
    folder = plan.write(tmp_path / "plan")
    assert partitions.held(str(folder), Everything.read) is plan
    partitions.forget(folder)
    assert partitions.held(str(folder), Everything.read) is not plan


def test_a_field_that_wrote_itself_without_a_reader_is_an_error(tmp_path):
    @dataclass(frozen=True)
    class Unread(Plan):
        note: Note

    folder = Unread(Note("x")).write(tmp_path / "plan")
    with pytest.raises(TypeError, match="Unread.note wrote itself"):
        Unread.read(folder)
