"""Progress counters: what displays are told, from one thread or several."""

from __future__ import annotations

import logging
import threading

from pairsieve.core import progress


class Recorder:
    """A display that writes down what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, int, int]] = []

    def opened(self, step: progress.Progress) -> str:
        self.events.append(("opened", step.name, step.done, step.total))
        return step.name

    def moved(self, handle: str, step: progress.Progress) -> None:
        self.events.append(("moved", handle, step.done, step.total))

    def closed(self, handle: str, step: progress.Progress) -> None:
        self.events.append(("closed", handle, step.done, step.total))


def test_a_display_sees_a_step_open_move_and_close() -> None:
    shown = Recorder()
    with progress.shown_by(shown):
        with progress.step("judging candidate pairs", 10, "pairs") as counter:
            counter.advance(4)
            counter.advance(6)
        with progress.step("nothing to do", 0, "pairs") as counter:
            counter.advance(0)
    with progress.step("after the block", 5, "rows") as counter:
        counter.advance(5)
    assert shown.events == [
        ("opened", "judging candidate pairs", 0, 10),
        ("moved", "judging candidate pairs", 4, 10),
        ("moved", "judging candidate pairs", 10, 10),
        ("closed", "judging candidate pairs", 10, 10),
    ]


def test_counts_from_many_threads_add_up() -> None:
    shown = Recorder()
    with progress.shown_by(shown), progress.step("embedding texts", 4000, "texts") as counter:
        workers = [
            threading.Thread(target=lambda: [counter.advance(1) for _ in range(1000)])
            for _ in range(4)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    moved = [done for kind, _, done, _ in shown.events if kind == "moved"]
    assert moved == sorted(moved) and moved[-1] == 4000 and len(moved) == 4000


def logged_lines(caplog, every_s: float, name: str, total: int, unit: str, moves: list[int]):
    """The lines `LogLines` writes for a step of ``total`` advanced by ``moves``."""
    with (
        caplog.at_level(logging.INFO, logger="pairsieve.core.progress"),
        progress.shown_by(progress.LogLines(every_s)),
        progress.step(name, total, unit) as counter,
    ):
        for n in moves:
            counter.advance(n)
    return [r.getMessage() for r in caplog.records]


def test_log_lines_say_done_of_total_with_rate(caplog) -> None:
    lines = logged_lines(caplog, 0, "mining hard negatives", 3, "queries", [1, 2])
    assert lines[0].startswith("mining hard negatives: 1 of 3 queries (33%), ")
    assert "left" in lines[0] and lines[0].endswith("left")
    assert lines[-1].startswith("mining hard negatives: 3 of 3 queries (100%), ")
    assert "left" not in lines[-1]


def test_log_lines_wait_their_interval_and_skip_short_steps(caplog) -> None:
    # an hour between lines, and the step took less than that
    assert logged_lines(caplog, 3600, "writing train shards", 10, "rows", [5, 5]) == []


def test_durations_read_as_a_person_writes_them() -> None:
    assert progress.duration_text(12.4) == "12s"
    assert progress.duration_text(250) == "4m10s"
    assert progress.duration_text(7500) == "2h05m"
