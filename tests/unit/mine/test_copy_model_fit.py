"""The judgement of mined candidates is fitted and its threshold chosen without the catalog it is
measured on."""

from __future__ import annotations

import numpy as np
import polars as pl

from pairsieve.mine import copy_model_fit, judgement
from pairsieve.pair_model.calibration import logit


def _catalog(seed: int, n: int = 400) -> tuple[pl.DataFrame, float]:
    """Judged candidates whose copies are told by the features as in a real catalog: a model
    code or capacity conflict makes a copy rare, shared words make it likelier."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 3, n)  # 0 no conflict, 1 model code, 2 capacity
    jaccard = rng.uniform(0, 1, n)
    z = -2.0 + 2.5 * jaccard - 3.0 * (kind > 0)
    frame = {name: np.zeros(n) for name in judgement.FEATURES}
    frame["conflict_model_code"] = (kind == 1).astype(float)
    frame["conflict_quantity"] = (kind == 2).astype(float)
    frame["jaccard"] = jaccard
    frame["position"] = np.log1p(rng.integers(0, 20, n))
    copies = rng.uniform(0, 1, n) < 1 / (1 + np.exp(-z))
    first = rng.uniform(0, 1, n) < 0.3
    return pl.DataFrame(frame).with_columns(
        pl.Series("copy", copies), pl.Series("first", first)
    ), 0.05


def test_each_catalog_is_judged_by_a_model_fitted_without_it():
    parts = {name: _catalog(seed) for seed, name in enumerate("abcd")}
    models = copy_model_fit.leave_one_out(parts)
    changed = dict(parts, a=_catalog(99))  # another catalog "a": its own model stays
    again = copy_model_fit.leave_one_out(changed)
    assert again["a"] == models["a"]
    assert all(again[name] != models[name] for name in "bcd")
    for model in models.values():
        assert model.weights["conflict_model_code"] < 0 < model.weights["jaccard"]
        assert model.keep_below in copy_model_fit.GRID and model.drop_above == 0.5


def _first_candidates(rows: list[tuple[float, int, bool]], density: float):
    """First candidates at chosen probabilities under a model that reads `jaccard` alone:
    (probability, how many, copy or not)."""
    jaccard = np.concatenate([np.full(n, logit(p) - logit(density)) for p, n, _ in rows])
    frame = {name: np.zeros(jaccard.size) for name in judgement.FEATURES}
    frame["jaccard"] = jaccard
    copies = np.concatenate([np.full(n, copy) for _, n, copy in rows])
    return pl.DataFrame(frame).with_columns(
        pl.Series("copy", copies), pl.Series("first", np.ones(jaccard.size, bool))
    ), density


def test_keep_below_stops_at_the_first_step_with_too_many_copies():
    weights = {name: 0.0 for name in judgement.FEATURES} | {"jaccard": 1.0}
    model = judgement.CopyModel(0.0, weights, copy_model_fit.GRID[0], 0.5)
    clean = _first_candidates([(0.004, 100, False), (0.03, 1000, False)], 0.05)
    # five copies at 0.009 make 0.01 fail (5 in 105); a thousand true negatives at 0.03 dilute
    # them under 2% again, which a threshold must not jump to
    swinging = _first_candidates([(0.004, 100, False), (0.009, 5, True), (0.03, 1000, False)], 0.05)
    assert copy_model_fit.choose_keep_below(model, {"clean": clean}) == copy_model_fit.GRID[-1]
    assert copy_model_fit.choose_keep_below(model, {"clean": clean, "swing": swinging}) == 0.0075
