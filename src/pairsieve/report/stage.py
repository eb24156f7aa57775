"""The `report` stage: what duplicates would cost a trainer, and what the pipeline removed.

`run` reads whatever the other stages left in a run folder; a section whose inputs are absent is
skipped and named under ``missing``, so the report also works on partial runs. It writes
``report.json`` (every number shown, with ``schema_version``) and ``report.html`` (one
self-contained page with inline SVG charts, no network needed). `report_artifacts` turns the
report into the Prefect markdown and table artifacts the build flow publishes.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult, load_result
from pairsieve.core.layout import RunLayout
from pairsieve.report import html as report_html
from pairsieve.report import sections as R
from pairsieve.report.duplicates import duplicates_section
from pairsieve.report.headline import headline_section
from pairsieve.report.judged import Judged, judged
from pairsieve.report.labelled import NOTE as LABELS_NOTE
from pairsieve.report.labelled import label_figures
from pairsieve.report.recommendations import recommendations_section
from pairsieve.report.temperature import temperature_section
from pairsieve.report.wording import display_name, value_text

log = logging.getLogger(__name__)

REPORT_SCHEMA_VERSION = 1
SECTION_ORDER = (
    "headline",
    "clean",
    "audit",
    "accounting",
    "changes",
    "duplicates",
    "batches",
    "temperature",
    "hard_negatives",
    "quality",
    "recommendations",
)
FIRST_BUILD_ABSENT = {"changes"}  # sections a first build has nothing for: not "missing"


def _read(path: Path, columns: list[str] | None = None) -> pl.DataFrame | None:
    files = sorted(path.parent.glob(path.name)) if "*" in path.name else [path]
    files = [f for f in files if f.is_file()]
    return pl.read_parquet(files, columns=columns) if files else None


def padded(lists: list[list[float] | None]) -> np.ndarray:
    """Ragged score lists as a (rows, max_len) float64 array padded with -inf."""
    width = max((len(x) for x in lists if x), default=0)
    out = np.full((len(lists), max(width, 1)), -np.inf)
    for i, values in enumerate(lists):
        if values:
            out[i, : len(values)] = values
    return out


# --- sections from a run folder ------------------------------------------------------------------


def stage_results(run_dir: Path) -> dict[str, StageResult]:
    """The recorded result of every stage before the report, in pipeline order."""
    layout = RunLayout(run_dir)
    found = {name: load_result(layout.stage_dir(name)) for name in S.STAGES[:-1]}
    return {name: result for name, result in found.items() if result is not None}


def changes_from_run(run_dir: Path) -> dict[str, Any] | None:
    layout = RunLayout(run_dir)
    return R.changes_section(
        load_result(layout.stage_dir("cluster")),
        load_result(layout.stage_dir("mine")),
        _read(layout.id_changes),
    )


def duplicates_from_run(cfg: PairsieveConfig, run_dir: Path) -> dict[str, Any] | None:
    products = _read(RunLayout(run_dir).products)
    titles = _read(RunLayout(run_dir).listings, [S.LISTING_ID, S.TITLE])
    if products is None:
        return None
    if titles is None:
        titles = products.select(S.LISTING_ID, pl.col(S.CANONICAL_TITLE).alias(S.TITLE))
    pairs = RunLayout(run_dir).pairs
    scanned = pl.scan_parquet(pairs) if pairs.is_file() else None
    return duplicates_section(products, titles, scanned, cfg.report.largest_clusters)


def click_rows(run_dir: Path) -> pl.DataFrame | None:
    """The clicked (query, listing) pairs with their title and product: what a trainer without
    pairsieve would batch."""
    clicks = _read(RunLayout(run_dir).clicks, [S.QUERY, S.LISTING_ID])
    products = _read(RunLayout(run_dir).products, [S.LISTING_ID, S.PRODUCT_ID])
    titles = _read(RunLayout(run_dir).listings, [S.LISTING_ID, S.TITLE])
    if clicks is None or products is None or titles is None:
        return None
    return (
        clicks.unique()
        .join(products, on=S.LISTING_ID)
        .join(titles, on=S.LISTING_ID)
        .sort(S.QUERY, S.LISTING_ID)
    )


def shard_replay(cfg: PairsieveConfig, run_dir: Path) -> dict[str, Any] | None:
    """Product ids of the train shards' rows in file order (positives, and negatives (rows, k))."""
    shards = _read(RunLayout(run_dir).train_shards)
    if shards is None or shards.is_empty():
        return None
    labels = shards[S.LABEL].list.to_array(shards[S.LABEL].list.len().max()).to_numpy()
    manifest_path = RunLayout(run_dir).manifest
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    return {
        "positives": labels[:, 0],
        "negatives": labels[:, 1:] if labels.shape[1] > 1 else None,
        "texts": shards[S.POSITIVE].to_numpy(),
        "batch_size": int(manifest.get("batch_size", cfg.shards.batch_size)),
        "orders": ["shard order", "seeded shuffle"],
    }


