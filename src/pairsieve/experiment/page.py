"""The experiment's report section, "what it did to a model", and its page.

Built from results.json alone with the report's own sections and charts, so the page's numbers
are the file's numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pairsieve.core import io
from pairsieve.experiment.retrieval import METRICS
from pairsieve.report import html
from pairsieve.report.sections import chart, section


def _arm_name(row: dict[str, Any]) -> str:
    return row["arm"] if row["tau"] is None else f"{row['arm']} τ={row['tau']}"


def model_section(results: dict[str, Any]) -> dict[str, Any]:
    """What training on each arm's data did to held-out retrieval, with paired intervals."""
    arms = results["arms"]
    charts = [
        chart(
            f"experiment-{metric}",
            f"{metric} on held-out queries",
            [_arm_name(r) for r in arms],
            {"mean over seeds": [r[metric] for r in arms]},
            y_label=f"{metric} (%)",
            percent=True,
        )
        for metric in METRICS
    ]
    table_arms = [
        {"arm": r["arm"], "tau": str(r["tau"] or "–"), "seeds": r["seeds"]}
        | {m: r[m] for m in METRICS}
        for r in arms
    ]
    differences = [
        {k: c[k] for k in ("arm", "baseline", "metric", "difference", "ci")}
        | {"tau": str(c["tau"])}
        for c in results["comparisons"]
    ]
    shares = [
        {"arm": arm, "negatives_share": share}
        for arm, share in results["negatives_of_the_positive_product"].items()
    ]
    settings = results["settings"]
    notes = [
        f"Relevance: {results['relevance']}. {results['queries']:,} held-out queries against "
        f"{results['corpus_listings']:,} listings; {settings['steps']} steps at batch "
        f"{settings['batch_size']}, {settings['negatives']} hard negative(s) per row, "
        f"max_seq_length {settings['max_seq_length']}"
        + (
            f", losses by gradient caching {settings['mini_batch_size']} rows at a time."
            if settings.get("mini_batch_size")
            else "."
        ),
        "An interval that excludes 0 is a difference the seeds and queries agree on.",
    ]
    return section(
        "What it did to a model",
        tables={
            "held-out retrieval per arm": table_arms,
            "paired differences": differences,
            "training negatives of the positive's own product": shares,
        },
        charts=charts,
        notes=notes,
    )


def write_page(results: dict[str, Any], path: Path) -> Path:
    """The self-contained HTML page of an experiment."""
    block = html.render_section("experiment", model_section(results))
    page = html.render_page("pairsieve experiment", [block], subtitle=results["relevance"])
    return io.write_text(page, path)
