"""`p_same`: the probability that two listings are one product, calibrated across catalogs.

The pair model's score (`pairsieve.pair_model.model`) ranks pairs well but was fitted on one
catalog with vetoed pairs left out, so as a probability it is off twice: its scale follows that
catalog's share of true pairs, and it says nothing of the pairs an attribute vetoes (a vetoed
pair is usually, not always, two products). A logistic map of the score's log-odds, one for
unvetoed and one for vetoed pairs (Platt scaling), fitted on candidate pairs pooled from several
labelled catalogs, turns it into a probability a user can average: the audit's false-negative
rate and labelled estimates are means of `p_same`. Pairs of identical normalised titles, which
are never scored, get the pooled share of such pairs that are one product.

How well it holds on a catalog it was not fitted on is measured leave-one-catalog-out by
``benchmarks/transfer.py`` as expected calibration error (`reliability`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from pairsieve.pair_model.model import MODEL_FILE

_EPS = 1e-6
BINS = 10  # equal-width probability bins of the reliability table


def logit(p: np.ndarray) -> np.ndarray:
    """Log-odds of probabilities, clipped away from 0 and 1."""
    p = np.clip(np.asarray(p, dtype=np.float64), _EPS, 1 - _EPS)
    return np.log(p / (1 - p))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@dataclass(frozen=True)
class Calibration:
    """p_same = sigmoid(slope * logit(score) + intercept), with (slope, intercept) for unvetoed
    and for vetoed pairs, and one probability for identical normalised titles."""

    unvetoed: tuple[float, float]
    vetoed: tuple[float, float]
    exact: float
    error: float = 0.0  # the worst calibration error measured on a held-out catalog
    held_out: dict = field(default_factory=dict, compare=False)  # catalog -> reliability table

    def p_same(self, score: np.ndarray, vetoed: np.ndarray) -> np.ndarray:
        """(m,) float64 calibrated probability per pair from the pair model's score."""
        z = logit(score)
        slope = np.where(vetoed, self.vetoed[0], self.unvetoed[0])
        intercept = np.where(vetoed, self.vetoed[1], self.unvetoed[1])
        return _sigmoid(slope * z + intercept)

    def as_json(self) -> dict:
        return {"unvetoed": list(self.unvetoed), "vetoed": list(self.vetoed), "exact": self.exact}


@cache
def load_calibration(path: Path = MODEL_FILE) -> Calibration:
    """The shipped calibration (the ``calibration`` entry of ``model.json``)."""
    spec = json.loads(Path(path).read_text())["calibration"]
    held_out = spec.get("leave_one_out", {})
    return Calibration(
        unvetoed=tuple(spec["unvetoed"]),
        vetoed=tuple(spec["vetoed"]),
        exact=float(spec["exact"]),
        error=max((float(t["ece"]) for t in held_out.values()), default=0.0),
        held_out=held_out,
    )


def mean_with_interval(p: np.ndarray, error: float) -> tuple[float, list[float]]:
    """The mean of probabilities ``p`` (the expected share of true pairs) and a 95% interval:
    the sampling spread of the outcomes given ``p``, widened by ``error`` on each side, as a
    mean of probabilities is off from the true share by at most their calibration error."""
    p = np.asarray(p, dtype=np.float64)
    if not p.size:
        return 0.0, [0.0, 0.0]
    mean = float(p.mean())
    half = error + 1.96 * float(np.sqrt((p * (1 - p)).sum())) / p.size
    return mean, [max(0.0, mean - half), min(1.0, mean + half)]


def platt(
    x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None, ridge: float = 1e-3
) -> tuple[float, float]:
    """(slope, intercept) of the weighted logistic regression of 0/1 ``y`` on ``x`` by Newton's
    method, with a small ridge so that separable data still gives finite numbers."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones_like(x) if weight is None else np.asarray(weight, dtype=np.float64)
    design = np.column_stack([x, np.ones_like(x)])
    theta = np.zeros(2)
    for _ in range(100):
        p = _sigmoid(design @ theta)
        gradient = design.T @ (w * (p - y)) + ridge * theta
        hessian = (design * (w * p * (1 - p))[:, None]).T @ design + ridge * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-10:
            break
    return float(theta[0]), float(theta[1])


@dataclass(frozen=True)
class Reliability:
    """Calibration of probabilities against outcomes: per equal-width bin, the pairs, their mean
    probability and their share of true outcomes; ``ece`` is the pair-weighted mean gap."""

    ece: float
    count: np.ndarray  # (BINS,) int64
    mean_p: np.ndarray  # (BINS,) float64, NaN for an empty bin
    rate: np.ndarray  # (BINS,) float64, NaN for an empty bin


def reliability(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> Reliability:
    """Expected calibration error of probabilities ``p`` for 0/1 outcomes ``y`` over ``bins``
    equal-width bins (p = 1 falls in the last); 0 for no pairs."""
    p = np.asarray(p, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    which = np.minimum((p * bins).astype(np.int64), bins - 1)
    count = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(which, weights=p, minlength=bins) / count
        rate = np.bincount(which, weights=y, minlength=bins) / count
    gaps = np.where(count > 0, np.abs(np.nan_to_num(mean_p) - np.nan_to_num(rate)), 0.0)
    ece = float((count * gaps).sum() / count.sum()) if count.sum() else 0.0
    return Reliability(ece, count, mean_p, rate)
