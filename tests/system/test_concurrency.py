"""Concurrent runs: one writer per build folder (a lock), a stale lock from a killed build does not
block the next one, and builds sharing one embedding cache both succeed with identical shards."""

from __future__ import annotations

import signal
import time

import pytest

from pairsieve.core.layout import staging_dir
from pairsieve.orchestration.publish import build_lock, lock_path, verify
from tests.system.test_crash import build_env, finish, make_fixture, shard_digests, start_build

__all__ = ["build_env"]  # the module-scoped fixture, shared with test_crash


def _wait_for_lock_holder(proc, out, timeout: float = 300) -> None:
    """Until ``proc`` holds the lock of ``out`` (it writes its pid into the lock file)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        path = lock_path(out)
        if path.exists() and f"pid {proc.pid} " in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"build never took the lock (exit {proc.poll()})")


@pytest.mark.slow
def test_second_writer_is_refused_stale_lock_recovered_and_shared_cache_builds_agree(
    tmp_path, build_env
):
    inputs = make_fixture(tmp_path / "in", n_listings=150)
    cache = tmp_path / "cache"  # cold, shared by both builds
    first, second = tmp_path / "first", tmp_path / "second"

    # A build holding `first` is killed: the kernel drops its flock, leaving only the file.
    killed = start_build(inputs, first, cache, build_env)
    _wait_for_lock_holder(killed, first)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert lock_path(first).exists() and not first.exists()

    # Two builds share the cache; a third aimed at `first` while it is being written is refused.
    builds = [start_build(inputs, out, cache, build_env) for out in (first, second)]
    _wait_for_lock_holder(builds[0], first)
    intruder = start_build(inputs, first, cache, build_env)
    code, err = finish(intruder)
    flat = " ".join(err.split())
    assert code == 2, err
    assert "[locked]" in flat and str(first) in flat, err

    for proc in builds:
        code, err = finish(proc)
        assert code == 0, err
    for out in (first, second):
        assert verify(out) == []
        assert not staging_dir(out).exists()
    assert shard_digests(first) == shard_digests(second)
    assert len(shard_digests(first)) >= 2  # at least one shard beside the manifest


@pytest.mark.slow
def test_refused_build_prints_one_line_without_traceback(tmp_path, build_env):
    inputs = make_fixture(tmp_path / "in", n_listings=60)
    out = tmp_path / "out"
    with build_lock(out):  # this process is the writer
        code, err = finish(start_build(inputs, out, tmp_path / "cache", build_env))
    assert code == 2, err
    assert "[locked]" in " ".join(err.split())
    assert "Traceback" not in err, err
