"""What the judgement of the candidates inside the margin did in a build: how many hard
candidates it kept above the margin, how many it dropped inside it, and the estimated share of
copies of the positive's product among those it kept (their mean probability).

The probabilities are not stored with the negatives; they are recomputed here by the mine
stage's own filter (`mine.filters.judged_rows`) from the build's files, with the copy density
the stage recorded, so the report judges exactly as mining did.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core.contract import load_result
from pairsieve.core.layout import RunLayout
from pairsieve.mine.filters import judged_rows
from pairsieve.mine.stage import listing_products

_PAIR = [S.QUERY, S.POSITIVE_LISTING_ID]


def judged_figures(cfg: PairsieveConfig, run_dir: Path) -> dict[str, Any] | None:
    """The judgement's figures for the hard-negatives section; None when the build did not
    judge (``mine.judge_margin`` off, or no mine stage)."""
    layout = RunLayout(run_dir)
    result = load_result(layout.stage_dir("mine"))
    if not cfg.mine.judge_margin or result is None or not layout.negatives_dropped.is_file():
        return None
    density = result.details.get("copy_density", {}).get("value")
    mine_cfg = cfg.mine.model_copy(update={"copy_density": density})
    columns = [*_PAIR, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK, S.POSITIVE_SCORE]
    kept = pl.read_parquet(layout.negatives, columns=columns)
    dropped = pl.scan_parquet(layout.negatives_dropped).select(*columns, S.REASON)
    inside_reasons = dropped.filter(pl.col(S.REASON).is_in(["judged_copy", "margin"]))
    reasons = dict(
        inside_reasons.group_by(pl.col(S.REASON).cast(pl.String)).len().collect().iter_rows()
    )
    rows = pl.concat([kept, dropped.drop(S.REASON).collect(engine="streaming")])
    candidates = rows.select(S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK).unique()
    positives = rows.select(*_PAIR, S.POSITIVE_SCORE).unique()
    products = listing_products(pl.read_parquet(layout.listings), pl.read_parquet(layout.products))
    judged = judged_rows(candidates.sort(S.QUERY, S.RANK), positives, products, mine_cfg)
    above = kept.join(judged.select(*_PAIR, S.NEGATIVE_LISTING_ID, "p_copy"),
                      on=[*_PAIR, S.NEGATIVE_LISTING_ID])  # fmt: skip
    return {
        "copy_density": density,
        "kept_above_margin": above.height,
        "kept_above_margin_share": above.height / max(kept.height, 1),
        "estimated_copies_among_kept_above_margin": float(above["p_copy"].mean() or 0.0),
        "dropped_inside_margin_judged_copy": int(reasons.get("judged_copy", 0)),
        "dropped_inside_margin_undecided": int(reasons.get("margin", 0)),
    }
