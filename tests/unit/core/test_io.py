"""Readers in pairsieve.core.io: input resolution, formats, text columns, file-level errors."""

from __future__ import annotations

from pathlib import Path

import fsspec
import polars as pl
import pytest

from pairsieve.core.io import TableReader, content_digest, resolve_inputs, sha256_file
from pairsieve.errors import PairsieveError
from pairsieve.schemas import LISTING_ID, ROW_NUMBER, SOURCE_FILE, TITLE

REQUIRED = (LISTING_ID, TITLE)
FRAME = pl.DataFrame({LISTING_ID: ["a1", "b2", "c3"], TITLE: ["Alpha", "Beta", "Gamma"]})


def _read(spec, reader: TableReader | None = None) -> pl.DataFrame:
    reader = reader or TableReader(REQUIRED)
    frame, files = reader.scan(spec)
    return reader.collect(frame, files)


def _write(frame: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        frame.write_parquet(path)
    elif path.suffix == ".jsonl":
        frame.write_ndjson(path)
    else:
        frame.write_csv(path, separator="\t" if path.suffix == ".tsv" else ",")
    return path


@pytest.mark.parametrize("name", ["t.csv", "t.tsv", "t.parquet", "t.jsonl"])
def test_each_format_reads_as_text_with_provenance(tmp_path, name):
    path = _write(FRAME, tmp_path / name)
    data = _read(path)
    assert data[LISTING_ID].to_list() == ["a1", "b2", "c3"]
    assert data[ROW_NUMBER].to_list() == [1, 2, 3]
    assert data[SOURCE_FILE].cast(pl.String).unique().to_list() == [str(path.resolve())]


@pytest.mark.parametrize("name", ["ids.parquet", "ids.jsonl", "ids.csv"])
def test_numeric_ids_are_read_as_exact_strings(tmp_path, name):
    big = "123456789012345678901234567890"
    if name.endswith(".jsonl"):
        path = tmp_path / name
        path.write_text(
            f'{{"listing_id": {big}, "title": 7}}\n{{"listing_id": 42, "title": "x"}}\n'
        )
    else:
        path = _write(
            pl.DataFrame({LISTING_ID: [9007199254740993, 42], TITLE: ["a", "b"]}), tmp_path / name
        )
        big = "9007199254740993"  # 2**53 + 1: lost if it ever passed through a float
    data = _read(path)
    assert data.schema[LISTING_ID] == pl.String
    assert data[LISTING_ID].to_list() == [big, "42"]


def test_glob_and_partition_folder_are_sorted_and_skip_markers(tmp_path):
    _write(FRAME[2:], tmp_path / "part" / "date=2/p.parquet")
    _write(FRAME[:2], tmp_path / "part" / "date=1/p.csv")
    (tmp_path / "part" / "_SUCCESS").write_text("")
    (tmp_path / "part" / ".p.csv.crc").write_text("junk")
    (tmp_path / "part" / "notes.txt").write_text("junk")
    folder = resolve_inputs(tmp_path / "part")
    assert [Path(f).parent.name for f in folder] == ["date=1", "date=2"]
    assert resolve_inputs(str(tmp_path / "part" / "**" / "p.*")) == folder
    assert _read(tmp_path / "part")[LISTING_ID].to_list() == ["a1", "b2", "c3"]


def test_fsspec_memory_and_file_urls(tmp_path):
    fs = fsspec.filesystem("memory")
    with fs.open("/io-test/a.csv", "wb") as handle:
        handle.write(FRAME.write_csv().encode())
    with fs.open("/io-test/b.jsonl", "wb") as handle:
        handle.write(FRAME.write_ndjson().encode())
    try:
        files = resolve_inputs("memory://io-test")
        assert files == ["memory:///io-test/a.csv", "memory:///io-test/b.jsonl"]
        assert _read("memory://io-test/*.csv")[TITLE].to_list() == ["Alpha", "Beta", "Gamma"]
        assert _read("memory://io-test").height == 6
        assert len(content_digest(files[0])) == 64
        assert _error("memory://io-test/*.parquet").code == "missing_file"
        assert _error("memory://io-test/nope.csv").code == "missing_file"
    finally:
        fs.rm("/io-test", recursive=True)
    path = _write(FRAME, tmp_path / "local.parquet")
    assert _read(f"file://{path}").equals(_read(path))


def test_latin1_csv_is_transcoded_and_utf8_marks_bad_bytes(tmp_path):
    path = tmp_path / "l1.csv"
    path.write_bytes("listing_id,title\n1,Caf\u00e9 cr\u00e8me\n2,plain\n".encode("latin-1"))
    assert (
        _read(path, TableReader(REQUIRED, encoding="latin-1"))[TITLE][0] == "Caf\u00e9 cr\u00e8me"
    )
    assert "\ufffd" in _read(path)[TITLE][0]


def test_rename_maps_input_columns_to_the_contract(tmp_path):
    path = _write(FRAME.rename({LISTING_ID: "id", TITLE: "name"}), tmp_path / "r.csv")
    data = _read(path, TableReader(REQUIRED, rename={"id": LISTING_ID, "name": TITLE}))
    assert {LISTING_ID, TITLE} <= set(data.columns) and "id" not in data.columns
    assert data[TITLE].to_list() == FRAME[TITLE].to_list()


def _error(spec, reader: TableReader | None = None) -> PairsieveError:
    with pytest.raises(PairsieveError) as info:
        _read(spec, reader)
    return info.value


def test_missing_file_glob_and_empty_folder(tmp_path):
    assert _error(tmp_path / "nope.csv").code == "missing_file"
    assert _error(str(tmp_path / "*.parquet")).code == "missing_file"
    (tmp_path / "empty").mkdir()
    err = _error(tmp_path / "empty")
    assert (err.code, err.file) == ("missing_file", str(tmp_path / "empty"))


def test_unsupported_and_corrupt_files_are_unreadable(tmp_path):
    (tmp_path / "x.xlsx").write_bytes(b"PK")
    assert _error(tmp_path / "x.xlsx").code == "unreadable_file"
    corrupt = tmp_path / "c.parquet"
    corrupt.write_bytes(b"not a parquet file at all")
    err = _error(corrupt)
    assert (err.code, err.file) == ("unreadable_file", str(corrupt.resolve()))


def test_corrupt_file_among_good_ones_is_named(tmp_path):
    _write(FRAME, tmp_path / "d" / "a.jsonl")
    bad = tmp_path / "d" / "b.jsonl"
    bad.write_text('{"listing_id": "1", "title": "ok"}\n{"listing_id": "2", "title": \n')
    err = _error(tmp_path / "d")
    assert (err.code, err.file) == ("unreadable_file", str(bad.resolve()))


def test_missing_column_names_file_and_column(tmp_path):
    _write(FRAME, tmp_path / "d" / "a.csv")
    bad = _write(FRAME.drop(TITLE), tmp_path / "d" / "b.csv")
    err = _error(tmp_path / "d")
    assert (err.code, err.file, err.column) == ("missing_column", str(bad.resolve()), TITLE)
    assert LISTING_ID in err.message  # says what it found instead


def test_zero_byte_file_is_empty_input(tmp_path):
    (tmp_path / "e.csv").write_bytes(b"")
    err = _error(tmp_path / "e.csv")
    assert (err.code, err.file) == ("empty_input", str((tmp_path / "e.csv").resolve()))


def test_content_digest_matches_sha256_file(tmp_path):
    path = _write(FRAME, tmp_path / "a.parquet")
    assert content_digest(str(path)) == sha256_file(path)
