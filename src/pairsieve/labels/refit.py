"""The pair model refitted to a catalog's own labels, with the shipped model as its prior.

The shipped coefficients were fitted on other catalogs; what separates products differs by
catalog (on a multilingual one, word overlap says little and shared numbers say more). A few
hundred labels are too few to fit fifteen coefficients from nothing, so the fit is a maximum a
posteriori logistic regression: a Gaussian prior centred on the shipped model, on standardised
features, pulls every coefficient the labels say little about back to where it was. The labels
weigh by their inverse inclusion probability, so the refit answers for the whole population of
candidate pairs, not for the strata the sample favoured.

A refit is only offered when it predicts labels it was not fitted on better than the shipped
model does (`refit_if_better`, cross-validated log-loss). Judged on its own training labels, a
refit always looks better; on PriceRunner, whose catalog the shipped model was fitted on, it
predicts held-out labels worse in most draws of 300, and on the multilingual Altosight better
in all (benchmarks/RESULTS.md, "labels tune the clustering").
"""

from __future__ import annotations

import numpy as np

from pairsieve.core import logistic
from pairsieve.pair_model.model import PairModel

PRIOR_STRENGTH = 10.0  # precision of the Gaussian prior per standardised coefficient
MIN_LABELS = 30  # labelled unvetoed pairs, of both answers, a refit needs
FOLDS = 5  # of the cross-validation that decides whether a refit is offered


def refit(
    prior: PairModel,
    features: dict[str, np.ndarray],
    label: np.ndarray,
    weight: np.ndarray,
    strength: float = PRIOR_STRENGTH,
) -> PairModel | None:
    """``prior`` refitted to labelled pairs (their ``features`` by name, 0/1 ``label``, inverse
    inclusion ``weight``), or None when there are fewer than `MIN_LABELS` or only one answer.

    The weights are scaled to sum to the number of labels, so ``strength`` weighs the prior
    against that many answers whatever the population's size."""
    label = np.asarray(label, dtype=np.float64)
    if len(label) < MIN_LABELS or label.min() == label.max():
        return None
    w = np.asarray(weight, dtype=np.float64)
    w = w * (len(w) / w.sum())
    raw = np.column_stack([np.asarray(features[k], dtype=np.float64) for k in prior.features])
    x, mean, scale = logistic.standardised(raw, w)
    centre = np.concatenate([[prior.intercept + prior.coef @ mean], prior.coef * scale])
    prior_on_scale = logistic.Penalty(centre, np.full(len(centre), strength))
    coef, intercept = logistic.on_raw_scale(logistic.fit(x, label, w, prior_on_scale), mean, scale)
    return PairModel(prior.features, coef, intercept)


def _log_loss(p: np.ndarray, label: np.ndarray, weight: np.ndarray) -> float:
    p = np.clip(p, 1e-6, 1.0 - 1e-6)
    return float(-np.average(label * np.log(p) + (1 - label) * np.log(1 - p), weights=weight))


def refit_if_better(
    prior: PairModel,
    features: dict[str, np.ndarray],
    label: np.ndarray,
    weight: np.ndarray,
) -> PairModel | None:
    """`refit` on every labelled pair, when refits on `FOLDS` - 1 folds predict the fold left
    out with a lower weighted log-loss than ``prior`` predicts the same labels; else None.
    Folds are by position (pair i in fold i mod `FOLDS`), so the answer depends only on the
    labels and their order."""
    label = np.asarray(label, dtype=np.float64)
    weight = np.asarray(weight, dtype=np.float64)
    full = refit(prior, features, label, weight)
    if full is None:
        return None
    fold = np.arange(len(label)) % FOLDS
    held = np.empty(len(label))
    for k in range(FOLDS):
        train, test = fold != k, fold == k
        part = refit(prior, {n: v[train] for n, v in features.items()}, label[train], weight[train])
        model = prior if part is None else part
        held[test] = model.probability({n: v[test] for n, v in features.items()})
    if _log_loss(held, label, weight) < _log_loss(prior.probability(features), label, weight):
        return full
    return None
