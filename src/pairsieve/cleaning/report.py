"""The clean's report: the audit before and after, what was replaced and why, every row counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.cleaning.repair import DROPPED, KEPT, REPLACED
from pairsieve.report import sections as R
from pairsieve.report.stage import REPORT_SCHEMA_VERSION

EXAMPLES = 10  # replaced negatives shown


def _rates(figures: dict[str, Any], when: str) -> dict[str, Any]:
    """An audit's rate (estimated, with its interval when it has one, corrected by the labels
    when it used some) and its cluster count, named for ``when`` (before or after)."""
    found = {
        f"false_negative_rate_{when}": figures["false_negative_rate"],
        f"false_negative_rate_by_cluster_{when}": figures["false_negative_rate_by_cluster"],
    }
    for key in ("false_negative_rate_ci", "labels_used"):
        if key in figures:
            found[f"{key}_{when}"] = figures[key]
    return found


def clean_section(
    before: dict[str, Any], after: dict[str, Any], slots: pl.DataFrame, rows: dict[str, int]
) -> dict[str, Any]:
    """The rates before and after, the negatives kept, replaced and dropped by reason, and the
    highest-placed replacements as examples."""
    actions = dict(slots["action"].value_counts().iter_rows())
    figures = {
        **_rates(before, "before"),
        **_rates(after, "after"),
        **rows,
        "negatives": slots.height,
        "negatives_kept": actions.get(KEPT, 0),
        "negatives_replaced": actions.get(REPLACED, 0),
        "negatives_dropped": actions.get(DROPPED, 0),
    }
    by_reason = (
        slots.filter(pl.col("action") != KEPT)
        .group_by(S.REASON)
        .agg(
            (pl.col("action") == REPLACED).sum().alias("replaced"),
            (pl.col("action") == DROPPED).sum().alias("dropped"),
        )
        .sort(S.REASON)
    )
    examples = (
        slots.filter(pl.col("action") == REPLACED)
        .sort("slot", "file", "row")
        .select(S.ANCHOR, S.POSITIVE, "negative", S.REASON, "replacement")
        .head(EXAMPLES)
    )
    estimated = [figures["false_negative_rate_before"], figures["false_negative_rate_after"]]
    by_cluster = [
        figures["false_negative_rate_by_cluster_before"],
        figures["false_negative_rate_by_cluster_after"],
    ]
    return R.section(
        "Clean: the dataset's false negatives before and after",
        figures=figures,
        tables={
            "negatives replaced or dropped, by reason": by_reason.to_dicts(),
            "replaced negatives, first places first": examples.to_dicts(),
        },
        charts=[
            R.chart(
                "clean-before-after",
                "Share of the negatives that are the positive's product",
                ["before", "after"],
                {"estimated": estimated, "by pairsieve's clusters": by_cluster},
                y_label="share of negatives (%)",
                percent=True,
            )
        ],
        notes=[
            "Each negative is judged against its positive as pairsieve's miner judges a "
            "candidate; an unsafe one gives its place to the best safe negative mined from the "
            "same texts that the row does not hold, and is dropped only when none is left. "
            "Both rates are the audit's, run on the dataset before and on the repaired one "
            "after (before/ and after/ hold their full reports)."
        ],
    )


def clean_report(
    dataset: Path,
    before: dict[str, Any],
    after: dict[str, Any],
    slots: pl.DataFrame,
    dropped_rows: pl.DataFrame,
    rows_in: int,
) -> dict[str, Any]:
    """The report dict (`report.stage.write_report`): the clean section and the accounting of
    rows and negatives."""
    dropped = dict(dropped_rows[S.REASON].value_counts().sort(S.REASON).iter_rows())
    rows = {
        "rows_read": rows_in,
        "rows_written": rows_in - sum(dropped.values()),
        "rows_dropped": sum(dropped.values()),
    }
    section = clean_section(before, after, slots, rows)
    figures = section["figures"]
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "clean",
        "title": "pairsieve clean: a contrastive dataset repaired",
        "subtitle": f"dataset {dataset}",
        "false_negative_rate": figures["false_negative_rate_after"],
        "clean": section,
        "accounting": R.section(
            "Accounting",
            tables={
                "rows": [{**rows, **dropped}],
                "negatives": [
                    {
                        "negatives": figures["negatives"],
                        "negatives_kept": figures["negatives_kept"],
                        "negatives_replaced": figures["negatives_replaced"],
                        "negatives_dropped": figures["negatives_dropped"],
                    }
                ],
            },
        ),
    }
