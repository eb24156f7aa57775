"""Mining as a map over partitions of the sorted queries (`core.partitions`).

The stage writes a plan (the listings' index in slices, their vectors, the queries' vectors, the
positives and the listing -> product map); each partition mines a span of query rows and writes
its rows next to it. A partition on a worker reads one index slice at a time, its own queries'
vectors and the listing vectors a block at a time, so what it holds does not grow with the
catalog. Spans start at multiples of `MINE_QUERY_BATCH` and a span is mined batch by batch exactly
as one span over all queries would be (`deepen.mine_span`), with a fixed thread count for the
scores (`mine.retrieval`): the rows are the same bytes whatever the partition size, the runner
or the number of workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve.config import PairsieveConfig
from pairsieve.core import io, plans
from pairsieve.core import partitions as parts
from pairsieve.core.partitions import Mapper, Span
from pairsieve.mine.deepen import Mined, Mining, batch_edges, combine, dropped_part, mine_span
from pairsieve.mine.retrieval import Retrieval
from pairsieve.vectors.knn import VectorFile

STEP = "mining hard negatives"
PLAN = "plan"  # the plan's folder in the folder the stage gives `mine_mapped`


def retrieval_folder(folder: Path) -> Path:
    """Where the plan `mine_mapped` writes in ``folder`` keeps the retrieval: its index may be
    built there, and its listing vectors put there, before the plan is written."""
    return folder / PLAN / "retrieval"


def listings_on_disk(retrieval: Retrieval, folder: Path) -> Retrieval:
    """``retrieval`` with its listing vectors in the plan `mine_mapped` writes in ``folder``,
    read from there a block at a time (`knn.VectorFile`) by the exact scan below the margin, as
    a worker reads them. The caller can then let go of the vectors in memory (1.4 GB at 10^6
    listings) before the partitions run beside it on threads; the scan's blocks are the same
    floats, so the rows are the same bytes."""
    path = retrieval_folder(folder) / "listing_vectors.npy"
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, retrieval.listing_vectors)
    return replace(retrieval, listing_vectors=VectorFile(path))


@dataclass(frozen=True)
class Plan(Mining, plans.Plan):
    """What every partition reads (`deepen.Mining`): the retrieval in the plan's subfolder
    (`retrieval_folder`), the positives and the products whole."""

    readers = {"retrieval": Retrieval.read}


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
    scanned_below: int  # queries the search below the margin scanned exactly
    seconds: float


def mine_partition(plan: str, span: Span, cfg: PairsieveConfig) -> SpanResult:
    """Mine the queries at rows ``span`` of the plan in the folder ``plan``; their rows go to
    files in the plan's parent folder, named by their first row (a rerun overwrites them)."""
    started = time.perf_counter()
    loaded = parts.held(plan, Plan.read)
    retrieval = replace(loaded.retrieval, info={"search_s": 0.0})  # this span's own clock
    out = Path(plan).parent
    mined = mine_span(replace(loaded, retrieval=retrieval), span, cfg.mine, cfg.seed, spill=out)
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
        retrieval.info.get("scanned_below", 0),
        time.perf_counter() - started,
    )


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


def mine_mapped(
    retrieval: Retrieval,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: PairsieveConfig,
    mapper: Mapper,
) -> tuple[Mined, dict[str, Any]]:
    """Mine every query of ``retrieval`` on ``mapper``, through a plan in its folder's `PLAN`
    (the folder exists, and the caller removes it; the index may already be in the plan); and
    the map's figures: partitions, their summed search and filter seconds, the queries scanned
    exactly below the margin, and the wall seconds."""
    started = time.perf_counter()
    plan = Plan(retrieval, positives, products).write(mapper.folder / PLAN)
    spans = parts.spans(len(retrieval.queries), cfg.runner.mine_partition_queries)
    results = mapper.run(mine_partition, plan, spans, cfg, STEP)
    figures = {
        "partitions": len(spans),
        "search_s": sum(r.search_s for r in results),
        "filter_s": sum(r.seconds - r.search_s for r in results),
        "scanned_below": sum(r.scanned_below for r in results),
        "wall_s": time.perf_counter() - started,
    }
    return gather(results), figures
