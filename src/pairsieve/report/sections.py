"""Sections of the duplicate-impact report, built from frames and arrays (no file reading).

`pairsieve.report.stage` (a pipeline run) and `pairsieve.audits.stage` (a dataset made elsewhere)
feed them.
Every section is a plain dict ``{title, figures, tables, charts, notes}`` so report.json holds
every number the page shows; charts are bar-chart specs that `report_html` draws as SVG.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core.contract import StageResult
from pairsieve.core.facts import ClusterFacts, MineFacts
from pairsieve.report import impact
from pairsieve.report.wording import READINGS, display_name

SCORE_BINS = 24


def section(title: str, **parts: Any) -> dict[str, Any]:
    """A report section; ``parts`` may hold figures, tables, charts and notes."""
    return {
        "title": title,
        "figures": parts.get("figures", {}),
        "tables": parts.get("tables", {}),
        "charts": parts.get("charts", []),
        "notes": parts.get("notes", []),
        **({"lead": parts["lead"]} if "lead" in parts else {}),
    }


def chart(chart_id: str, title: str, categories: list[Any], series: dict[str, list], **kw: Any):
    """A bar-chart spec with the sentence that says what to read from it (`wording.READINGS`);
    ``kw`` sets y_label (with its unit) and may set x_label, log and percent (values are
    shares, drawn as percentages)."""
    return {
        "id": chart_id,
        "title": title,
        "categories": [str(c) for c in categories],
        "series": [{"name": name, "values": values} for name, values in series.items()],
        "reading": READINGS[chart_id],
        **kw,
    }


# --- sections ------------------------------------------------------------------------------------


def accounting_section(results: dict[str, StageResult]) -> dict[str, Any] | None:
    """Rows in, dropped per reason and kept, at every stage that recorded a result (in pipeline
    order)."""
    rows, reasons = [], []
    for name, result in results.items():
        rows.append(
            {
                "stage": name,
                "rows_in": result.rows_in,
                "rows_out": result.rows_out,
                "dropped": result.dropped,
                "balanced": result.balanced(),
            }
        )
        reasons += [
            {"stage": name, "reason": reason, "rows": count}
            for reason, count in sorted(result.dropped_by_reason.items())
            if count
        ]
    if not rows:
        return None
    stages = [r["stage"] for r in rows]
    return section(
        "Accounting",
        tables={"rows per stage": rows, "dropped or quarantined, by reason": reasons},
        charts=[
            chart(
                "accounting",
                "Rows in, kept and dropped per stage",
                stages,
                {display_name(k): [r[k] for r in rows] for k in ("rows_in", "rows_out", "dropped")},
                y_label="rows (log scale)",
                log=True,
            )
        ],
        notes=["Ingest counts clicks and catalog rows; mine counts candidate negatives."],
    )


def changes_section(
    cluster: StageResult | None, mine: StageResult | None, changes: pl.DataFrame | None
) -> dict[str, Any] | None:
    """What changed since the previous build (`--previous`): product ids born, merged, split and
    removed (``changes``, the cluster stage's id_changes.parquet) and what each stage reused;
    None on a first build."""
    facts = None if cluster is None else ClusterFacts.of(cluster)
    if facts is None or not facts.build_number or changes is None:
        return None
    counts = dict(changes[S.CHANGE].value_counts().iter_rows())
    kinds = ["new", "merged", "split", "removed"]
    reused_queries = MineFacts.of(mine).incremental if mine else {}
    figures = {
        "build_number": facts.build_number,
        **{f"products_{kind}": int(counts.get(kind, 0)) for kind in kinds},
        "titles_unchanged": facts.settled_nodes,
        "pairs_reused": facts.reused_pairs,
        "queries_reused": reused_queries.get("queries_reused"),
        "queries_mined": reused_queries.get("queries_mined"),
    }
    why_not = [
        f"{name}: not reused ({details['why_not']})"
        for name, details in (("cluster", facts.incremental), ("mine", reused_queries))
        if details.get("why_not")
    ]
    rows = changes.sort(S.CHANGE, S.PRODUCT_ID).head(200).to_dicts()
    return section(
        "Changes since the previous build",
        figures=figures,
        tables={"id changes (first 200)": rows},
        charts=[
            chart(
                "changes",
                "Product ids changed since the previous build",
                kinds,
                {"products": [int(counts.get(kind, 0)) for kind in kinds]},
                y_label="products",
            )
        ],
        notes=why_not
        + [
            "A merge keeps the older id (the other is its alias); a split keeps the id on the "
            "part holding most of the product's listings."
        ],
    )


def _dense(values: list[Any] | np.ndarray) -> np.ndarray:
    return np.unique(np.asarray(values, dtype=object).astype(str), return_inverse=True)[1]


def _batch_figures(
    batch_size: int,
    rows: int,
    product_sizes: np.ndarray,
    text_table: list[dict],
    product_table: list[dict],
) -> dict[str, Any]:
    """The headline figures of the in-batch section at the shards' batch size."""
    kappa_text, kappa_product = text_table[0]["kappa"], product_table[0]["kappa"]
    clean = {r["batch_size"]: r["p_batch_clean"] for r in product_table}
    return {
        "training_rows": int(rows),
        "kappa_text": kappa_text,
        "kappa_product": kappa_product,
        "share_missed_by_text_dedupe": (
            (kappa_product - kappa_text) / kappa_product if kappa_product else 0.0
        ),
        "training_batch_size": batch_size,
        "false_negatives_per_anchor_at_training_batch": impact.expected_false_negatives(
            batch_size, kappa_product
        ),
        "p_batch_clean_at_training_batch": clean[batch_size]
        if batch_size in clean
        else impact.p_batch_clean(product_sizes, batch_size),
    }


def batches_section(
    cfg: PairsieveConfig,
    text_groups: np.ndarray,
    product_groups: np.ndarray,
    replay: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """κ tables at exact-text and product level, and collisions realised by replaying batches.

    ``text_groups`` / ``product_groups``: one id per training row (its positive's text and
    product). ``replay`` (optional): {"positives": (rows,) int product ids in training order,
    "negatives": (rows, k) int, -1 padded, or None, "batch_size": B the order was made for,
    "orders": [name of the given order, name of the seeded shuffle]}.
    """
    batch_sizes = list(cfg.report.batch_sizes)
    text_sizes = np.unique(_dense(text_groups), return_counts=True)[1]
    product_sizes = np.unique(_dense(product_groups), return_counts=True)[1]
    text_table = impact.collision_table(text_sizes, batch_sizes)
    product_table = impact.collision_table(product_sizes, batch_sizes)
    kappa_text, kappa_product = text_table[0]["kappa"], product_table[0]["kappa"]
    figures = _batch_figures(
        cfg.shards.batch_size, len(product_groups), product_sizes, text_table, product_table
    )
    tables = {
        "exact-text level (NoDuplicatesBatchSampler)": text_table,
        "product level": product_table,
    }
    sizes = sorted({*batch_sizes, *([replay["batch_size"]] if replay else [])})
    sizes = [b for b in sizes if b <= len(product_groups)]
    series = {
        "expected, exact text": [impact.expected_false_negatives(b, kappa_text) for b in sizes],
        "expected, product": [impact.expected_false_negatives(b, kappa_product) for b in sizes],
    }
    if replay:
        tables["realised when replayed"] = replay_section_rows(replay, batch_sizes, cfg.seed)
        series.update(_realised_series(tables["realised when replayed"], replay["orders"], sizes))
    charts = [
        chart(
            "collisions",
            "Same-product in-batch candidates per anchor",
            sizes,
            series,
            y_label="per anchor (log scale)",
            x_label="batch size in rows (up to the number of training rows)",
            log=True,
        )
    ]
    notes = [
        "κ = Σ n_c(n_c−1)/(N(N−1)) over the rows' positives; a uniformly random batch of B holds "
        "(B−1)·κ same-group candidates per anchor. P(batch clean) is exact (sampling without "
        "replacement). Exact-text level is all NoDuplicatesBatchSampler can see."
    ]
    return section(
        "In-batch false negatives", figures=figures, tables=tables, charts=charts, notes=notes
    )


def _realised_series(realised: list[dict], orders: list[str], sizes: list[int]) -> dict:
    series = {}
    for order in orders:
        by_b = {r["batch_size"]: r for r in realised if r["order"] == order}
        series[f"realised, {order}"] = [
            by_b[b]["false_negatives_per_anchor"] if b in by_b else None for b in sizes
        ]
    return series


def replay_section_rows(replay: dict[str, Any], batch_sizes: list[int], seed: int) -> list[dict]:
    """Realised collisions for each order at its own batch size and at every table size."""
    rows = []
    positives, negatives = replay["positives"], replay.get("negatives")
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(len(positives))
    orders = {
        replay["orders"][0]: (positives, negatives),
        replay["orders"][1]: (
            positives[shuffled],
            negatives[shuffled] if negatives is not None else None,
        ),
    }
    sizes = sorted({replay["batch_size"], *batch_sizes})
    for order, (pos, neg) in orders.items():
        for b in sizes:
            if b > len(pos):
                continue
            rows.append({"order": order, **impact.realised_collisions(pos, b, neg)})
    return rows


def score_histograms(named_scores: dict[str, np.ndarray]) -> dict[str, Any]:
    """Shares of each score list per common bin (lists differ in size by orders of magnitude)."""
    present = [np.asarray(v, dtype=np.float64) for v in named_scores.values() if len(v)]
    if not present:
        return chart("scores", "Score histograms", [], {}, y_label="share of the list (%)")
    everything = np.concatenate(present)
    edges = np.linspace(float(everything.min()), float(everything.max()) + 1e-9, SCORE_BINS + 1)
    series = {}
    for name, scores in named_scores.items():
        counts = np.histogram(np.asarray(scores, dtype=np.float64), bins=edges)[0]
        series[f"{name} (n={len(scores)})"] = (counts / max(len(scores), 1)).round(5).tolist()
    return chart(
        "scores",
        "Score histograms (share of each list per bin)",
        [f"{e:.2f}" for e in edges[:-1]],
        series,
        x_label="cosine score (bin start)",
        y_label="share of the list (%)",
        percent=True,
    )


def quality_section(predicted: pl.Series, truth: pl.Series) -> dict[str, Any]:
    """Pairwise and B-cubed P/R/F1 of the clustering against a ground-truth column."""
    from pairsieve.datasets.scoring import score

    scores = score(predicted, truth).to_dict()
    metrics = ["precision", "recall", "f1"]
    return section(
        "Clustering quality",
        figures=scores,
        charts=[
            chart(
                "quality",
                "Clustering against ground truth",
                metrics,
                {
                    "pairwise": [scores[f"pairwise_{m}"] for m in metrics],
                    "B-cubed": [scores[f"bcubed_{m}"] for m in metrics],
                },
                y_label="score (%)",
                percent=True,
            )
        ],
    )


def hard_negatives_section(
    figures: dict[str, Any], dropped_by_reason: dict[str, int], named_scores: dict[str, np.ndarray]
) -> dict[str, Any]:
    """Negatives mined, dropped per reason, and score histograms of positives and negatives."""
    reasons = [
        {"reason": reason, "candidates": int(count)}
        for reason, count in sorted(dropped_by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
        if count
    ]
    charts = [score_histograms(named_scores)]
    if reasons:
        charts.insert(
            0,
            chart(
                "dropped-reasons",
                "Candidate negatives dropped, by reason",
                [r["reason"] for r in reasons],
                {"candidates": [r["candidates"] for r in reasons]},
                y_label="candidates (log scale)",
                log=True,
            ),
        )
    summaries = [
        {
            "list": name,
            "n": int(len(scores)),
            "mean": float(np.mean(scores)) if len(scores) else None,
            "median": float(np.median(scores)) if len(scores) else None,
        }
        for name, scores in named_scores.items()
    ]
    return section(
        "Hard negatives",
        figures=figures,
        tables={"dropped, by reason": reasons, "scores": summaries},
        charts=charts,
    )
