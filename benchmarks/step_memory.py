"""Where inside a stage its memory goes: the resident set of one stage run in this process,
sampled against the stage's progress steps and any functions named with ``--mark``.

`stage_memory.py` gives a stage's peak and when it came; this says which step holds it. The stage
maps its partitions one after the other in this process (`map_here`), where a build maps them on
its task runner. Takes a build folder whose earlier stages are done (for example one
`stage_memory.py` left) and the embedding cache it used; the stage writes into ``--out``, which
links to the earlier stages:

    .venv/bin/python benchmarks/step_memory.py --run /tmp/ps-1m/run-203111 \
        --cache /tmp/ps-1m/cache --out /tmp/ps-steps --stage cluster
    .venv/bin/python benchmarks/step_memory.py --run RUN --cache CACHE --out OUT --stage mine \
        --mark pairsieve.mine.deepen:filter_candidates \
        --mark pairsieve.mine.retrieval:Retrieval.candidates_below

For each step or marked function: how often it ran, its seconds, the highest resident set while
it ran and the most it rose above where it started.

``--previous BUILD`` runs the stage as a day 2 against the build folder ``BUILD`` (with ``--run``
the same folder, an unchanged day 2: every title settled, every previous pair reused).

``--worker`` maps each step's partitions in a fresh child process instead, one after the other,
which reads the plan from its files as a Dask or Ray worker does: its peak resident set per
mapped step is what a worker of that step needs (the stage's own process still holds whatever
it held to write the plan).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psutil

from pairsieve.cli.app import parse_override
from pairsieve.config import load_config
from pairsieve.core import partitions, progress

INTERVAL_S = 0.05
EARLIER = {"cluster": ("ingest",), "mine": ("ingest", "cluster")}
STEPS: set[str] = set()  # the progress steps seen


class Timeline(threading.Thread):
    """(seconds, resident GiB) of this process every `INTERVAL_S`, and the spans marked."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.started = time.perf_counter()
        self.samples: list[tuple[float, float]] = []
        self.spans: list[tuple[str, float, float]] = []
        self.running = True

    def now(self) -> float:
        return time.perf_counter() - self.started

    def run(self) -> None:
        process = psutil.Process()
        while self.running:
            self.samples.append((self.now(), process.memory_info().rss / 2**30))
            time.sleep(INTERVAL_S)

    @contextlib.contextmanager
    def span(self, name: str):
        start = self.now()
        try:
            yield
        finally:
            self.spans.append((name, start, self.now()))

    def gaps(self, names: set[str]) -> list[tuple[str, float, float]]:
        """The stretches between consecutive spans of ``names`` (work no step reports)."""
        ordered = sorted((s for s in self.spans if s[0] in names), key=lambda s: s[1])
        return [
            (f"between {a[0]!r} and {b[0]!r}", a[2], b[1])
            for a, b in zip(ordered, ordered[1:], strict=False)
            if b[1] > a[2]
        ]

    def summary(self, extra: list[tuple[str, float, float]]) -> dict[str, dict[str, float]]:
        """Per name: runs, seconds, max GiB while running and the largest rise within a run."""
        rows: dict[str, dict[str, float]] = {}
        for name, start, end in self.spans + extra:
            inside = [rss for t, rss in self.samples if start <= t <= end]
            if not inside:
                continue
            row = rows.setdefault(
                name, {"runs": 0, "seconds": 0.0, "max_gib": 0.0, "rise_gib": 0.0}
            )
            row["runs"] += 1
            row["seconds"] += end - start
            row["max_gib"] = max(row["max_gib"], max(inside))
            row["rise_gib"] = max(row["rise_gib"], max(inside) - inside[0])
        return rows


def mark_progress_steps(timeline: Timeline) -> None:
    """Mark every `progress.step` the stage enters."""
    step = progress.step

    @contextlib.contextmanager
    def marked(name: str, *args, **kwargs):
        STEPS.add(name)
        with timeline.span(name), step(name, *args, **kwargs) as counter:
            yield counter

    progress.step = marked


def mark_function(timeline: Timeline, target: str) -> None:
    """Mark calls of ``module:attribute[.attribute]``, for example a class's method."""
    module_name, _, path = target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original: Callable = getattr(owner, name)

    @functools.wraps(original)
    def marked(*args, **kwargs):
        with timeline.span(path):
            return original(*args, **kwargs)

    setattr(owner, name, marked)


def _with_peak(fn, plan, span, cfg):
    """``fn``'s result and this process's peak resident set so far, in GiB: its memory's
    high-water mark (VmHWM), not getrusage's, which a spawned child inherits from the parent
    it was forked from before its exec."""
    result = fn(plan, span, cfg)
    status = Path("/proc/self/status").read_text().splitlines()
    kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return result, kib / 2**20


class ChildMap:
    """A `partitions.MapSpans` that runs a step's spans one after the other in a fresh spawned
    process; ``peaks`` holds (step, spans, seconds, the child's peak GiB) per mapped step."""

    def __init__(self) -> None:
        self.peaks: list[tuple[str, int, float, float]] = []

    def __call__(self, fn, plan, spans, cfg, step):
        started, results, peak = time.perf_counter(), [], 0.0
        spawn = multiprocessing.get_context("spawn")
        with (
            ProcessPoolExecutor(1, mp_context=spawn) as child,
            progress.step(step, len(spans), "partitions") as counter,
        ):
            for span in spans:
                result, peak = child.submit(_with_peak, fn, plan, span, cfg).result()
                results.append(result)
                counter.advance()
        self.peaks.append((step, len(spans), time.perf_counter() - started, peak))
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stage", choices=sorted(EARLIER), default="cluster")
    parser.add_argument("--mark", action="append", default=[], metavar="MODULE:FUNCTION")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--worker", action="store_true", help="map spans in a child process")
    parser.add_argument("--previous", type=Path, help="a build folder: day 2 against it")
    args = parser.parse_args()
    # Here, not at the top: a --worker child imports this module, and should import no more
    # than a worker would (the span's own modules), not the whole pipeline.
    from pairsieve.orchestration import steps

    overrides = dict(parse_override(item) for item in args.set)
    cfg = load_config(None, {"cache_dir": str(args.cache), **overrides})
    args.out.mkdir(parents=True, exist_ok=True)
    for stage in EARLIER[args.stage]:
        if not (args.out / stage).exists():
            (args.out / stage).symlink_to((args.run / stage).resolve())
    timeline = Timeline()
    mark_progress_steps(timeline)
    for target in args.mark:
        mark_function(timeline, target)
    timeline.start()
    with timeline.span(f"{args.stage} stage"):
        with timeline.span("start"):
            pass
        child_map = ChildMap() if args.worker else None
        map_spans = child_map or partitions.map_here
        day_two = {} if args.previous is None else {"previous": args.previous}
        getattr(steps, f"{args.stage}_step")(cfg, args.out, map_spans=map_spans, **day_two)
        with timeline.span("end"):
            pass
    timeline.running = False
    timeline.join()
    summary = timeline.summary(timeline.gaps(STEPS | {"start", "end"}))
    for name, row in sorted(summary.items(), key=lambda item: -item[1]["max_gib"]):
        print(
            f"{name:45s} runs {row['runs']:5.0f}  {row['seconds']:8.1f} s  "
            f"max {row['max_gib']:5.2f} GiB  rise {row['rise_gib']:5.2f}"
        )
    for step, count, seconds, peak in child_map.peaks if child_map else []:
        print(f"worker: {step:37s} spans {count:4d}  {seconds:8.1f} s  max {peak:5.2f} GiB")


if __name__ == "__main__":
    main()