def batches_from_run(cfg: PairsieveConfig, run_dir: Path) -> dict[str, Any] | None:
    """κ tables over the clicked pairs (over the shard rows when ingest outputs are absent), and
    the shards replayed in their order and in a seeded shuffle."""
    rows = click_rows(run_dir)
    replay = shard_replay(cfg, run_dir)
    if rows is not None:
        texts, products = rows[S.TITLE].to_numpy(), rows[S.PRODUCT_ID].to_numpy()
    elif replay is not None:
        texts, products = replay["texts"], replay["positives"]
    else:
        return None
    return R.batches_section(cfg, texts, products, replay)


_PAIR = [S.QUERY, S.POSITIVE_LISTING_ID]


@dataclass(frozen=True)
class MineScores:
    """What the sections read of the mine stage's files: the ``kept`` rows (pair, score), the
    dropped ``same_product`` rows, the scores of the rows dropped for ``other`` reasons, rows
    dropped per reason, and one row per (query, positive) with its ``positive_score``. The
    dropped file (~100 rows per pair, tens of millions at 10^6 listings) is scanned for these,
    never read whole."""

    kept: pl.DataFrame
    same_product: pl.DataFrame
    other: np.ndarray
    reasons: dict[str, int]
    positives: pl.DataFrame


def mine_scores(run_dir: Path) -> MineScores | None:
    layout = RunLayout(run_dir)
    columns = [*_PAIR, S.SCORE, S.POSITIVE_SCORE]
    kept = _read(layout.negatives, columns)
    if kept is None or not layout.negatives_dropped.is_file():
        return None
    dropped = pl.scan_parquet(layout.negatives_dropped).select(*columns, S.REASON)
    is_same = pl.col(S.REASON) == "same_product"
    counts = dropped.group_by(S.REASON).len().collect(engine="streaming")
    reasons = dict(sorted(counts.with_columns(pl.col(S.REASON).cast(pl.String)).iter_rows()))
    same = dropped.filter(is_same).select(columns).collect(engine="streaming")
    other = dropped.filter(~is_same).select(S.SCORE).collect(engine="streaming")
    firsts = dropped.select(*_PAIR, S.POSITIVE_SCORE).unique(_PAIR).collect(engine="streaming")
    kept_firsts = kept.select(*_PAIR, S.POSITIVE_SCORE).unique(_PAIR)
    positives = pl.concat([kept_firsts, firsts]).unique(_PAIR).sort(_PAIR)
    return MineScores(kept, same, other[S.SCORE].to_numpy(), reasons, positives)


def temperature_from_run(cfg: PairsieveConfig, mined: MineScores | None) -> dict[str, Any] | None:
    """Per mined (query, positive): its score, the same-product candidates the miner dropped,
    and the negatives it kept."""
    if mined is None:
        return None
    false = mined.same_product.group_by(_PAIR).agg(pl.col(S.SCORE).alias("_false"))
    true = mined.kept.group_by(_PAIR).agg(pl.col(S.SCORE).alias("_true"))
    rows = mined.positives.join(false, on=_PAIR, how="left").join(true, on=_PAIR, how="left")
    rows = rows.sort(_PAIR)
    return temperature_section(
        cfg,
        rows[S.POSITIVE_SCORE].to_numpy().astype(np.float64),
        padded(rows["_false"].to_list()),
        padded(rows["_true"].to_list()),
    )


