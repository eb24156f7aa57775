"""The checks before a build: the inputs' bytes counted as a user names them, and a disk too small
for the expected output refused in one error naming the folder."""

from __future__ import annotations

import pytest

from pairsieve.errors import PairsieveError
from pairsieve.orchestration import preflight


def test_inputs_are_counted_as_files_folders_and_absolute_globs_and_urls_are_skipped(tmp_path):
    (tmp_path / "part").mkdir()
    for name, size in (("a.parquet", 100), ("part/b.parquet", 250), ("part/c.parquet", 50)):
        (tmp_path / name).write_bytes(b"x" * size)
    named = [
        str(tmp_path / "a.parquet"),
        str(tmp_path / "part"),
        str(tmp_path / "part" / "*.parquet"),
        "s3://bucket/clicks.parquet",
    ]
    assert preflight._local_bytes(named) == 100 + 300 + 300


def test_a_disk_without_room_for_the_expected_output_is_refused(tmp_path, monkeypatch):
    (tmp_path / "clicks.parquet").write_bytes(b"x" * 1000)
    inputs = [str(tmp_path / "clicks.parquet")]
    preflight.enough_space(tmp_path / "out", inputs)  # 10 kB: room enough
    monkeypatch.setattr(preflight, "OUTPUT_PER_INPUT_BYTE", 10**15)
    with pytest.raises(PairsieveError) as caught:
        preflight.enough_space(tmp_path / "out", inputs)
    assert (caught.value.code, caught.value.file) == ("disk_full", str(tmp_path))
    assert "MB are needed" in caught.value.message


def test_an_output_folder_is_made_and_probed_without_leaving_a_file(tmp_path):
    preflight.writable_folder(tmp_path / "new" / "deeper", "--out")
    assert list((tmp_path / "new" / "deeper").iterdir()) == []
