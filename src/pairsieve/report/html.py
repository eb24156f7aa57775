"""Rendering of the report dict as ONE self-contained HTML page with inline SVG charts.

No scripts or styles are fetched: the page opens from a file with no network. Every chart is an
``<svg id="chart-…" data-chart="…">`` built from a chart spec in ``report["charts"]``, so the
numbers behind each picture are also in report.json. A tiny inline script counts the rendered
charts into ``<body data-charts-rendered>``, which the headless-browser test reads back.
"""

from __future__ import annotations

import html
import math
from typing import Any

from pairsieve.report.wording import display_name, value_text

WIDTH, HEIGHT = 900, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 250, 28, 64  # the legend sits in the right margin
COLOURS = ("#3b6ea8", "#d9822b", "#5b9a57", "#b8463c", "#7b5ea7", "#8c8c8c")

_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:980px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{border-bottom:1px solid #ccc;padding-bottom:.2rem;margin-top:2.2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem;display:block;overflow-x:auto}
td,th{border:1px solid #ddd;padding:.25rem .5rem;text-align:right}
th{background:#f3f3f3}td.t,th.t{text-align:left}
.note{color:#555;font-size:.9rem}.rec{background:#f6f8fb;border-left:4px solid #3b6ea8;
padding:.5rem .8rem;margin:.5rem 0}svg{display:block;margin:.6rem 0}
svg text{font-size:11px;fill:#333}
#headline{background:#f6f8fb;border-left:4px solid #3b6ea8;padding:.2rem 1rem .6rem}
#headline h2{border:none;margin-top:.8rem}.lead{font-size:1.15rem;line-height:1.5}
"""

_SCRIPT = """
document.addEventListener('DOMContentLoaded', function () {
  var charts = document.querySelectorAll('svg[data-chart]');
  var drawn = 0;
  charts.forEach(function (svg) { if (svg.querySelector('[data-value]')) { drawn += 1; } });
  document.body.setAttribute('data-charts-rendered', String(drawn));
  var headline = document.getElementById('headline');
  if (headline) {
    var bottom = Math.ceil(headline.getBoundingClientRect().bottom);
    document.body.setAttribute('data-headline-bottom', String(bottom));
  }
});
"""


def table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """An HTML table of ``rows`` (dicts) under the columns' human labels, values written by their
    kind (`wording.value_text`); columns in the order given or of the first row."""
    if not rows:
        return '<p class="note">nothing to show</p>'
    columns = columns or list(rows[0])
    head = "".join(
        f'<th class="{_align(rows[0].get(c))}">{html.escape(display_name(c))}</th>' for c in columns
    )
    body = "".join(
        "<tr>"
        + "".join(f'<td class="{_align(r.get(c))}">{value_text(c, r.get(c))}</td>' for c in columns)
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def figures_table(figures: dict[str, Any]) -> str:
    """A section's figures, one per row: what it is (with its unit) and its value."""
    body = "".join(
        f'<tr><td class="t">{html.escape(display_name(k))}</td><td>{value_text(k, v)}</td></tr>'
        for k, v in figures.items()
    )
    return f'<table><tr><th class="t">figure</th><th>value</th></tr>{body}</table>'


def _align(value: Any) -> str:
    return "t" if isinstance(value, str) else ""


def tick_text(value: float, percent: bool = False) -> str:
    """An axis or bar value as a person reads it: ``27.6k``, ``1.2M``, ``0.05``, ``38%``."""
    if percent:
        return f"{100 * value:.3g}%"
    size = abs(value)
    if size >= 1e6:
        return f"{value / 1e6:.3g}M"
    if size >= 1e3:
        return f"{value / 1e3:.3g}k"
    return f"{value:.3g}" if size >= 1e-3 or size == 0 else f"{value:.1e}"


def _scale(values: list[float], log: bool) -> tuple[float, float]:
    finite = [v for v in values if v is not None and (v > 0 or not log)]
    if not finite:
        return (0.0, 1.0)
    if log:
        return (math.log10(min(finite)) - 0.1, math.log10(max(finite)) + 0.1)
    top = max(finite)
    return (min(0.0, min(finite)), top if top > 0 else 1.0)


def _y(value: float, lo: float, hi: float, log: bool) -> float:
    v = math.log10(value) if log else value
    frac = 0.0 if hi == lo else (v - lo) / (hi - lo)
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - frac)


def _frame(spec: dict[str, Any], lo: float, hi: float, log: bool) -> list[str]:
    """Title, axes, y ticks and legend of a chart."""
    parts = [
        f'<text x="{LEFT}" y="16" font-weight="bold">{html.escape(spec["title"])}</text>',
        f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" '
        'stroke="#444"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{HEIGHT - BOTTOM}" stroke="#444"/>',
    ]
    for i in range(5):
        v = lo + (hi - lo) * i / 4
        value = 10**v if log else v
        tick = tick_text(value, bool(spec.get("percent")))
        y = _y(value, lo, hi, log)
        parts.append(f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{tick}</text>')
    parts.append(
        f'<text x="12" y="{TOP + (HEIGHT - TOP - BOTTOM) / 2}" transform="rotate(-90 12 '
        f'{TOP + (HEIGHT - TOP - BOTTOM) / 2})" text-anchor="middle">'
        f"{html.escape(spec.get('y_label', ''))}</text>"
    )
    for i, series in enumerate(spec["series"]):
        x = WIDTH - RIGHT + 16
        parts.append(
            f'<rect x="{x}" y="{TOP + 14 * i - 8}" width="10" height="10" '
            f'fill="{COLOURS[i % len(COLOURS)]}"/><text x="{x + 14}" y="{TOP + 14 * i + 1}">'
            f"{html.escape(series['name'])}</text>"
        )
    return parts


def _bars(spec: dict[str, Any], lo: float, hi: float, log: bool) -> list[str]:
    categories = spec["categories"]
    n_series = len(spec["series"])
    slot = (WIDTH - LEFT - RIGHT) / max(len(categories), 1)
    bar = slot * 0.8 / n_series
    base = HEIGHT - BOTTOM
    parts = []
    for c, category in enumerate(categories):
        x0 = LEFT + c * slot + slot * 0.1
        for s, series in enumerate(spec["series"]):
            value = series["values"][c]
            if value is None:
                continue
            # a zero on a log axis is drawn as a zero-height bar: present, with its value
            y = base if log and value <= 0 else _y(value, lo, hi, log)
            parts.append(
                f'<rect x="{x0 + s * bar:.1f}" y="{min(y, base):.1f}" width="{bar:.1f}" '
                f'height="{abs(base - y):.1f}" fill="{COLOURS[s % len(COLOURS)]}" '
                f'data-value="{value}"><title>{html.escape(series["name"])} '
                f"{html.escape(str(category))}: {tick_text(value, bool(spec.get('percent')))}"
                "</title></rect>"
            )
        if len(categories) <= 24 or c % max(1, len(categories) // 12) == 0:
            parts.append(
                f'<text x="{x0 + slot * 0.4:.1f}" y="{base + 14}" text-anchor="end" '
                f'transform="rotate(-35 {x0 + slot * 0.4:.1f} {base + 14})">'
                f"{html.escape(str(category))}</text>"
            )
    return parts


def svg_chart(spec: dict[str, Any]) -> str:
    """One chart spec ({id, title, categories, series:[{name, values}], y_label, log}) as SVG."""
    log = bool(spec.get("log"))
    values = [v for series in spec["series"] for v in series["values"]]
    lo, hi = _scale(values, log)
    parts = _frame(spec, lo, hi, log) + _bars(spec, lo, hi, log)
    if spec.get("x_label"):
        parts.append(
            f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 4}" text-anchor="middle">'
            f"{html.escape(spec['x_label'])}</text>"
        )
    return (
        f'<svg id="chart-{spec["id"]}" data-chart="{spec["id"]}" xmlns="http://www.w3.org/2000/svg"'
        f' width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{html.escape(spec["title"])}">' + "".join(parts) + "</svg>"
    )


def render_page(title: str, blocks: list[tuple[str, str, str]], subtitle: str = "") -> str:
    """The page: ``blocks`` are (section id, heading, inner HTML)."""
    body = "".join(
        f'<section id="{sid}"><h2>{html.escape(heading)}</h2>{inner}</section>'
        for sid, heading, inner in blocks
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
        f"<script>{_SCRIPT}</script></head><body><h1>{html.escape(title)}</h1>"
        f'<p class="note">{html.escape(subtitle)}</p>{body}</body></html>\n'
    )


def render_section(section_id: str, sec: dict[str, Any]) -> tuple[str, str, str]:
    """One report section (figures, tables, charts, notes) as a (id, heading, html) block."""
    parts = [f'<p class="lead">{html.escape(" ".join(sec["lead"]))}</p>'] if sec.get("lead") else []
    if sec["figures"] and not sec.get("lead"):  # a lead says its figures in words
        parts.append(figures_table(sec["figures"]))
    for caption, rows in sec["tables"].items():
        parts.append(f"<h3>{html.escape(caption)}</h3>{table(rows)}")
    parts += [
        svg_chart(spec) + f'<p class="note reading">{html.escape(spec["reading"])}</p>'
        for spec in sec["charts"]
        if spec["categories"]
    ]
    parts += [f'<p class="note">{html.escape(note)}</p>' for note in sec["notes"]]
    return section_id, sec["title"], "".join(parts)


def render_sections(report: dict[str, Any], order: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """The report's sections in ``order``, then a list of what could not be shown."""
    blocks = [render_section(key, report[key]) for key in order if report.get(key)]
    if report.get("missing"):
        items = "".join(f"<li>{html.escape(m)}</li>" for m in report["missing"])
        blocks.append(("missing", "Not shown", f"<ul>{items}</ul>"))
    return blocks
