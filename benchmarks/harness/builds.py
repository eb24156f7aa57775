"""A `pairsieve build` run as a child process, as a user runs it: its wall seconds, the peak
resident memory of its process and of the Dask workers beside it, and the stage running at the
peak."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import psutil

from harness.peaks import Peaks


def peak_stage(out: Path, peak_wall: float) -> str | None:
    """The stage running at ``peak_wall`` (epoch seconds): the first whose ``stage.json`` was
    written after it (a stage writes it when it ends)."""
    ends = sorted((path.stat().st_mtime, path.parent.name) for path in out.glob("*/stage.json"))
    return next((stage for ended, stage in ends if ended >= peak_wall), None)


def run_build(command: list[str], env: dict[str, str], worker_pids: list[int], out: Path) -> dict:
    """Run ``command`` and sample it and the workers; its figures."""
    started, started_wall = time.perf_counter(), time.time()
    child = subprocess.Popen(command, env=env)
    peaks = Peaks([child.pid, *worker_pids])
    peaks.start()
    tree = psutil.Process(child.pid)
    helpers: dict[str, int] = {}  # the CLI's child processes (Prefect's API server): peak each
    while child.poll() is None:
        try:
            for kid in tree.children(recursive=True):
                name = " ".join(kid.cmdline()[1:4])
                helpers[name] = max(helpers.get(name, 0), kid.memory_info().rss)
        except psutil.NoSuchProcess:
            pass
        time.sleep(0.5)
    seconds = time.perf_counter() - started
    sampled = peaks.stop()
    gib = {pid: round(rss / 2**30, 2) for pid, (rss, _) in sampled.items()}
    peak_at = sampled[child.pid][1] - started
    if child.returncode != 0:
        raise SystemExit(f"build failed ({child.returncode}): {' '.join(command)}")
    return {
        "seconds": round(seconds, 1),
        "build_process_peak_gib": gib[child.pid],
        "build_process_peak_at_s": round(peak_at, 1),
        "build_process_peak_stage": peak_stage(out, started_wall + peak_at),
        "helper_peaks_gib": {name: round(rss / 2**30, 2) for name, rss in helpers.items()},
        "worker_peaks_gib": [gib[pid] for pid in worker_pids],
    }
