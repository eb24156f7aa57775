"""The report's temperature section: what same-product candidates cost the InfoNCE loss at each
temperature on the build's own scores (loss floor, gradient share), beside the background texts'
worked two-row example."""

from __future__ import annotations

from typing import Any

import numpy as np

from pairsieve.config import PairsieveConfig
from pairsieve.report import impact
from pairsieve.report.sections import chart, section
from pairsieve.report.wording import display_name


def temperature_section(
    cfg: PairsieveConfig,
    positive_scores: np.ndarray,
    false_scores: np.ndarray,
    true_scores: np.ndarray,
) -> dict[str, Any]:
    """Loss floor and gradient share of same-product candidates per τ, and the worked example."""
    temperatures = list(cfg.report.temperatures)
    data = impact.temperature_table(positive_scores, false_scores, true_scores, temperatures)
    worked = impact.worked_example(sorted({*temperatures, 1.0, 0.1, 0.02}, reverse=True))
    figures = {
        "rows_scored": int(len(positive_scores)),
        "rows_with_same_product_candidate": data[0]["rows_with_false_negative"] if data else 0,
        "floor_one_exact_copy": impact.copies_floor(1),
        "floor_two_exact_copies": impact.copies_floor(2),
    }
    notes = [
        "Loss floor log(1+e^(−δ/τ)) with δ = positive score − nearest same-product candidate; "
        "gradient share = Σ p(false negatives) / Σ p(all negatives), against the row's kept "
        "negatives. Worked example: scores (0.9, 0.6) and (0.7, 0.8), positives on the diagonal; "
        "the duplicate adds a copy of row 2's positive (0.8).",
        "A negative mean gap means the same-product candidate scores above the positive on "
        "average: the loss then cannot fall below log(1+e^(|δ|/τ)), which grows as τ shrinks.",
    ]
    return section(
        "Temperature",
        figures=figures,
        tables={"on this data": data, "worked 2-pair example": worked},
        charts=_temperature_charts(temperatures, data, worked),
        notes=notes,
    )


def _temperature_charts(
    temperatures: list[float], data: list[dict[str, Any]], worked: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    return [
        chart(
            "loss-floor",
            "Mean loss floor from the nearest same-product candidate, by temperature",
            temperatures,
            {"mean loss floor": [r["mean_loss_floor"] for r in data]},
            x_label="temperature τ",
            y_label="loss floor (nats)",
        ),
        chart(
            "gradient-share",
            "Share of the push on negatives owned by same-product candidates",
            temperatures,
            {"same-product share": [r["false_negative_gradient_share"] for r in data]},
            x_label="temperature τ",
            y_label="share of the gradient (%)",
            percent=True,
        ),
        chart(
            "worked-example",
            "Worked 2-pair example: loss by temperature",
            [r["tau"] for r in worked],
            {
                display_name(k): [r[k] for r in worked]
                for k in ("row1_loss", "row2_loss", "mean_loss", "row2_with_duplicate_loss")
            },
            x_label="temperature τ",
            y_label="InfoNCE loss (nats)",
        ),
    ]
