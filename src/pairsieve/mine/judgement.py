"""The probability that a mined candidate is a copy of its positive's product, for the
candidates the margin would drop.

A plain margin reads "scores near or above the clicked listing" as "probably the same product".
That holds where copies are many and the clusterer misses them (Altosight: 11% of the candidates
inside the margin are copies), and costs the hardest true negatives where they are few
(PriceRunner: 1%, and mostly other models of the same brand and type). Which of the two a build
faces is written in its own retrieval: the share of the candidates inside the margin that its
product ids already put in the positive's product (`copy_density`). A candidate's probability
is that prior, moved by what tells a copy from a variant: which attribute of the two titles
conflicts (capacities and model codes are reliable evidence of another product; variant words
and bare numbers, less so), how many words they share, and how far above the positive it scores.

    p_copy = sigmoid(logit(density) + intercept + sum(weight * feature))

The weights are fitted offline on five labelled catalogs by `mine.copy_model_fit` (run by
``benchmarks/fit_copy_model.py``) and shipped in ``copy_model.json``: nothing is fitted at run
time. The density enters with a fixed weight of 1 (a prior shift), so a catalog unlike the
five is judged by its own evidence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve.text import attributes as text
from pairsieve.text import match

MODEL_FILE = Path(__file__).with_name("copy_model.json")
# The conflict between two titles, by how much it says about "another product" (none: baseline).
CONFLICT_CLASSES = ("quantity", "model_code", "generation", "model_token", "variant", "number")
FEATURES = (*(f"conflict_{c}" for c in CONFLICT_CLASSES), "jaccard", "excess", "position")
_QUANTITY = frozenset(f"{unit}_conflict" for unit in text.UNIT_CLASSES)
_EPS = 1e-4


def conflict_class(reason: str | None) -> str | None:
    """The class of a `match.conflict` reason (None: the titles do not conflict)."""
    if reason is None:
        return None
    if reason in _QUANTITY:
        return "quantity"
    return reason.removesuffix("_conflict")


def pair_features(
    positives: list[text.Attributes],
    candidates: list[text.Attributes],
    excess: np.ndarray,
    position: np.ndarray,
) -> dict[str, np.ndarray]:
    """`FEATURES` per (positive, candidate) pair: one-hot conflict class, word Jaccard,
    ``excess`` (the candidate's score above the positive's, relative to it) and log(1 +
    ``position``), its 0-based place among its pair's candidates inside the margin (the first
    of them is the likeliest copy)."""
    classes = [
        conflict_class(match.conflict(a, b)) for a, b in zip(positives, candidates, strict=True)
    ]
    out = {f"conflict_{c}": np.array([k == c for k in classes], dtype=np.float64)
           for c in CONFLICT_CLASSES}  # fmt: skip
    out["jaccard"] = np.array(
        [match.jaccard(a, b) for a, b in zip(positives, candidates, strict=True)], dtype=np.float64
    )
    out["excess"] = np.asarray(excess, dtype=np.float64)
    out["position"] = np.log1p(np.asarray(position, dtype=np.float64))
    return out


def relative_excess(score: pl.Expr, positive_score: pl.Expr) -> pl.Expr:
    """How far a candidate scores above its positive, relative to the positive's score."""
    return (score - positive_score) / pl.max_horizontal(positive_score.abs(), pl.lit(_EPS))


@dataclass(frozen=True)
class CopyModel:
    """A logistic regression with the build's copy density as its offset, and the two
    probabilities that decide: keep a candidate up to ``keep_below``, drop it from
    ``drop_above``, leave it to the margin between."""

    intercept: float
    weights: dict[str, float]
    keep_below: float
    drop_above: float

    def probability(self, features: dict[str, np.ndarray], density: float) -> np.ndarray:
        """(m,) P(copy of the positive's product) per candidate."""
        z = np.full(len(features["excess"]), self.intercept + _logit(density))
        for name, weight in self.weights.items():
            z += weight * features[name]
        return 1.0 / (1.0 + np.exp(-z))

    def as_json(self) -> dict:
        return {
            "intercept": round(self.intercept, 6),
            "weights": {k: round(v, 6) for k, v in self.weights.items()},
            "keep_below": self.keep_below,
            "drop_above": self.drop_above,
        }


def _logit(density: float) -> float:
    d = float(np.clip(density, _EPS, 1 - _EPS))
    return float(np.log(d / (1 - d)))


def at_density(p_copy: np.ndarray, judged_at: float, density: float) -> np.ndarray:
    """``p_copy`` judged at the copy density ``judged_at``, as judged at ``density``: the density
    is the model's offset, so a new one moves every candidate's log-odds by the same amount and
    the features need not be computed again (a day-2 build's reused rows)."""
    with np.errstate(divide="ignore"):
        z = np.log(p_copy) - np.log1p(-p_copy) + _logit(density) - _logit(judged_at)
    return 1.0 / (1.0 + np.exp(-z))


@cache
def load_copy_model(path: str | None = None) -> CopyModel:
    """The model in the JSON file ``path`` (`CopyModel.as_json`); None: the shipped one."""
    spec = json.loads(Path(path or MODEL_FILE).read_text())
    return CopyModel(
        float(spec["intercept"]),
        {k: float(v) for k, v in spec["weights"].items()},
        float(spec["keep_below"]),
        float(spec["drop_above"]),
    )


# A build's estimate is rounded to this step of log-odds (at most 0.125 off, ~12%): the density
# is a catalog property, so a day-2 build whose new clicks move the estimate a little judges as
# the previous build did, and the queries it reuses keep the rows a full build would give them.
DENSITY_STEP = 0.25


def smoothed_density(known: int, considered: int) -> float:
    """The copy density from its counts, pulled towards 1% when they are few (a build with no
    candidate inside any margin is judged as if one in a hundred were a copy), its log-odds
    rounded to `DENSITY_STEP`."""
    raw = (known + 0.01 * 50) / (considered + 50)
    z = round(np.log(raw / (1 - raw)) / DENSITY_STEP) * DENSITY_STEP
    return round(float(1 / (1 + np.exp(-z))), 6)
