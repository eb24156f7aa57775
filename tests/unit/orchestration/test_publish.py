from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time

import pytest

from pairsieve.core import io
from pairsieve.core.layout import published_dir, staging_dir
from pairsieve.errors import PairsieveError
from pairsieve.orchestration.publish import (
    build_lock,
    prepare_staging,
    publish,
    verify,
)


def _fake_shards(folder, content=b"abc"):
    shards = folder / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    (shards / "train-00000.parquet").write_bytes(content)
    files = {
        "train": [
            {
                "name": "train-00000.parquet",
                "sha256": io.sha256_file(shards / "train-00000.parquet"),
            }
        ]
    }
    (shards / "manifest.json").write_text(json.dumps({"files": files}))


def test_publish_swaps_atomically_and_seeds_next_staging(tmp_path):
    out = tmp_path / "build"
    _fake_shards(prepare_staging(out), b"first")
    publish(out)
    assert (out / "shards" / "train-00000.parquet").read_bytes() == b"first"
    assert not staging_dir(out).exists()
    staging = prepare_staging(out)  # seeded from the published build by hard links
    assert (staging / "shards" / "train-00000.parquet").read_bytes() == b"first"
    (staging / "shards" / "train-00000.parquet").unlink()
    _fake_shards(staging, b"second")
    assert (out / "shards" / "train-00000.parquet").read_bytes() == b"first"
    publish(out)
    assert (out / "shards" / "train-00000.parquet").read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build"]


def test_verify_catches_flipped_byte_missing_and_extra_files(tmp_path):
    _fake_shards(tmp_path)
    assert verify(tmp_path) == []
    shard = tmp_path / "shards" / "train-00000.parquet"
    shard.write_bytes(b"abd")
    assert verify(tmp_path) == ["sha256 mismatch train-00000.parquet"]
    shard.unlink()
    assert verify(tmp_path) == ["missing file train-00000.parquet"]
    _fake_shards(tmp_path)
    (tmp_path / "shards" / "train-00001.parquet").write_bytes(b"x")
    assert verify(tmp_path) == ["extra file train-00001.parquet"]


def _hold_lock(out, ready):
    with build_lock(out):
        ready.set()
        time.sleep(60)


def test_second_writer_is_refused_and_killed_holder_releases(tmp_path):
    out = tmp_path / "build"
    ready = multiprocessing.get_context("fork").Event()
    holder = multiprocessing.get_context("fork").Process(target=_hold_lock, args=(out, ready))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(PairsieveError) as err:
            with build_lock(out, wait_s=0.5):
                pass
        assert err.value.code == "locked" and f"pid {holder.pid}" in str(err.value)
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.join()
    with build_lock(out):  # the stale lock of the killed run is recovered at once
        pass


def test_a_staging_folder_names_the_build_it_publishes_as(tmp_path):
    out = tmp_path / "dataset"
    assert published_dir(staging_dir(out)) == out
    assert published_dir(out) == out
