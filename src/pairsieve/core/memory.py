"""The memory budget of a run: ingest's up-front estimate, and a watchdog that stops the process
before the machine swaps.

Before reading, ingest compares its estimated need (`ingest_need_mb`, fitted in
benchmarks/memory.py) with the budget and stops with ``memory_budget`` if it would not fit.

A stage cannot check its own memory everywhere (polars, faiss and onnxruntime allocate inside
native code), so a daemon thread samples the resident memory of this process and its children
every ``interval_s`` and, once it is over the budget, writes one clear line and ends the process
with exit code 2. Ending the process (rather than raising in another thread, which native code
would not see until it returns) is safe because a build only ever publishes complete folders:
the last published build stays intact and the next run resumes from the completed stages
(`pairsieve.orchestration.publish`, docs/operations.md).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.errors import PairsieveError

log = logging.getLogger(__name__)

BUDGET_KNOB = "runner.memory_budget_mb"
EXIT_CODE = 2  # the exit code of every run-stopping error (`pairsieve.cli.handle_errors`)
# 0.2 s between samples costs ~0.1% of a core (psutil reads /proc) and bounds the overshoot to
# what a stage allocates in 0.2 s.
INTERVAL_S = 0.2


# Peak ingest working memory = fixed part (a batch, polars' buffers) + a factor per byte of
# uncompressed catalog (kept whole) + a smaller one per byte of uncompressed click log (only its
# distinct (query, listing) pairs, spellings and quarantined rows are kept): a fit to the four
# runs of benchmarks/memory.py (200 MB + 7.1 x catalog + 1.2 x clicks), rounded up for headroom
# (14-24% above the measured peaks, see benchmarks/RESULTS.md).
_MEMORY_FIXED_MB = 230.0
_MEMORY_PER_CATALOG_BYTE = 8.0
_MEMORY_PER_CLICKS_BYTE = 1.5


def _uncompressed_bytes(path: str) -> int:
    if io.file_format(path) != "parquet" or "://" in path:
        return io.file_size(path)
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def _spec_list(spec: str | Path | list[str]) -> list[str]:
    return [str(spec)] if isinstance(spec, str | Path) else [str(s) for s in spec]


def ingest_need_mb(clicks: str | list[str], catalog: str | list[str]) -> float:
    """Estimated peak working memory (MB) of ingesting these inputs.

    Raises:
        PairsieveError: ``missing_file`` when an input matches nothing.
    """
    need = _MEMORY_FIXED_MB
    for spec, factor in ((clicks, _MEMORY_PER_CLICKS_BYTE), (catalog, _MEMORY_PER_CATALOG_BYTE)):
        for path in io.resolve_inputs(_spec_list(spec)):
            need += _input_bytes(path) * factor / 2**20
    return need


def _input_bytes(path: str) -> int:
    try:
        return _uncompressed_bytes(path)
    # Unreadable metadata (pyarrow's ArrowInvalid is a ValueError): the reader reports the file
    # properly later; here it only counts its size.
    except (OSError, ValueError):
        return io.file_size(path)


def check_ingest_budget(
    cfg: PairsieveConfig, clicks: str | list[str], catalog: str | list[str]
) -> None:
    """Stop before reading when memory in use plus ingest's estimated need exceeds the budget:
    ``ingest.memory_budget_mb``, else ``runner.memory_budget_mb``, else (both 0) what the
    machine has available now.

    Raises:
        PairsieveError: ``memory_budget`` naming the knob.
    """
    knob = "ingest.memory_budget_mb" if cfg.ingest.memory_budget_mb else "runner.memory_budget_mb"
    in_use = psutil.Process().memory_info().rss / 2**20
    budget = cfg.ingest.memory_budget_mb or cfg.runner.memory_budget_mb
    budget = budget or in_use + psutil.virtual_memory().available / 2**20
    need = ingest_need_mb(clicks, catalog)
    if in_use + need > budget:
        raise PairsieveError(
            "memory_budget",
            f"ingest would need ~{need:,.0f} MB on top of {in_use:,.0f} MB in use, over the "
            f"{budget:,.0f} MB budget; raise the budget, add memory or split the input",
            knob=knob,
        )


def rss_mb(process: psutil.Process | None = None) -> float:
    """Resident memory (MB) of ``process`` (default: this one) and all its children."""
    process = process or psutil.Process()
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # a child that ended between listing and reading holds no memory
            continue
    return total / 2**20


def resolve_budget_mb(budget_mb: float) -> float:
    """The budget in MB: as configured, or for 0 the memory in use now plus what the machine has
    available now (the most this run can take without making the machine swap)."""
    if budget_mb:
        return float(budget_mb)
    return rss_mb() + psutil.virtual_memory().available / 2**20


def budget_error(stage: str, used_mb: float, budget_mb: float, knob: str) -> PairsieveError:
    """The ``memory_budget`` error: which stage, how much memory, which knob to change."""
    return PairsieveError(
        "memory_budget",
        f"stopped during stage {stage}: {used_mb:,.0f} MB resident, over the {budget_mb:,.0f} MB "
        "budget; raise the budget, add memory or split the input",
        knob=knob,
    )


def _stop_process(error: PairsieveError) -> None:
    """Write the error as the CLI would (``error [memory_budget] ...``) and end the process.

    Written straight to stderr's descriptor and followed by ``os._exit``: logging handlers and
    buffered streams are not flushed by ``os._exit``, and the process must end now.
    """
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            continue
    os.write(2, f"error {error}\n".encode())
    os._exit(EXIT_CODE)


class MemoryWatchdog:
    """Samples resident memory on a daemon thread; calls ``on_exceed`` (default: stop the
    process, exit code 2) with the `budget_error` once it is over ``budget_mb``.

    ``stage`` names what runs now, for the message; the run sets it as it goes. ``peak_mb`` is
    the largest sample seen.
    """

    def __init__(
        self,
        budget_mb: float,
        knob: str = BUDGET_KNOB,
        interval_s: float = INTERVAL_S,
        on_exceed: Callable[[PairsieveError], None] = _stop_process,
    ) -> None:
        self.budget_mb = resolve_budget_mb(budget_mb)
        self.knob, self.interval_s, self.on_exceed = knob, interval_s, on_exceed
        self.stage = "start"
        self.peak_mb = 0.0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="memory-watchdog", daemon=True)

    def check(self) -> bool:
        """Take one sample; True (after calling ``on_exceed``) when it is over the budget."""
        used = rss_mb()
        self.peak_mb = max(self.peak_mb, used)
        if used <= self.budget_mb:
            return False
        self.on_exceed(budget_error(self.stage, used, self.budget_mb, self.knob))
        return True

    def _watch(self) -> None:
        while not self._stopped.is_set():
            if self.check():
                return
            self._stopped.wait(self.interval_s)

    def start(self) -> MemoryWatchdog:
        """Take the first sample now (a run already over budget stops before it starts), then
        keep sampling on the thread."""
        if not self.check():
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.ident is not None:
            self._thread.join()
        log.debug("peak resident memory %.0f MB (budget %.0f MB)", self.peak_mb, self.budget_mb)


@contextmanager
def watch(budget_mb: float, stage: str = "start") -> Iterator[MemoryWatchdog]:
    """Run the body under a `MemoryWatchdog` for ``runner.memory_budget_mb`` (0 = what the
    machine has available when it starts); set ``.stage`` on the yielded watchdog as the body
    moves on."""
    watchdog = MemoryWatchdog(budget_mb)
    watchdog.stage = stage
    watchdog.start()
    try:
        yield watchdog
    finally:
        watchdog.stop()


def release() -> None:
    """Collect garbage and hand the C heap's free pages back to the system (glibc only).

    Python objects and numpy arrays live on the C heap, polars' tables on jemalloc's: neither
    reuses the other's free pages, and glibc keeps freed pages of its heap and thread arenas
    resident until trimmed. At 10^6 listings the cluster stage frees gigabytes of attributes,
    vectors and candidates before its linkage, which polars then allocates beside them.

    The collection runs in a thread of its own: an interrupt (Ctrl-C, or SIGTERM taken as one)
    that comes meanwhile is then raised in the calling thread, which waits on the join, never
    inside a finalizer the collection runs, where Python would print it and drop it.
    """
    import gc

    collector = threading.Thread(target=gc.collect, name="pairsieve-release", daemon=True)
    collector.start()
    collector.join()
    trim()


def trim() -> None:
    """Hand the free pages of the C heap and of every thread's arena back to the system
    (glibc only; elsewhere nothing to do).

    A span mapped on a thread allocates in that thread's arena (an index shard, its results),
    and glibc keeps those pages resident once freed: after the kNN search of 10^6 titles the
    two worker threads held ~0.8 GB that the stage's own thread could not reuse. Trimming costs
    milliseconds to a fraction of a second; no collection runs, so it is cheap after every span.
    """
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim
        pass
