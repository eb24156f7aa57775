"""Clustering quality against ground truth: pairwise and B-cubed precision, recall and F1.

Both are computed from the contingency table of (predicted, true) cluster sizes, never from
pair lists, so they cost O(n) even when a giant predicted cluster holds millions of pairs.

- Pairwise: a predicted same-product pair is correct when both listings share a true product
  (precision = correct pairs / predicted pairs, recall = correct pairs / true pairs). Singletons
  contribute no pairs.
- B-cubed (Bagga & Baldwin 1998): per listing, precision = |pred ∩ true| / |pred| and recall =
  |pred ∩ true| / |true| of its own clusters, averaged over listings. Singletons count.

A two-shop benchmark's truth only links listings across its shops, so a merge inside one shop is
unlabelled, not wrong. Given each listing's ``source``, the pairwise figures count only pairs of
listings from different sources (B-cubed, a per-listing figure, stays over all pairs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl


@dataclass(frozen=True)
class Scores:
    """Pairwise and B-cubed figures of one clustering, plus its shape."""

    pairwise_precision: float
    pairwise_recall: float
    pairwise_f1: float
    bcubed_precision: float
    bcubed_recall: float
    bcubed_f1: float
    clusters: int
    largest_cluster: int
    predicted_pairs: int
    true_pairs: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _f1(precision: float, recall: float) -> float:
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def _pairs(sizes: np.ndarray) -> int:
    sizes = sizes.astype(np.int64)
    return int(np.sum(sizes * (sizes - 1) // 2))


def _cross_pairs(frame: pl.DataFrame, keys: list[str], source: bool) -> int:
    """Pairs of rows sharing ``keys``; with ``source``, only pairs from different sources."""
    pairs = _pairs(frame.group_by(keys).len()["len"].to_numpy())
    if source:
        pairs -= _pairs(frame.group_by([*keys, "source"]).len()["len"].to_numpy())
    return pairs


def score(
    predicted: Sequence[Any] | pl.Series,
    truth: Sequence[Any] | pl.Series,
    source: Sequence[Any] | pl.Series | None = None,
) -> Scores:
    """Scores of predicted cluster labels against true labels (same length, aligned by row);
    with ``source`` (each listing's shop), pairwise figures count cross-source pairs only.

    Labels may be any hashable values (strings, ints); only equality matters.

    Raises:
        ValueError: when the label sequences differ in length or are empty.
    """
    pred = pl.Series("pred", predicted).cast(pl.String)
    true = pl.Series("true", truth).cast(pl.String)
    columns = [pred, true]
    if source is not None:
        columns.append(pl.Series("source", source).cast(pl.String))
    if len({len(c) for c in columns}) != 1 or len(pred) == 0:
        raise ValueError(f"need equally long, non-empty label lists ({[len(c) for c in columns]})")
    frame = pl.DataFrame(columns)
    cells = frame.group_by("pred", "true").len("n_ij")
    pred_sizes = frame.group_by("pred").len("n_i")
    true_sizes = frame.group_by("true").len("n_j")
    cells = cells.join(pred_sizes, on="pred").join(true_sizes, on="true")
    n_ij = cells["n_ij"].to_numpy().astype(np.float64)
    cross = source is not None
    correct = _cross_pairs(frame, ["pred", "true"], cross)
    predicted_pairs = _cross_pairs(frame, ["pred"], cross)
    true_pairs = _cross_pairs(frame, ["true"], cross)
    p_pair = correct / predicted_pairs if predicted_pairs else 1.0
    r_pair = correct / true_pairs if true_pairs else 1.0
    n = float(len(pred))
    p_b3 = float(np.sum(n_ij**2 / cells["n_i"].to_numpy())) / n
    r_b3 = float(np.sum(n_ij**2 / cells["n_j"].to_numpy())) / n
    return Scores(
        pairwise_precision=round(p_pair, 4),
        pairwise_recall=round(r_pair, 4),
        pairwise_f1=round(_f1(p_pair, r_pair), 4),
        bcubed_precision=round(p_b3, 4),
        bcubed_recall=round(r_b3, 4),
        bcubed_f1=round(_f1(p_b3, r_b3), 4),
        clusters=len(pred_sizes),
        largest_cluster=int(pred_sizes["n_i"].max()),
        predicted_pairs=predicted_pairs,
        true_pairs=true_pairs,
    )
