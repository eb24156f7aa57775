"""The peak resident memory of running processes (a build, a stage, Dask workers), sampled
from another thread while they work.
"""

from __future__ import annotations

import threading
import time

import psutil

INTERVAL_S = 0.1


class Peaks(threading.Thread):
    """Samples the resident set of each of some processes every `INTERVAL_S` and keeps each
    one's peak, in bytes, with when it came (`time.perf_counter`)."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.processes = [psutil.Process(pid) for pid in pids]
        self.peaks = {pid: (0, 0.0) for pid in pids}
        self.running = True

    def run(self) -> None:
        while self.running:
            now = time.perf_counter()
            for process in self.processes:
                try:
                    rss = process.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
                if rss > self.peaks[process.pid][0]:
                    self.peaks[process.pid] = (rss, now)
            time.sleep(INTERVAL_S)

    def stop(self) -> dict[int, tuple[int, float]]:
        """Stop sampling; each process's (peak bytes, when)."""
        self.running = False
        self.join()
        return self.peaks
