"""Mining as a map over partitions of the sorted queries, so it can run on many workers.

The stage writes a plan (the listings' index and vectors, the queries' vectors, the positives and
the listing → product map) into its folder; each partition is a pure function of the plan and a
span of query rows that writes its rows next to it. The same plan runs on any map: one after the
other in this process, on a thread runner, or on Dask or Ray workers that share the folder.

Spans start at multiples of `MINE_QUERY_BATCH` and a span is mined batch by batch exactly as one
span over all queries would be (`deepen.mine_span`), with a fixed thread count for the scores
(`vectors.threads`): the rows are the same bytes whatever the partition size, the runner or the
number of workers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io, progress
from pairsieve.mine.deepen import Mined, batch_edges, combine, dropped_part, mine_span
from pairsieve.mine.retrieval import Retrieval
from pairsieve.vectors.threads import fixed_threads

Span = tuple[int, int]


@dataclass(frozen=True)
class Plan:
    """What every partition reads: the retrieval over all listings and queries, the positives
    of the queries to mine, and (listing_id, product_id, title_norm) for the filters."""

    retrieval: Retrieval
    positives: pl.DataFrame
    products: pl.DataFrame

    def write(self, folder: Path) -> Path:
        """Write the plan into ``folder`` (created) and keep it loaded for this process."""
        folder.mkdir(parents=True, exist_ok=True)
        r = self.retrieval
        np.save(folder / "query_vectors.npy", r.query_vectors)
        np.save(folder / "listing_vectors.npy", r.listing_vectors)
        faiss.write_index(r.index, str(folder / "index.faiss"))
        io.write_parquet(
            pl.DataFrame({S.QUERY: r.queries}, {S.QUERY: pl.String}), folder / "queries.parquet"
        )
        ids = pl.DataFrame({S.LISTING_ID: r.listing_ids}, {S.LISTING_ID: pl.String})
        io.write_parquet(ids, folder / "listing_ids.parquet")
        io.write_parquet(self.positives, folder / "positives.parquet")
        io.write_parquet(self.products, folder / "products.parquet")
        io.write_json(r.info, folder / "info.json")
        with _loaded_lock:
            _loaded.clear()
            _loaded[str(folder)] = self
        return folder

    @staticmethod
    def read(folder: Path) -> Plan:
        """The plan in ``folder``; the listing vectors stay on disk (memory-mapped)."""
        retrieval = Retrieval(
            faiss.read_index(str(folder / "index.faiss")),
            pl.read_parquet(folder / "queries.parquet")[S.QUERY].to_list(),
            pl.read_parquet(folder / "listing_ids.parquet")[S.LISTING_ID].to_list(),
            np.load(folder / "query_vectors.npy"),
            np.load(folder / "listing_vectors.npy", mmap_mode="r"),
            json.loads((folder / "info.json").read_text()),
        )
        positives = pl.read_parquet(folder / "positives.parquet")
        return Plan(retrieval, positives, pl.read_parquet(folder / "products.parquet"))


# The plan this process holds: the stage's own after `write`, a worker's after its first task.
_loaded: dict[str, Plan] = {}
_loaded_lock = threading.Lock()


def _plan(folder: str) -> Plan:
    with _loaded_lock:
        if folder not in _loaded:
            _loaded.clear()
            _loaded[folder] = Plan.read(Path(folder))
        return _loaded[folder]


def forget(folder: Path) -> None:
    """Release the plan of ``folder`` in this process."""
    with _loaded_lock:
        _loaded.pop(str(folder), None)


def spans(n: int, size: int) -> list[Span]:
    """Consecutive (lo, hi) spans of ``size`` rows covering 0..n (one empty span when n = 0)."""
    return [(lo, min(lo + size, n)) for lo in range(0, n, size)] or [(0, 0)]


@dataclass(frozen=True)
class SpanResult:
    """What a partition hands back: the files it wrote and its small figures."""

    kept: str
    counts: str
    dropped: list[str]
    rounds: list[dict[str, int]]
    skipped_above_ceiling: int
    reasons: dict[str, int]
    search_s: float
    seconds: float


def mine_partition(plan: str, span: Span, cfg: PairsieveConfig) -> SpanResult:
    """Mine the queries at rows ``span`` of the plan in the folder ``plan``; their rows go to
    files in the plan's parent folder, named by their first row (a rerun overwrites them)."""
    started = time.perf_counter()
    loaded = _plan(plan)
    retrieval = replace(loaded.retrieval, info={"search_s": 0.0})  # this span's own clock
    out = Path(plan).parent
    with fixed_threads():
        mined = mine_span(
            retrieval, span, loaded.positives, loaded.products, cfg.mine, cfg.seed, spill=out
        )
    lo = span[0]
    kept = io.write_parquet(mined.kept, out / f"kept-{lo:010d}.parquet")
    counts = io.write_parquet(mined.counts, out / f"counts-{lo:010d}.parquet")
    return SpanResult(
        str(kept),
        str(counts),
        [str(dropped_part(out, start)) for start in batch_edges(span)[:-1]],
        mined.rounds,
        mined.skipped_above_ceiling,
        mined.reasons,
        retrieval.info["search_s"],
        time.perf_counter() - started,
    )


MapSpans = Callable[[str, list[Span], PairsieveConfig], list[SpanResult]]


def map_here(plan: str, spans: list[Span], cfg: PairsieveConfig) -> list[SpanResult]:
    """The partitions one after the other in this process."""
    results = []
    with progress.step("mining hard negatives", len(spans), "partitions") as counter:
        for span in spans:
            results.append(mine_partition(plan, span, cfg))
            counter.advance()
    return results


def gather(results: list[SpanResult]) -> Mined:
    """The partitions' results, in span order, as one (`deepen.combine`)."""
    return combine(
        [
            Mined(
                pl.read_parquet(r.counts),
                pl.read_parquet(r.kept),
                pl.scan_parquet(r.dropped),
                r.rounds,
                r.skipped_above_ceiling,
                r.reasons,
            )
            for r in results
        ]
    )


def mine_mapped(  # noqa: PLR0913 - the plan's parts, where it goes, and the map
    retrieval: Retrieval,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: PairsieveConfig,
    folder: Path,
    map_spans: MapSpans | None = None,
) -> tuple[Mined, dict[str, Any]]:
    """Mine every query of ``retrieval`` through a plan in ``folder`` (an existing, empty
    folder the caller removes), mapped with ``map_spans`` (default `map_here`); and the map's
    figures: partitions, their summed search and filter seconds, and the wall seconds."""
    started = time.perf_counter()
    plan = Plan(retrieval, positives, products).write(folder / "plan")
    parts = spans(len(retrieval.queries), cfg.runner.mine_partition_queries)
    try:
        results = (map_spans or map_here)(str(plan), parts, cfg)
    finally:
        forget(plan)
    figures = {
        "partitions": len(parts),
        "search_s": sum(r.search_s for r in results),
        "filter_s": sum(r.seconds - r.search_s for r in results),
        "wall_s": time.perf_counter() - started,
    }
    return gather(results), figures
