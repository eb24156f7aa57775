"""The embedding signal's candidates: each title's nearest titles, as a map over spans of titles.

A span is one search batch of `KNN_QUERIES` titles (a query's scores follow the batch it is
searched in, so the spans are fixed counts, never a function of the number of workers) searched
at a fixed thread count (`vectors.threads`): the pairs are the same whatever runs the spans.
The index is built slice by slice into a plan folder (`vectors.index_slices`), the vectors and
the rows to search go beside it, and each span is a function of the plan (`core.partitions`)
that reads its own rows and one slice at a time: a task on the build's runner, or a call here
(`Mapper.local`), where the plan the process holds is used as it is.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pairsieve.config import KnnConfig, PairsieveConfig
from pairsieve.core import io
from pairsieve.core import partitions as parts
from pairsieve.core.partitions import Mapper, Span
from pairsieve.core.plans import Plan
from pairsieve.vectors import index_slices, knn, minhash
from pairsieve.vectors.index_slices import SlicedIndex
from pairsieve.vectors.threads import fixed_threads

KNN_QUERIES = 65_536  # titles searched at a time: a multiple of faiss's 4,096-query BLAS block
STEP = "finding nearest titles"


@contextlib.contextmanager
def scratch_mapper() -> Iterator[Mapper]:
    """`Mapper.local` with its plans in a temporary folder, removed on leaving: for clustering
    outside a build folder (evaluation, benchmarks)."""
    with tempfile.TemporaryDirectory(prefix="pairsieve-plans-") as folder:
        yield Mapper.local(Path(folder))


@dataclass(frozen=True)
class NeighbourPlan(Plan):
    """The index over the titles' vectors (its slices in the plan's ``index`` folder, read as
    they are searched), the vectors and the rows whose neighbours are wanted (memory-mapped
    on a worker: a span gathers its own rows)."""

    readers = {"index": SlicedIndex.read}

    index: SlicedIndex
    vectors: np.ndarray
    rows: np.ndarray


def _span_pairs(plan: NeighbourPlan, span: Span, cfg: PairsieveConfig) -> np.ndarray:
    """(m, 2) i < j pairs of the rows at ``span`` with their ``knn_k`` nearest titles, cosine
    at least ``min_cosine``."""
    part = plan.rows[span[0] : span[1]]
    with fixed_threads():
        scores, ids = plan.index.search(np.asarray(plan.vectors[part]), cfg.cluster.knn_k + 1)
    source = np.repeat(part, ids.shape[1])
    keep = (ids.ravel() >= 0) & (scores.ravel() >= cfg.cluster.min_cosine)
    pairs = np.stack([source[keep], ids.ravel()[keep]], axis=1).astype(np.int64)
    return np.sort(pairs[pairs[:, 0] != pairs[:, 1]], axis=1)


def neighbour_span(plan: str, span: Span, cfg: PairsieveConfig) -> str:
    """A mapped span: its pairs into a file beside the plan folder, named by the span (written
    atomically, so a retried span never leaves a half-written file behind)."""
    pairs = _span_pairs(parts.held(plan, NeighbourPlan.read), span, cfg)
    path = Path(plan).parent / f"neighbours-{span[0]:010d}.npy"
    with io.atomic_path(path) as tmp, open(tmp, "wb") as out:
        np.save(out, pairs)
    return str(path)


def knn_settings(cfg: PairsieveConfig) -> KnnConfig:
    """The faiss settings of the neighbour search: `knn`'s, exact only up to
    `cluster.knn_exact_max` titles, in slices of `cluster.knn_slice_vectors`."""
    c = cfg.cluster
    return cfg.knn.model_copy(
        update={"exact_max": c.knn_exact_max, "slice_vectors": c.knn_slice_vectors}
    )


def knn_pairs(
    cfg: PairsieveConfig,
    vectors: np.ndarray,
    mapper: Mapper,
    rows: np.ndarray | None = None,
    layout: knn.IvfLayout | None = None,
    keys: np.ndarray | None = None,
) -> tuple[np.ndarray, SlicedIndex]:
    """Node pairs among each other's ``knn_k`` nearest neighbours with cosine >= min_cosine
    (with ``rows``, only the neighbours of those nodes are searched), and the index searched: a
    previous build's ``layout`` spares its IVF training and, for the titles with ``keys`` it
    indexed, their assignment (`index_slices.build`). The index is built slice by slice into a
    plan in ``mapper``'s folder and the spans of rows run on its map (`Mapper.local`: here)."""
    rows = np.arange(len(vectors)) if rows is None else rows
    spans = parts.spans(len(rows), KNN_QUERIES)
    folder = mapper.folder / "neighbours-plan"
    index = index_slices.build(vectors, knn_settings(cfg), cfg.seed, layout, keys, folder / "index")
    if index.lists is not None:
        # A title's nearest list is its own: taken list by list, a span probes a run of
        # neighbouring lists while they sit in cache (`knn.search`), and each title's
        # neighbours are the same whatever span searches it.
        rows = rows[np.argsort(index.lists[rows], kind="stable")]
    NeighbourPlan(index, vectors, rows).write(folder)
    files = mapper.run(neighbour_span, folder, spans, cfg, STEP)
    found = [minhash.pair_codes(np.load(path)) for path in files]
    # Gathered as one int64 code a pair: half the memory of the spans' (m, 2) pairs.
    return minhash.distinct_pairs(np.concatenate(found)), index
