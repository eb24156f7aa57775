"""Progress of the long steps: how much of a step is done out of its total.

Stages only count. `step(name, total, unit)` hands them a `Counter` to advance; what shows the
counts is whatever the process installed with `shown_by`: the command line installs a bar on a
terminal and `LogLines` otherwise (`pairsieve.terminal`), and a Prefect build installs a progress
artifact per step (`pairsieve.orchestration.progress`). So a build shows the same counts at a
terminal, in a log file and in the Prefect UI, and a stage run from a test shows nothing and
pays for a lock and an addition.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """One step's counts as a display sees them."""

    name: str
    total: int
    unit: str
    done: int = 0
    started: float = field(default_factory=time.monotonic)

    def rate(self) -> float:
        """Units per second since the step started."""
        return self.done / max(time.monotonic() - self.started, 1e-9)

    def eta_s(self) -> float | None:
        """Seconds left at the rate so far (None before anything is done)."""
        rate = self.rate()
        return (self.total - self.done) / rate if self.done and rate > 0 else None


class Display(Protocol):
    """Something that shows steps: told when one opens, moves and closes."""

    def opened(self, step: Progress) -> Any: ...  # returns the display's handle of the step

    def moved(self, handle: Any, step: Progress) -> None: ...

    def closed(self, handle: Any, step: Progress) -> None: ...


_displays: list[Display] = []
_displays_lock = threading.Lock()


@contextmanager
def shown_by(display: Display) -> Iterator[Display]:
    """Show every step that opens inside the block on ``display``."""
    with _displays_lock:
        _displays.append(display)
    try:
        yield display
    finally:
        with _displays_lock:
            _displays.remove(display)


class Counter:
    """What a stage advances; safe to advance from several threads."""

    def __init__(self, step: Progress, displays: list[Display]) -> None:
        self.step = step
        self._lock = threading.Lock()
        self._shown = [(d, d.opened(step)) for d in displays]

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.step.done = min(self.step.total, self.step.done + n)
            for display, handle in self._shown:
                display.moved(handle, self.step)

    def close(self) -> None:
        with self._lock:
            for display, handle in self._shown:
                display.closed(handle, self.step)
            self._shown = []


@contextmanager
def step(name: str, total: int, unit: str) -> Iterator[Counter]:
    """A counter for a step of ``total`` ``unit``; a step with nothing to do shows nothing."""
    with _displays_lock:
        displays = list(_displays) if total > 0 else []
    counter = Counter(Progress(name, total, unit), displays)
    try:
        yield counter
    finally:
        counter.close()


def duration_text(seconds: float) -> str:
    """``2h05m``, ``4m10s`` or ``12s``."""
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def progress_text(step: Progress) -> str:
    """``mining hard negatives: 40,960 of 190,114 queries (22%), 81/s, about 30m40s left``."""
    share = step.done / step.total if step.total else 1.0
    text = f"{step.name}: {step.done:,} of {step.total:,} {step.unit} ({share:.0%})"
    text += f", {step.rate():,.0f}/s"
    eta = step.eta_s()
    if eta is not None and step.done < step.total:
        text += f", about {duration_text(eta)} left"
    return text


class LogLines:
    """Without a terminal: one log line per step every ``every_s`` seconds while it runs, and one
    when it ends (for a step that ran that long), so a job's log shows it moving."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s

    def opened(self, step: Progress) -> list[float]:
        return [time.monotonic()]  # when this step last wrote a line

    def moved(self, handle: list[float], step: Progress) -> None:
        now = time.monotonic()
        if now - handle[0] >= self.every_s and step.done < step.total:
            handle[0] = now
            log.info("%s", progress_text(step))

    def closed(self, handle: list[float], step: Progress) -> None:
        if time.monotonic() - step.started >= self.every_s:
            log.info("%s", progress_text(step))
