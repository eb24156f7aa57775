"""Fitting the shipped pair model (`model.json`) from labelled candidate pairs.

A ridge logistic regression (strength 1 on standardised features, the intercept free) over the
pair features; the coefficients are stored on the raw feature scale, as `PairModel` applies them.
The labelled pairs come from clustering a catalog with a truth column
(`benchmarks/fit_pair_model.py` runs PriceRunner and writes the file); vetoed pairs are left out,
as vetoes stay hard at run time.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pairsieve.core import logistic
from pairsieve.pair_model.model import MODEL_FILE, PairModel

STRENGTH = 1.0  # the ridge on each standardised coefficient


def fit(
    x: np.ndarray, label: np.ndarray, names: tuple[str, ...], weight: np.ndarray | None = None
) -> PairModel:
    """The pair model over features ``x`` (one column per name in ``names``) for 0/1 ``label``,
    rows weighted by ``weight`` (equal without)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.ones(len(x)) if weight is None else np.asarray(weight, dtype=np.float64)
    scaled, mean, scale = logistic.standardised(x, w)
    beta = logistic.fit(scaled, label, w, logistic.Penalty.ridge(len(names), STRENGTH))
    coef, intercept = logistic.on_raw_scale(beta, mean, scale)
    return PairModel(names, coef, intercept)


def equal_catalog_weights(kept: list[np.ndarray]) -> np.ndarray:
    """Row weights over the kept rows of several catalogs (one bool mask each) with every
    catalog weighing the same in total, scaled to a mean of 1: a fit pooled over catalogs is
    then not the fit of the largest one."""
    weight = np.concatenate([np.full(int(k.sum()), 1.0 / max(int(k.sum()), 1)) for k in kept])
    return weight * len(weight) / weight.sum()


def write(model: PairModel, fitted_pairs: int, path: Path = MODEL_FILE) -> None:
    """``model`` into the shipped file, with what it was fitted on."""
    _update(
        path,
        description="Logistic regression P(same product) per candidate pair on raw features; "
        "fitted by pairsieve.pair_model.fit (benchmarks/fit_pair_model.py) on PriceRunner "
        "candidate pairs (attribute-vetoed pairs excluded), ridge 1 on standardised features.",
        **model.as_json(),
        fitted_pairs=fitted_pairs,
    )


def write_calibration(spec: dict, path: Path = MODEL_FILE) -> None:
    """``spec`` (`calibration.Calibration.as_json` and its tables) as the shipped calibration."""
    _update(path, calibration=spec)


def _update(path: Path, **entries: object) -> None:
    """The shipped file with ``entries`` set and everything else it holds kept."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update(entries)
    path.write_text(json.dumps(doc, indent=1) + "\n")
