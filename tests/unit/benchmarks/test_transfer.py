"""The leave-one-catalog-out benchmark never reads the measured catalog's labels while fitting."""

from __future__ import annotations

import numpy as np
import pytest

from pairsieve.datasets.scoring import score
from tests.unit.benchmarks.scripts import benchmark_module


@pytest.fixture(scope="module")
def transfer():
    with benchmark_module("transfer") as module:
        yield module


@pytest.fixture(scope="module")
def clustering():
    with benchmark_module("harness.clustering") as module:
        yield module


class FakeRun:
    """A catalog's candidate pairs and labels; reading them is recorded."""

    def __init__(self, name: str, seed: int, read: list[str]) -> None:
        rng = np.random.default_rng(seed)
        self.name, self.read = name, read
        self.features = {"cosine": rng.random(200), "jaccard": rng.random(200)}
        self._label = self.features["cosine"] + 0.3 * rng.random(200) > 0.8
        self.vetoed = np.zeros(200, dtype=bool)
        self.labelled = np.ones(200, dtype=bool)

    @property
    def label(self) -> np.ndarray:
        self.read.append(self.name)
        return self._label

    def exact_pairs(self):
        self.read.append(self.name)
        return 9, 10

    def matrix(self, names):
        return np.column_stack([self.features[n] for n in names])

    def scores(self, p, accept, link, unjudged=1.0):
        self.read.append(self.name)
        return score((p >= accept).astype(int).tolist(), self._label.astype(int).tolist())


def test_each_catalog_is_measured_by_a_model_fitted_without_it(transfer, clustering):
    names = ["pricerunner", "abt-buy", "walmart-amazon", "altosight", "alaska-cameras"]
    splits = clustering.held_out_splits(names)
    assert [held for _, held in splits] == names
    for fitted_on, held in splits:
        assert held not in fitted_on and sorted([*fitted_on, held]) == sorted(names)
        read: list[str] = []
        runs = {name: FakeRun(name, i, read) for i, name in enumerate(names)}
        model = transfer.pooled_model(runs, fitted_on, ("cosine", "jaccard"))
        accept, link, weight = transfer.pick_thresholds(runs, fitted_on, model, 0.5, (1.0, 0.0))
        scores = {name: run.features["cosine"] for name, run in runs.items()}
        fitted = transfer.pooled_calibration(runs, fitted_on, scores)
        assert held not in read and set(read) == set(fitted_on)
        assert accept in clustering.PROBABILITIES and link in clustering.LINKS and weight in (1, 0)
        assert model.coef[0] > 0  # the labels follow the cosine
        assert fitted.unvetoed[0] > 0 and fitted.exact == pytest.approx(0.9)
