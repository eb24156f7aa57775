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

import json
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core import partitions as parts
from pairsieve.core.partitions import MapSpans, Span
from pairsieve.mine.deepen import Mined, batch_edges, combine, dropped_part, mine_span
from pairsieve.mine.retrieval import Retrieval
from pairsieve.vectors.index_slices import SlicedIndex
from pairsieve.vectors.knn import VectorFile

STEP = "mining hard negatives"
PLAN = "plan"  # the plan's folder in the folder the stage gives `mine_mapped`
_LISTING_VECTORS = "listing_vectors.npy"


def listings_on_disk(retrieval: Retrieval, folder: Path) -> Retrieval:
    """``retrieval`` with its listing vectors in the plan `mine_mapped` writes in ``folder``,
    read from there a block at a time (`knn.VectorFile`) by the exact scan below the margin, as
    a worker reads them. The caller can then let go of the vectors in memory (1.4 GB at 10^6
    listings) before the partitions run beside it on threads; the scan's blocks are the same
    floats, so the rows are the same bytes."""
    path = folder / PLAN / _LISTING_VECTORS
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, retrieval.listing_vectors)
    return replace(retrieval, listing_vectors=VectorFile(path))


@dataclass(frozen=True)
class Plan:
    """What every partition reads: the retrieval over all listings and queries, the positives
    of the queries to mine, and (listing_id, product_id, title_norm) for the filters."""

    retrieval: Retrieval
    positives: pl.DataFrame
    products: pl.DataFrame

    def write(self, folder: Path) -> Path:
        """Write the plan into ``folder`` (where the index's slices may already be) and keep it
        loaded for this process."""
        r = self.retrieval
        r.index.write(folder / "index")
        np.save(folder / "query_vectors.npy", r.query_vectors)
        vectors, target = r.listing_vectors, folder / _LISTING_VECTORS
        if not isinstance(vectors, VectorFile):
            np.save(target, vectors)
        elif Path(vectors.path) != target:  # the plan's own file is there (`listings_on_disk`)
            shutil.copyfile(vectors.path, target)
        io.write_parquet(
            pl.DataFrame({S.QUERY: r.queries}, {S.QUERY: pl.String}), folder / "queries.parquet"
        )
        io.write_parquet(r.listing_ids.to_frame(S.LISTING_ID), folder / "listing_ids.parquet")
        io.write_parquet(self.positives, folder / "positives.parquet")
        io.write_parquet(self.products, folder / "products.parquet")
        io.write_json(r.info, folder / "info.json")
        parts.hold(folder, self)
        return folder

    @staticmethod
    def read(folder: Path) -> Plan:
        """The plan in ``folder``: the index slices and the listing vectors are read when
        searched, the queries' vectors memory-mapped (a span gathers its own)."""
        retrieval = Retrieval(
            SlicedIndex.read(folder / "index"),
            pl.read_parquet(folder / "queries.parquet")[S.QUERY].to_list(),
            pl.read_parquet(folder / "listing_ids.parquet")[S.LISTING_ID],
            np.load(folder / "query_vectors.npy", mmap_mode="r"),
            VectorFile(folder / _LISTING_VECTORS),
            json.loads((folder / "info.json").read_text()),
        )
        positives = pl.read_parquet(folder / "positives.parquet")
        return Plan(retrieval, positives, pl.read_parquet(folder / "products.parquet"))


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
    loaded = parts.held(plan, Plan.read)
    retrieval = replace(loaded.retrieval, info={"search_s": 0.0})  # this span's own clock
    out = Path(plan).parent
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
    folder: Path,
    map_spans: MapSpans | None = None,
) -> tuple[Mined, dict[str, Any]]:
    """Mine every query of ``retrieval`` through a plan in ``folder / PLAN`` (``folder``
    exists, and the caller removes it; the index may already be in the plan), mapped with
    ``map_spans`` (default `map_here`); and the map's figures: partitions, their summed search
    and filter seconds, and the wall seconds."""
    started = time.perf_counter()
    plan = Plan(retrieval, positives, products).write(folder / PLAN)
    spans = parts.spans(len(retrieval.queries), cfg.runner.mine_partition_queries)
    try:
        results = (map_spans or parts.map_here)(mine_partition, str(plan), spans, cfg, STEP)
    finally:
        parts.forget(plan)
    figures = {
        "partitions": len(spans),
        "search_s": sum(r.search_s for r in results),
        "filter_s": sum(r.seconds - r.search_s for r in results),
        "wall_s": time.perf_counter() - started,
    }
    return gather(results), figures
