"""Linkage as a map over groups of connected components of the accepted graph.

Average linkage never merges across components: a cluster pair with no accepted pair between
them has linkage 0. So each component's merges read its own cells alone (`linkage.Cells`), and
`linkage.merge_cells` gives the same labels for a component whichever others are merged beside
it. The stage finds the components, orders the cells by component and cuts them into groups of
about `GROUP_CELLS` cells, never splitting a component; each group is a span mapped on the
build's runner (`core.partitions`), which writes its nodes' labels as parquet.

A component larger than a group is linked alone, in one task whose memory follows that
component; the stage's details say how many there were and how large the largest was, as a
catalog whose signals chain everything together shows itself there first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from pairsieve.cluster.linkage import Cells, link_cells, merge_cells
from pairsieve.core import io, partitions
from pairsieve.core.partitions import Span
from pairsieve.core.plans import Plan
from pairsieve.labels.adapt import Setting

if TYPE_CHECKING:
    from pairsieve.core.partitions import Mapper

log = logging.getLogger(__name__)

GROUP_CELLS = 1 << 21  # cells linked per task: ~0.3 GB of the merge loop's arrays
STEP = "linking accepted pairs"
_COLUMNS = ("lo", "hi", "weight", "judged", "vetoed", "component")


@dataclass(frozen=True)
class LinkPlan(Plan):
    """What every group reads: the cells ordered by component, as a table (held, or scanned
    from the plan folder by a worker, which reads its own rows), the listings per node and the
    two knobs of the linkage."""

    cells: pl.DataFrame | pl.LazyFrame
    counts: np.ndarray
    link_threshold: float
    unjudged_weight: float

    def group(self, span: Span) -> Cells:
        """The cells of one group."""
        lo, hi = span
        table = self.cells.slice(lo, hi - lo).lazy().collect()
        return Cells(*(table[name].to_numpy() for name in _COLUMNS))


def link_span(plan: str, span: Span, cfg: Any) -> str:
    """A mapped group: its cells linked, (node, label) written beside the plan folder, named by
    the span (atomically, so a retried group rewrites the same file). ``cfg`` is not read: the
    knobs are the plan's, which labels may have tuned."""
    held = partitions.held(plan, LinkPlan.read)
    cells = held.group(span)
    nodes, labels = merge_cells(held.counts, cells, held.link_threshold, held.unjudged_weight)
    frame = pl.DataFrame({"node": nodes, "label": labels})
    return str(io.write_parquet(frame, Path(plan).parent / f"linked-{span[0]:012d}.parquet"))


def group_spans(component: np.ndarray, group_cells: int) -> tuple[list[Span], dict]:
    """Spans of cells sorted by ``component``, each whole components of about ``group_cells``
    cells (a larger component alone), and what they say: groups, components, the largest
    component's cells and how many were linked alone."""
    starts = np.flatnonzero(np.r_[len(component) > 0, component[1:] != component[:-1]])
    ends = np.r_[starts[1:], len(component)]
    sizes = ends - starts
    cuts, filled = [0], 0
    for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
        if filled and filled + size > group_cells:
            cuts.append(start)
            filled = 0
        filled += size
    cuts.append(len(component))
    spans = [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a] or [(0, 0)]
    details = {
        "groups": len(spans),
        "components": len(starts),
        "largest_component_cells": int(sizes.max()) if len(sizes) else 0,
        "components_linked_alone": int((sizes > group_cells).sum()),
    }
    return spans, details


def agglomerate_mapped(
    counts: np.ndarray,
    scored: pl.DataFrame,
    setting: Setting,
    mapper: Mapper,
    cfg: Any,
    group_cells: int = GROUP_CELLS,
) -> tuple[np.ndarray, dict]:
    """`linkage.agglomerate`'s labels under ``setting``'s link threshold and unjudged weight
    (the config's, or as labels tuned them), linked per group of components on ``mapper``'s
    runner, and the groups' details (`group_spans`)."""
    cells = link_cells(counts, scored, setting.unjudged_weight)
    cells = cells.take(np.argsort(cells.component, kind="stable"))
    spans, details = group_spans(cells.component, group_cells)
    if details["components_linked_alone"]:
        log.warning(
            "%d component(s) of the accepted graph exceed %d pairs and are linked alone; the "
            "largest has %d: its task's memory follows it",
            details["components_linked_alone"],
            group_cells,
            details["largest_component_cells"],
        )
    folder = mapper.folder / "link-plan"
    table = pl.DataFrame({name: getattr(cells, name) for name in _COLUMNS})
    LinkPlan(table, counts, setting.link_threshold, setting.unjudged_weight).write(folder)
    del cells
    files = mapper.run(link_span, folder, spans, cfg, STEP)
    labels = np.arange(len(counts), dtype=np.int64)
    for file in files:
        linked = pl.read_parquet(file)
        labels[linked["node"].to_numpy()] = linked["label"].to_numpy()
    return labels, details
