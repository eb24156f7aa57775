"""What the judgement of the candidates inside the margin did in a build: how many hard
candidates it kept above the margin, how many it dropped inside it, and the estimated share of
copies of the positive's product among those it kept: their mean probability, corrected by
answered labels with a 95% interval when there are any (`labels.estimate`).

The kept pairs are also written beside the report, so that `pairsieve label
sample --run` can draw them (`schemas.JUDGED_PAIRS_FILE`): labels on these pairs are what
narrows the interval.

Everything here is read from what the mine stage wrote: the probabilities of the kept negatives
(`schemas.NEGATIVES_JUDGEMENT_FILE`), and its counts of rows dropped by reason and kept.
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
from pairsieve.core.facts import MineFacts
from pairsieve.core.layout import RunLayout
from pairsieve.labels.estimate import share_from_labels
from pairsieve.labels.pairs import ROWS, pair_ids
from pairsieve.labels.store import answered


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
    (``mine.judge_margin`` off, no mine stage, or one that wrote no judgement)."""
    layout = RunLayout(run_dir)
    result = load_result(layout.stage_dir("mine"))
    if not cfg.mine.judge_margin or result is None or not layout.negatives_judgement.is_file():
        return None
    above = pl.read_parquet(layout.negatives_judgement)
    reasons = result.dropped_by_reason
    figures = {
        "copy_density": MineFacts.of(result).copy_density,
        "kept_above_margin": above.height,
        "kept_above_margin_share": above.height / max(result.rows_out, 1),
        "estimated_copies_among_kept_above_margin": float(above[S.P_COPY].mean() or 0.0),
        "dropped_inside_margin_judged_copy": int(reasons.get("judged_copy", 0)),
        "dropped_inside_margin_query_cannot_tell": int(reasons.get("query_cannot_tell", 0)),
        "dropped_inside_margin_undecided": int(reasons.get("margin", 0)),
    }
    return Judged(figures, _kept_pairs(above, layout))


def _kept_pairs(above: pl.DataFrame, layout: RunLayout) -> pl.DataFrame:
    titles = pl.read_parquet(layout.listings, columns=[S.LISTING_ID, S.TITLE])
    ends = [pl.col(S.POSITIVE_LISTING_ID), pl.col(S.NEGATIVE_LISTING_ID)]
    pairs = (  # unordered: either listing may have been the positive
        above.group_by(
            pl.min_horizontal(ends).alias(S.LISTING_A), pl.max_horizontal(ends).alias(S.LISTING_B)
        ).agg(pl.col(S.P_COPY).mean().alias(S.P_SAME), pl.len().cast(pl.Int64).alias(ROWS))
    )
    for end, text in ((S.LISTING_A, "text_a"), (S.LISTING_B, "text_b")):
        named = titles.rename({S.LISTING_ID: end, S.TITLE: text})
        pairs = pairs.join(named, on=end, how="left")
    return pairs.select(
        pair_ids("candidate", S.LISTING_A, S.LISTING_B).alias("pair_id"),
        S.LISTING_A, S.LISTING_B, "text_a", "text_b", S.P_SAME, ROWS,
    ).sort("pair_id")  # fmt: skip
