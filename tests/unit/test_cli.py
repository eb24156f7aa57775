"""The command line's own output: the end-of-build summary fits a terminal of 80 columns."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from pairsieve.terminal import build_summary


def _stage(rows_in: int, rows_out: int, reasons: dict[str, int], skipped: bool = False) -> dict:
    return {
        "rows_in": rows_in,
        "rows_out": rows_out,
        "dropped_by_reason": reasons,
        "timings": {"total_s": 1234.5678},
        "skipped": skipped,
    }


def test_the_summary_fits_80_columns_with_reasons_listed_under_it():
    many = {f"reason_{i}": 10**7 + i for i in range(12)}
    summary = {
        "ingest": _stage(2_000_000, 1_200_000, {"aggregated": 800_000, "empty_title": 0}),
        "cluster": _stage(996_997, 996_997, {}, skipped=True),
        "mine": _stage(123_456_789, 737_111, many),
        "shards": _stage(190_000, 180_000, {"too_few_negatives": 10_000}),
        "report": _stage(180_000, 180_000, {}),
    }
    table, lines = build_summary(summary, Path("runs/a-rather-long-build-folder-name"))
    console = Console(width=80, record=True, color_system=None)
    console.print(table)
    rendered = console.export_text().splitlines()
    assert max(len(line) for line in rendered) <= 80
    assert len(rendered) == 4 + len(summary) + 1  # title, 3 header lines, a row each, bottom
    assert "up to date" in rendered[5] and "123,456,789" in rendered[6]
    assert lines[0] == "ingest dropped: aggregated=800,000"  # zero counts are left out
    assert lines[1].startswith("mine dropped: reason_0=10,000,000, ")
    assert lines[-1].endswith("report.html")
