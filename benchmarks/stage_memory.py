"""Where a build's memory goes: the peak resident memory of every stage, each in a process of
its own, and when in the stage it came.

A build's peak is one number; to bound memory per task one needs to know which step of which
stage holds it. This builds a generated marketplace stage by stage, each stage in a fresh
process (so no stage's peak carries what an earlier one left in the heap), samples the stage's
resident set every 0.1 s, and prints its peak, when in the stage the peak came, and the stage's
own step timings, so the peak can be read against the step that was running:

    .venv/bin/python benchmarks/stage_memory.py --products 12000 --work /tmp/ps-mem \
        [--set knn.exact_max=10000] [--until cluster] [--json FIGURES.json]

`--set` passes build settings (the example forces the IVF path that 10^6 listings take, at a
size where the default searches exactly). The embedding cache lives under `--work`, so a second
run with the same catalog embeds nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
from harness.peaks import Peaks
from harness.stages import STAGES, run_stage

from pairsieve.cli.app import parse_override
from pairsieve.config import load_config
from pairsieve.datasets import synth


def measure_stage(stage: str, cfg, data: Path, run_dir: Path) -> dict:
    """Run one stage in this process and return its wall time, peak RSS and when it came."""
    baseline = psutil.Process().memory_info().rss
    peaks = Peaks([os.getpid()])
    started = time.perf_counter()
    peaks.start()
    run_stage(stage, cfg, data, run_dir)
    ended = time.perf_counter()
    rss, at = peaks.stop()[os.getpid()]
    figures = {
        "seconds": round(ended - started, 1),
        "peak_rss_gib": round(rss / 2**30, 2),
        "baseline_rss_gib": round(baseline / 2**30, 2),
        "peak_at_s": round(at - started, 1),
    }
    stage_json = run_dir / stage / "stage.json"
    if stage_json.exists():
        timings = json.loads(stage_json.read_text())["timings"]
        figures["steps_s"] = {k: v for k, v in timings.items() if k != "total_s"}
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=12_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--until", choices=STAGES, default=STAGES[-1], help="last stage to run")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)  # a child's stage
    parser.add_argument("--run-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    data = args.work / f"synth-{args.products}"
    overrides = dict(parse_override(item) for item in args.set)
    cfg = load_config(None, {"cache_dir": str(args.work / "cache"), **overrides})
    if args.stage:
        print(json.dumps(measure_stage(args.stage, cfg, data, args.run_dir)))
        return
    if not (data / "catalog.parquet").exists():
        synth.generate(data, args.products, seed=3)
    run_dir = args.work / f"run-{time.strftime('%H%M%S')}"
    figures = {}
    for stage in STAGES[: STAGES.index(args.until) + 1]:
        child = [sys.executable, __file__, *sys.argv[1:], "--stage", stage, "--run-dir", run_dir]
        done = subprocess.run(list(map(str, child)), capture_output=True, text=True, check=True)
        figures[stage] = json.loads(done.stdout.strip().splitlines()[-1])
        print(stage, json.dumps(figures[stage]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