def hard_negatives_from_run(
    mined: MineScores | None, judged: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The section, with what the judgement of the candidates inside the margin did
    (`report.judged`) when the build judged them."""
    if mined is None:
        return None
    kept, same = mined.kept, mined.same_product
    figures = {
        "negatives_kept": kept.height,
        "candidates_dropped": sum(mined.reasons.values()),
        "same_product_dropped": same.height,
        # of the candidates a product-blind miner could have kept (kept + same-product), the share
        # that was the positive's product
        "same_product_share_of_eligible": same.height / max(kept.height + same.height, 1),
        **(judged or {}),
    }
    scores = {
        "positives": mined.positives[S.POSITIVE_SCORE].to_numpy(),
        "kept negatives": kept[S.SCORE].to_numpy(),
        "dropped: same product": same[S.SCORE].to_numpy(),
        "dropped: other reasons": mined.other,
    }
    return R.hard_negatives_section(figures, mined.reasons, scores)


def quality_from_run(cfg: PairsieveConfig, run_dir: Path) -> dict[str, Any] | None:
    truth = cfg.ingest.truth_column
    products = _read(RunLayout(run_dir).products)
    listings = _read(RunLayout(run_dir).listings)
    if not truth or products is None or listings is None or truth not in listings.columns:
        return None
    joined = products.join(listings.select(S.LISTING_ID, truth), on=S.LISTING_ID)
    return R.quality_section(joined[S.PRODUCT_ID], joined[truth])


# --- the stage -----------------------------------------------------------------------------------


def build_report(
    cfg: PairsieveConfig,
    run_dir: Path,
    labels: tuple[Path, ...] = (),
    judgement: Judged | None = None,
) -> dict[str, Any]:
    """Every section that the run folder has inputs for; absent ones are listed in ``missing``.
    With ``labels`` (label files), the duplicates and hard-negatives sections add the estimates
    they correct; ``judgement`` is what the judgement of the margin did (`report.judged`)."""
    mined = mine_scores(run_dir)
    judged_figures = judgement.with_labels(labels) if judgement else None
    builders = {
        "accounting": lambda: R.accounting_section(stage_results(run_dir)),
        "changes": lambda: changes_from_run(run_dir),
        "duplicates": lambda: duplicates_from_run(cfg, run_dir),
        "batches": lambda: batches_from_run(cfg, run_dir),
        "temperature": lambda: temperature_from_run(cfg, mined),
        "hard_negatives": lambda: hard_negatives_from_run(mined, judged_figures),
        "quality": lambda: quality_from_run(cfg, run_dir),
    }
    report: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "build",
        "title": "pairsieve duplicate-impact report",
        "subtitle": f"build folder {RunLayout(run_dir).published}",
        "missing": [],
    }
    for key, build in builders.items():
        report[key] = build()
        if report[key] is None and key not in FIRST_BUILD_ABSENT:
            report["missing"].append(f"{key}: inputs absent in {RunLayout(run_dir).published}")
    if labels and report["duplicates"] is not None:
        report["duplicates"]["figures"].update(label_figures(run_dir, labels))
        report["duplicates"]["notes"].append(LABELS_NOTE)
    report["recommendations"] = recommendations_section(cfg, report)
    report["headline"] = headline_section(report)
    return report


def all_charts(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every chart spec of every section present, in page order (empty charts left out)."""
    return [
        spec
        for key in SECTION_ORDER
        if report.get(key)
        for spec in report[key]["charts"]
        if spec["categories"]
    ]


def write_report(report: dict[str, Any], out_dir: Path) -> dict[str, str]:
    """Write report.json and report.html into ``out_dir``; returns the outputs map."""
    report = {**report, "chart_ids": [spec["id"] for spec in all_charts(report)]}
    io.write_json(report, Path(out_dir) / S.REPORT_JSON)
    page = report_html.render_page(
        report["title"],
        report_html.render_sections(report, SECTION_ORDER),
        report.get("subtitle", ""),
    )
    io.write_text(page, Path(out_dir) / S.REPORT_HTML)
    return {"json": S.REPORT_JSON, "html": S.REPORT_HTML}


def run(
    cfg: PairsieveConfig, inputs: RunLayout, out_dir: Path, *, labels: tuple[Path, ...] = ()
) -> StageResult:
    """Write report.html and report.json for a build folder into ``out_dir``: the report reads
    every stage's outputs, so its inputs are the folder's layout; answered ``labels`` add
    estimates with intervals.

    Rows: the training rows the collision tables were computed on (nothing is dropped).
    """
    started = time.perf_counter()
    judgement = judged(cfg, inputs.root)
    report = build_report(cfg, inputs.root, labels, judgement)
    outputs = write_report(report, Path(out_dir))
    if judgement is not None:
        outputs["judged_negatives"] = judgement.write(Path(out_dir))
    rows = report["batches"]["figures"]["training_rows"] if report.get("batches") else 0
    return StageResult(
        stage="report",
        rows_in=rows,
        rows_out=rows,
        timings={"report_s": round(time.perf_counter() - started, 3)},
        outputs=outputs,
        details={"missing": report["missing"], "charts": len(all_charts(report))},
    )


def load_report(report_dir: str | Path) -> dict[str, Any]:
    """The report.json of a report folder."""
    return json.loads((Path(report_dir) / S.REPORT_JSON).read_text())


def report_artifacts(report: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """(markdown, table) for Prefect's create_markdown_artifact / create_table_artifact: the
    headline figures and recommendations, and the product-level κ table."""
    lines = [f"# {report['title']}", ""]
    for key in SECTION_ORDER[:-1]:
        sec = report.get(key)
        if not sec or not sec["figures"]:
            continue
        lines += [f"## {sec['title']}", "", "| figure | value |", "|---|---|"]
        lines += [f"| {display_name(k)} | {value_text(k, v)} |" for k, v in sec["figures"].items()]
        lines.append("")
    recs = report.get("recommendations")
    if recs:
        lines += ["## Recommendations", ""]
        lines += [
            f"- {r['recommendation']} *(rests on: {r['rests_on']})*"
            for r in recs["tables"]["recommendations"]
        ]
    if report.get("missing"):
        lines += ["", "Not shown: " + "; ".join(report["missing"])]
    batches = report.get("batches")
    table = batches["tables"]["product level"] if batches else []
    return "\n".join(lines) + "\n", table
