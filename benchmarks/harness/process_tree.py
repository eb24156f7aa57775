"""A command measured from outside as one process tree: wall time, CPU time and peak memory of
the command and every process it starts (the CLI, Prefect's ephemeral API server, forked or Dask
workers), sampled every ``interval`` seconds with psutil.

Two memory figures are kept: the peak of the summed RSS of every live process in the tree (an
upper bound: pages that forked children share with their parent count once per process) and the
peak RSS of its largest single process. CPU time is each process's user + system time as last
sampled, summed over every process seen, so a process that ends between two samples loses at
most one interval of CPU.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil


class TreeSampler(threading.Thread):
    """Samples RSS and CPU time of a process and all its descendants until it ends."""

    def __init__(self, root_pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.interval = root_pid, interval
        self.peak_tree_mb = 0.0
        self.peak_process_mb = 0.0
        self.cpu_by_pid: dict[tuple[int, float], float] = {}  # (pid, create time) -> CPU s
        self.stopped = threading.Event()

    def _processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.root_pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def sample(self) -> None:
        total = 0.0
        for process in self._processes():
            try:
                with process.oneshot():
                    rss = process.memory_info().rss / 2**20
                    times = process.cpu_times()
                    key = (process.pid, process.create_time())
            except psutil.Error:
                continue
            total += rss
            self.peak_process_mb = max(self.peak_process_mb, rss)
            self.cpu_by_pid[key] = times.user + times.system
        self.peak_tree_mb = max(self.peak_tree_mb, total)

    def run(self) -> None:
        while not self.stopped.is_set():
            self.sample()
            self.stopped.wait(self.interval)

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_by_pid.values())


def measure(command: list[str], interval: float) -> dict:
    """Run ``command``, echoing its output with timestamps; return its exit code and figures."""
    started = time.perf_counter()
    child = subprocess.Popen(  # noqa: S603 - the command is the benchmark's argument
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    sampler = TreeSampler(child.pid, interval)
    sampler.start()
    for line in child.stdout or ():
        sys.stdout.write(f"[{time.perf_counter() - started:8.1f}s] {line}")
        sys.stdout.flush()
    returncode = child.wait()
    wall = time.perf_counter() - started
    sampler.stopped.set()
    sampler.join()
    return {
        "command": command,
        "returncode": returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(sampler.cpu_seconds, 1),
        "peak_tree_rss_mb": round(sampler.peak_tree_mb),
        "peak_process_rss_mb": round(sampler.peak_process_mb),
        "processes_seen": len(sampler.cpu_by_pid),
    }
