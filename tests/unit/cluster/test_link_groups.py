"""Linkage mapped over groups of connected components: the labels of `agglomerate`, whichever
way the components are grouped and whether a group reads a held plan or its files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pairsieve.cluster import link_groups, linkage
from pairsieve.core import partitions
from pairsieve.core.partitions import Mapper
from pairsieve.labels.adapt import Setting
from tests.unit.cluster.graphs import random_graph


def _map_from_files(fn, plan, spans, cfg, step):  # noqa: ANN001, ANN202, ARG001
    """Every span reads the plan from its files, as a worker process does."""
    partitions.forget(Path(plan))
    return [fn(plan, span, cfg) for span in spans]


@pytest.mark.parametrize("seed", range(12))
def test_groups_of_components_link_as_agglomerate_does(seed: int, tmp_path: Path) -> None:
    counts, scored = random_graph(seed)
    for group_cells in (1, 3, 1 << 21):
        for map_spans in (partitions.map_here, _map_from_files):
            for threshold, unjudged in ((0.3, 1.0), (0.5, 0.0)):
                want = linkage.agglomerate(counts, scored, threshold, unjudged)
                mapper = Mapper(tmp_path / f"{group_cells}-{map_spans.__name__}", map_spans)
                found, details = link_groups.agglomerate_mapped(
                    counts, scored, Setting(0.5, threshold, unjudged), mapper, None, group_cells
                )
                assert found.tolist() == want.tolist(), (group_cells, threshold, unjudged)
                if group_cells == 1 and details["components"] > 1:
                    assert details["groups"] == details["components"]


def test_a_component_larger_than_a_group_is_linked_alone_and_reported() -> None:
    # components by cells: 2, 1, 5, 1, 1 with groups of 3 cells
    component = np.array([0, 0, 1, 2, 2, 2, 2, 2, 3, 4])
    spans, details = link_groups.group_spans(component, 3)
    assert spans == [(0, 3), (3, 8), (8, 10)]
    assert details == {
        "groups": 3,
        "components": 5,
        "largest_component_cells": 5,
        "components_linked_alone": 1,
    }
    spans, details = link_groups.group_spans(np.array([], dtype=np.int64), 3)
    assert spans == [(0, 0)] and details["components"] == details["largest_component_cells"] == 0
