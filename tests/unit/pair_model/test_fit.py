"""pair_model.fit: the shipped pair model is fitted by the package's own code."""

from __future__ import annotations

import json

import numpy as np

from pairsieve.pair_model import fit as pair_fit
from pairsieve.pair_model.model import MODEL_FILE


def _pairs(n: int = 3000, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = np.column_stack([rng.random(n), rng.integers(0, 4, n), rng.normal(50, 20, n)])
    z = -1.0 + 4.0 * x[:, 0] - 0.8 * x[:, 1] + 0.01 * x[:, 2]
    return x, (rng.random(n) < 1 / (1 + np.exp(-z))).astype(int)


def test_the_fit_is_scikit_learns_ridge_on_standardised_features():
    """The shipped model was fitted with scikit-learn (C=1 on standardised features); the
    package's fit finds the same model."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x, y = _pairs()
    weight = np.random.default_rng(2).uniform(0.5, 2.0, len(y))
    ours = pair_fit.fit(x, y, ("a", "b", "c"), weight)
    scaler = StandardScaler().fit(x, sample_weight=weight)
    theirs = LogisticRegression(C=1.0, max_iter=5000, tol=1e-10)
    theirs.fit(scaler.transform(x), y, sample_weight=weight)
    coef = theirs.coef_[0] / scaler.scale_
    assert np.allclose(ours.coef, coef, rtol=1e-3, atol=1e-5)
    assert abs(ours.intercept - (theirs.intercept_[0] - coef @ scaler.mean_)) < 1e-3


def test_equal_catalog_weights_give_each_catalog_the_same_total():
    kept = [np.array([True] * 10 + [False] * 5), np.array([True] * 2)]
    w = pair_fit.equal_catalog_weights(kept)
    assert w[:10].sum() == np.float64(w[10:].sum())
    assert w.mean() == 1.0


def test_writing_a_model_keeps_the_calibration_the_file_holds(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(MODEL_FILE.read_text())
    x, y = _pairs()
    model = pair_fit.fit(x, y, ("a", "b", "c"))
    pair_fit.write(model, fitted_pairs=len(y), path=path)
    doc = json.loads(path.read_text())
    assert doc["features"] == ["a", "b", "c"] and doc["fitted_pairs"] == len(y)
    assert doc["calibration"] == json.loads(MODEL_FILE.read_text())["calibration"]
    pair_fit.write_calibration({"unvetoed": [1.0, 0.0]}, path)
    doc = json.loads(path.read_text())
    assert doc["features"] == ["a", "b", "c"] and doc["calibration"] == {"unvetoed": [1.0, 0.0]}
