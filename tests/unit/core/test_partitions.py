"""The plan a process holds while it maps, and what a worker keeps after a span: nothing."""

from __future__ import annotations

from pathlib import Path

from pairsieve.core import partitions


def test_the_writer_holds_its_plan_and_a_worker_reads_it_per_span(tmp_path):
    reads: list[Path] = []

    def read(folder: Path) -> str:
        reads.append(folder)
        return f"read from {folder.name}"

    folder = tmp_path / "plan"
    partitions.hold(folder, "the stage's own objects")
    assert partitions.held(str(folder), read) == "the stage's own objects" and reads == []
    partitions.forget(folder)
    assert partitions.held(str(folder), read) == "read from plan"
    assert partitions.held(str(folder), read) == "read from plan"
    assert reads == [folder, folder]  # read for each span, never kept


def test_spans_cover_the_rows_once_in_order():
    assert partitions.spans(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert partitions.spans(8, 4) == [(0, 4), (4, 8)]
    assert partitions.spans(0, 4) == [(0, 0)]


def test_map_here_runs_every_span_in_order():
    seen = []

    def fn(plan: str, span: tuple[int, int], cfg: object) -> int:
        seen.append(span)
        return span[1] - span[0]

    spans = partitions.spans(10, 4)
    assert partitions.map_here(fn, "plan", spans, None, "a step") == [4, 4, 2]
    assert seen == [(0, 4), (4, 8), (8, 10)]
