"""Heavy steps as maps over partitions: a plan on disk, one pure function per span of rows.

A stage that partitions a step writes what every partition reads (an index, vectors, tables) into
a plan folder, then maps a module-level function ``fn(plan, span, cfg)`` over spans of rows. The
map is the caller's: `map_here` runs the spans one after the other in this process; a build
passes the flow's map (`pairsieve.orchestration.flows.map_on_runner`), which runs each span as a
Prefect task on the configured runner (threads, Dask or Ray workers that share the folder). A
function writes its rows next to the plan, named by its span, so a span run twice (a retried
task on another worker) writes the same files again.

The process that writes a plan holds it (`hold`) until the map ends (`forget`), so spans mapped
on threads use the stage's own objects; a worker process reads the plan for each span it runs
and keeps nothing once the span is done, so an idle worker holds no memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pairsieve.core import progress

Span = tuple[int, int]
T = TypeVar("T")


def spans(n: int, size: int) -> list[Span]:
    """Consecutive (lo, hi) spans of ``size`` rows covering 0..n (one empty span when n = 0)."""
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)] or [(0, 0)]


class MapSpans(Protocol):
    """Runs ``fn(plan, span, cfg)`` for every span and returns the results in span order;
    ``step`` names the work for progress, which counts partitions."""

    def __call__(
        self,
        fn: Callable[[str, Span, Any], T],
        plan: str,
        spans: list[Span],
        cfg: Any,
        step: str,
    ) -> list[T]: ...


def map_here(
    fn: Callable[[str, Span, Any], T], plan: str, spans: list[Span], cfg: Any, step: str
) -> list[T]:
    """The spans one after the other in this process."""
    results = []
    with progress.step(step, len(spans), "partitions") as counter:
        for span in spans:
            results.append(fn(plan, span, cfg))
            counter.advance()
    return results


@dataclass(frozen=True)
class Mapper:
    """Where a stage's mapped steps write their plans, and the map that runs their spans: the
    runner's tasks, or `map_here`. Every heavy step runs through one, in a build or alone."""

    folder: Path
    map_spans: MapSpans

    @staticmethod
    def local(folder: Path) -> Mapper:
        """The spans one after the other in this process, their plans in ``folder``."""
        return Mapper(folder, map_here)

    def within(self, name: str) -> Mapper:
        """The same map with its plans in the subfolder ``name``."""
        return Mapper(self.folder / name, self.map_spans)

    def run(
        self, fn: Callable[[str, Span, Any], T], plan: Path, spans: list[Span], cfg: Any, step: str
    ) -> list[T]:
        """``fn(plan, span, cfg)`` for every span, in span order, over the plan the caller wrote
        (and holds) in the folder ``plan``; this process lets go of the plan afterwards,
        whatever happens."""
        try:
            return self.map_spans(fn, str(plan), spans, cfg, step)
        finally:
            forget(plan)


_held: dict[str, Any] = {}
_held_lock = threading.Lock()


def hold(folder: Path, plan: Any) -> None:
    """Keep ``plan`` (the objects written to ``folder``) as this process's plan."""
    with _held_lock:
        _held.clear()
        _held[str(folder)] = plan


def held(folder: str, read: Callable[[Path], T]) -> T:
    """The plan of ``folder``: the one this process holds, else ``read(folder)`` for the
    caller alone."""
    with _held_lock:
        plan = _held.get(folder)
    return read(Path(folder)) if plan is None else plan


def forget(folder: Path) -> None:
    """Release the plan of ``folder`` in this process."""
    with _held_lock:
        _held.pop(str(folder), None)
