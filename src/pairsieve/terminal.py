"""What a person at a terminal sees of a run, and how they stop it: which log lines reach the
console, the progress of long steps, the end-of-build summary, and SIGTERM taken as Ctrl-C."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text

from pairsieve.core.contract import reasons_text
from pairsieve.core.progress import LogLines, Progress, shown_by
from pairsieve.faults import environment_error, tells_a_fault

console = Console(stderr=True)


class _HideTold(logging.Filter):
    """Prefect logs a failed run with its traceback. A PairsieveError or a fault of the
    environment ends the command in one clear line of its own, so its traceback is left out;
    a bug's stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            return environment_error(exc) is None
        return not tells_a_fault(record.getMessage())


VERBOSITY = {"verbose": False}  # set by the --verbose option before any command runs


class _OwnLines(logging.Filter):
    """What the console shows: pairsieve's lines from INFO up, every other library's only from
    WARNING up. A handler filter, because libraries (Prefect's run loggers) set their own
    loggers' levels after ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name.startswith("pairsieve") or record.levelno >= logging.WARNING


def setup_logging() -> None:
    """pairsieve's own lines at INFO; every other library's only from WARNING up (all of them,
    from DEBUG, with --verbose): their routine lines bury ours and read as trouble."""
    verbose = VERBOSITY["verbose"]
    handler = RichHandler(console=console, show_path=False, show_time=False)
    if not verbose:
        handler.addFilter(_OwnLines())
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[handler],
        force=True,
    )
    logging.getLogger("pairsieve").setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("httpx", "sentence_transformers", "prefect", "distributed", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
    for run_logger in (
        "prefect.task_runs",
        "prefect.flow_runs",
        "prefect.task_engine",
        "prefect.flow_engine",
        "prefect.engine",
    ):
        logging.getLogger(run_logger).addFilter(_HideTold())


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """Take SIGTERM (how schedulers and container runtimes stop a job) as Ctrl-C: the stack
    unwinds, so the build lock is released, the staging folder stays for the next run, and what
    the run started (Prefect's ephemeral API server, Dask processes) is shut down on the way
    out instead of being left running."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


def build_summary(summary: dict[str, Any], out: Path) -> tuple[Any, list[str]]:
    """The end-of-build table (one short row per stage, so it fits 80 columns) and the lines
    under it: each stage's drop reasons, then where the shards and the report are."""
    from rich.table import Table

    table = Table(title=f"pairsieve build -> {out}")
    for column in ("stage", "rows in", "kept", "dropped", "seconds"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    lines = []
    for stage, result in summary.items():
        dropped = result["dropped_by_reason"]
        total = result["timings"].get("total_s", 0)
        seconds = "up to date" if result["skipped"] else f"{total:.1f}"
        table.add_row(
            stage,
            f"{result['rows_in']:,}",
            f"{result['rows_out']:,}",
            f"{sum(dropped.values()):,}",
            seconds,
        )
        if reasons := reasons_text(dropped):
            lines.append(f"{stage} dropped: {reasons}")
    lines += [f"shards:  {out / 'shards'}", f"report:  {out / 'report' / 'report.html'}"]
    return table, lines


class _Rate(ProgressColumn):
    """Units per second since the step started, in its own unit (``440 texts/s``): the rate the
    log lines give, not rich's estimate over its last few updates."""

    def render(self, task: Any) -> Text:
        rate = task.fields.get("rate")
        text = f"{rate:,.0f} {task.fields['unit']}/s" if rate is not None else ""
        return Text(text, style="progress.data.speed")


class Bars:
    """On a terminal: one bar per long step, with done of total, rate and time left."""

    def __init__(self, where: Console) -> None:
        self.bars = RichProgress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            TaskProgressColumn(),
            MofNCompleteColumn(),
            _Rate(),
            TimeRemainingColumn(),
            console=where,
        )

    def opened(self, step: Progress) -> Any:
        return self.bars.add_task(step.name, total=step.total, unit=step.unit)

    def moved(self, handle: Any, step: Progress) -> None:
        self.bars.update(handle, completed=step.done, rate=step.rate())

    def closed(self, handle: Any, step: Progress) -> None:
        self.bars.update(handle, completed=step.done, rate=step.rate())
        self.bars.stop_task(handle)


@contextmanager
def showing_progress(every_s: float) -> Iterator[None]:
    """Progress of the long steps while the block runs: bars when stderr is a terminal, else a
    log line per step every ``every_s`` seconds (none when 0)."""
    if console.is_terminal:
        bars = Bars(console)
        with bars.bars, shown_by(bars):
            yield
    elif every_s > 0:
        with shown_by(LogLines(every_s)):
            yield
    else:
        yield
