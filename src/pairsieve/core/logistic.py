"""The one logistic regression behind every fitted judgement the package ships or refits.

The pair model, its refit to a catalog's labels and the judgement of mined candidates are all a
weighted logistic regression whose coefficients a Gaussian penalty pulls towards a centre: zero
for a fit from nothing (ridge), the shipped model for a refit to a few hundred labels (a prior).
Only the penalty's centre and strength, the rows' weights and a fixed per-row offset differ, so
they are arguments here and the optimisation is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize


@dataclass(frozen=True)
class Penalty:
    """A Gaussian penalty on the coefficients: ``0.5 * sum(strength * (beta - centre) ** 2)``.
    ``strength`` is per coefficient (the intercept's usually 0, unpenalised)."""

    centre: np.ndarray
    strength: np.ndarray

    @classmethod
    def ridge(cls, n_features: int, strength: float) -> Penalty:
        """``strength`` on every feature's coefficient around 0; the intercept is free."""
        return cls(np.zeros(n_features + 1), np.r_[0.0, np.full(n_features, strength)])


def standardised(raw: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``raw`` scaled to weighted mean 0 and spread 1 per column, the means, the scales): a
    penalty of one strength then weighs every feature alike, whatever its unit. A column that
    does not vary keeps scale 1."""
    share = weight / weight.sum()
    mean = share @ raw
    scale = np.sqrt(share @ (raw - mean) ** 2)
    scale = np.where(scale > 1e-9, scale, 1.0)
    return (raw - mean) / scale, mean, scale


def on_raw_scale(beta: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, float]:
    """(coefficients, intercept) on the raw features of ``beta`` fitted on `standardised` ones."""
    coef = beta[1:] / scale
    return coef, float(beta[0] - coef @ mean)


def fit(
    design: np.ndarray,
    label: np.ndarray,
    weight: np.ndarray,
    penalty: Penalty,
    offset: np.ndarray | float = 0.0,
) -> np.ndarray:
    """(k + 1,) coefficients, intercept first, minimising the weighted log-loss of 0/1
    ``label`` under ``p = sigmoid(offset + beta[0] + design @ beta[1:])`` plus ``penalty``.
    Starts from the penalty's centre, so a refit with little evidence stays near its prior."""
    x = np.column_stack([np.ones(len(design)), np.asarray(design, dtype=np.float64)])
    y = np.asarray(label, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)

    def loss(beta: np.ndarray) -> tuple[float, np.ndarray]:
        z = offset + x @ beta
        gap = beta - penalty.centre
        value = w @ (np.logaddexp(0.0, z) - y * z) + 0.5 * gap @ (penalty.strength * gap)
        gradient = x.T @ (w * (1.0 / (1.0 + np.exp(-z)) - y)) + penalty.strength * gap
        return float(value), gradient

    return minimize(loss, penalty.centre, jac=True, method="L-BFGS-B").x
