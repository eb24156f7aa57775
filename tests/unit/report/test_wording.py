"""The page's words: a label with its unit for every key a report shows, readable numbers, and a
sentence under every chart."""

from __future__ import annotations

from typing import Any

from pairsieve.report import html as report_html
from pairsieve.report import wording

Y_LABEL_FITS = 34  # characters the rotated y label shows beside a chart's plot area


def unlabelled(report: dict[str, Any]) -> list[str]:
    """Keys a report's page would show under their raw name, and charts without a unit or a
    sentence (an empty list when the page reads as words)."""
    missing = []
    for name, sec in report.items():
        if not isinstance(sec, dict) or "figures" not in sec:
            continue
        shown = [] if sec.get("lead") else list(sec["figures"])
        shown += [column for rows in sec["tables"].values() for column in (rows[0] if rows else [])]
        missing += [f"{name}: {key}" for key in shown if key not in wording.DISPLAY_NAMES]
        for spec in sec["charts"]:
            if not spec.get("y_label") or not spec.get("reading"):
                missing.append(f"{name}: chart {spec['id']} lacks a unit or a sentence")
            elif len(spec["y_label"]) > Y_LABEL_FITS:
                missing.append(f"{name}: chart {spec['id']} y label is clipped")
            missing += [
                f"{name}: chart {spec['id']} series {series['name']}"
                for series in spec["series"]
                if "_" in series["name"]
            ]
    return missing


def test_values_are_written_by_their_kind():
    assert wording.value_text("share_with_duplicate", 0.3834) == "38.3%"
    assert wording.value_text("kappa_product", 0.000412) == "0.0412%"
    assert wording.value_text("listings", 27_600) == "27,600"
    assert wording.value_text("mean_loss_floor", 0.693147) == "0.693"
    assert wording.value_text("false_negatives_per_anchor", 0.2143) == "0.214"
    assert wording.value_text("balanced", True) == "yes"
    assert wording.value_text("reason", "<same>") == "&lt;same&gt;"
    assert wording.value_text("pairwise_f1", None) == "–"
    assert report_html.tick_text(27_600) == "27.6k"
    assert report_html.tick_text(1_250_000) == "1.25M"
    assert report_html.tick_text(0.383, percent=True) == "38.3%"
    assert report_html.tick_text(0.05) == "0.05"


def test_every_chart_id_has_its_sentence():
    from pairsieve.report import sections

    spec = sections.chart(
        "vetoes", "Merges vetoed", ["brand_conflict"], {"pairs": [3]}, y_label="pairs"
    )
    assert spec["reading"] == wording.READINGS["vetoes"]
