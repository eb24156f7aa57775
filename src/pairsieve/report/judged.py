"""What the judgement of the candidates inside the margin did in a build: how many hard
candidates it kept above the margin, how many it dropped inside it, and the estimated share of
copies of the positive's product among those it kept: their mean probability, corrected by
answered labels with a 95% interval when there are any (`labels.estimate`).

The kept pairs are also written beside the report, so that `pairsieve label
sample --run` can draw them (`schemas.JUDGED_PAIRS_FILE`): labels on these pairs are what
narrows the interval.

The probabilities are not stored with the negatives; they are recomputed here by the mine
stage's own filter (`mine.filters.judged_rows`) from the build's files, with the copy density
the stage recorded, so the report judges exactly as mining did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import load_result
from pairsieve.core.layout import RunLayout
from pairsieve.labels.estimate import share_from_labels
from pairsieve.labels.pairs import ROWS, pair_ids
from pairsieve.labels.store import answered
from pairsieve.mine.filters import judged_rows
from pairsieve.mine.stage import listing_products

_PAIR = [S.QUERY, S.POSITIVE_LISTING_ID]


@dataclass(frozen=True)
class Judged:
    """The judgement's figures, and the (positive, negative) listing pairs it kept above the
    margin: ``pair_id`` (a candidate pair's id, so any label on the two listings counts), the
    listings and their titles, ``p_same`` (their mean ``p_copy``) and ``rows`` (negatives)."""

    figures: dict[str, Any]
    kept_pairs: pl.DataFrame

    def with_labels(self, files: tuple[Path, ...]) -> dict[str, Any]:
        """The figures, the estimated copies corrected by the answers in ``files``."""
        if not files:
            return self.figures
        found, _ = share_from_labels(self.kept_pairs, answered(list(files)), weight=ROWS)
        return {
            **self.figures,
            "estimated_copies_among_kept_above_margin": found.value,
            "estimated_copies_among_kept_above_margin_ci": list(found.interval),
            "estimated_copies_labels_used": found.labels,
        }

    def write(self, out_dir: Path) -> str:
        """Write the kept pairs into ``out_dir``; their file name."""
        io.write_parquet(self.kept_pairs, Path(out_dir) / S.JUDGED_PAIRS_FILE)
        return S.JUDGED_PAIRS_FILE


def judged(cfg: PairsieveConfig, run_dir: Path) -> Judged | None:
    """What the judgement did in the build ``run_dir``; None when it did not judge
    (``mine.judge_margin`` off, or no mine stage)."""
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
    scored = judged_rows(candidates.sort(S.QUERY, S.RANK), positives, products, mine_cfg)
    above = kept.join(scored.select(*_PAIR, S.NEGATIVE_LISTING_ID, "p_copy"),
                      on=[*_PAIR, S.NEGATIVE_LISTING_ID])  # fmt: skip
    figures = {
        "copy_density": density,
        "kept_above_margin": above.height,
        "kept_above_margin_share": above.height / max(kept.height, 1),
        "estimated_copies_among_kept_above_margin": float(above["p_copy"].mean() or 0.0),
        "dropped_inside_margin_judged_copy": int(reasons.get("judged_copy", 0)),
        "dropped_inside_margin_undecided": int(reasons.get("margin", 0)),
    }
    return Judged(figures, _kept_pairs(above, layout))


def _kept_pairs(above: pl.DataFrame, layout: RunLayout) -> pl.DataFrame:
    titles = pl.read_parquet(layout.listings, columns=[S.LISTING_ID, S.TITLE])
    ends = [pl.col(S.POSITIVE_LISTING_ID), pl.col(S.NEGATIVE_LISTING_ID)]
    pairs = (  # unordered: either listing may have been the positive
        above.group_by(
            pl.min_horizontal(ends).alias(S.LISTING_A), pl.max_horizontal(ends).alias(S.LISTING_B)
        ).agg(pl.col("p_copy").mean().alias(S.P_SAME), pl.len().cast(pl.Int64).alias(ROWS))
    )
    for end, text in ((S.LISTING_A, "text_a"), (S.LISTING_B, "text_b")):
        named = titles.rename({S.LISTING_ID: end, S.TITLE: text})
        pairs = pairs.join(named, on=end, how="left")
    return pairs.select(
        pair_ids("candidate", S.LISTING_A, S.LISTING_B).alias("pair_id"),
        S.LISTING_A, S.LISTING_B, "text_a", "text_b", S.P_SAME, ROWS,
    ).sort("pair_id")  # fmt: skip
