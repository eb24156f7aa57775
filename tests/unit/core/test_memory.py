"""`memory.trim`: what a span mapped on a thread freed goes back to the system."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# In a fresh interpreter, so the test's own heap does not blur the figures: a thread allocates
# ~400 MB in 64 KB blocks (below glibc's mmap threshold, so in the thread's arena, as an index
# shard's lists are) and frees 15 of every 16 (a span's results stay between what it frees, so
# glibc keeps the freed pages: 456 MB resident without a trim); the main thread reads its RSS
# around a trim.
_SPAN_ON_A_THREAD = """
import threading
import psutil
from pairsieve.core import memory

kept = []

def span():
    blocks = [bytearray(64 << 10) for _ in range(6400)]
    for block in blocks:
        block[::4096] = b"x" * len(block[::4096])  # touch every page
    kept.extend(blocks[::16])  # what the span hands back, between the blocks it frees
    del blocks

worker = threading.Thread(target=span)
worker.start()
worker.join()
rss = lambda: psutil.Process().memory_info().rss / 2**20
before = rss()
memory.trim()
print(before, rss())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trim_hands_a_threads_freed_arena_back_to_the_system() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SPAN_ON_A_THREAD], capture_output=True, text=True, check=True
    )
    before, after = map(float, done.stdout.split())
    assert before - after > 250, (before, after)  # MB: most of the ~375 the span freed
