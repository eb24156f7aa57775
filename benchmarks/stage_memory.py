"""Where a build's memory goes: resident memory sampled through every stage, in process.

A build's peak is one number; to bound memory per task one needs to know which step of which
stage holds it. This runs a generated marketplace's build stage by stage in one process (as
`benchmarks/build.py` does, so Prefect is left out), samples the resident set every 0.1 s, and
prints per stage its peak, when in the stage it came, and the stage's own step timings laid
end to end, so the peak can be read against the step that was running:

    .venv/bin/python benchmarks/stage_memory.py --products 12000 --work /tmp/ps-mem \
        [--set knn.exact_max=10000] [--json FIGURES.json]

`--set` passes build settings (the example forces the IVF path that 10^6 listings take, at a
size where the default would search exactly). The embedding cache lives under `--work`, so a
second run with the same catalog embeds nothing.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import psutil
from build import build

from pairsieve.config import load_config, parse_override
from pairsieve.datasets import synth

INTERVAL_S = 0.1
STAGES = ("ingest", "cluster", "mine", "shards", "report")


class Sampler(threading.Thread):
    """Samples this process's resident set size, in bytes, every `INTERVAL_S`."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, int]] = []
        self.running = True

    def run(self) -> None:
        process = psutil.Process()
        while self.running:
            self.samples.append((time.perf_counter(), process.memory_info().rss))
            time.sleep(INTERVAL_S)

    def peak(self, start: float, end: float) -> tuple[int, float]:
        """The largest sample in [start, end] and its offset from start (s)."""
        inside = [(rss, t) for t, rss in self.samples if start <= t <= end] or [(0, start)]
        rss, t = max(inside)
        return rss, t - start


def stage_windows(run_dir: Path, finished: float) -> dict[str, tuple[float, float, dict]]:
    """Each stage's (start, end, timings) on this process's perf_counter clock, read back from
    the stage.json files: stages run one after another and end at `finished`."""
    windows, end = {}, finished
    for stage in reversed(STAGES):
        timings = json.loads((run_dir / stage / "stage.json").read_text())["timings"]
        windows[stage] = (end - timings["total_s"], end, timings)
        end -= timings["total_s"]
    return dict(reversed(windows.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--products", type=int, default=12_000)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    data = args.work / f"synth-{args.products}"
    if not (data / "catalog.parquet").exists():
        synth.generate(data, args.products, seed=3)
    overrides = dict(parse_override(item) for item in args.set)
    cfg = load_config(None, {"cache_dir": str(args.work / "cache"), **overrides})
    run_dir = args.work / f"run-{time.strftime('%H%M%S')}"
    sampler = Sampler()
    sampler.start()
    figures = build(cfg, data, run_dir)
    # report is the last stage: it ended as build returned
    windows = stage_windows(run_dir, time.perf_counter())
    sampler.running = False
    figures["peak_rss_gb"] = {}
    for stage, (start, end, timings) in windows.items():
        rss, at = sampler.peak(start, end)
        figures["peak_rss_gb"][stage] = round(rss / 2**30, 2)
        steps = {k: v for k, v in timings.items() if k.endswith("_s") and k != "total_s"}
        print(f"{stage}: peak {rss / 2**30:.2f} GiB at {at:.1f} s of {end - start:.1f} s; {steps}")
    figures["peak_rss_gb"]["whole"] = round(max(r for _, r in sampler.samples) / 2**30, 2)
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
