"""Estimates with intervals from the model's ``p_same`` everywhere and a few labels.

The share of true pairs in a population (the audit's false-negative rate, the precision of the
pairs pairsieve merged) is the model's mean ``p_same``, corrected by what the labels say the model
got wrong: in each ``p_same`` stratum, the mean labelled residual (answer minus p_same) times
the stratum's size. This is the difference estimator of survey sampling, the idea behind
prediction-powered inference: the model carries the estimate where it is right and costs
nothing, and the labels only have to measure its error, which varies less than the answers
themselves. Strata are taken from the pairs' current ``p_same`` (post-stratification), so labels
drawn before a rebuild still count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pairsieve.labels.sample import strata, stratum_sizes

Z95 = 1.959964


@dataclass(frozen=True)
class Estimate:
    """A share with its 95% interval and the labels it used (0: the model alone)."""

    value: float
    interval: tuple[float, float]
    labels: int


def _stratified_variance(sizes: np.ndarray, which: np.ndarray, values: np.ndarray) -> float:
    """Variance of sum over strata h of N_h x the mean of the labelled ``values`` in h: N_h^2
    (1 - n_h / N_h) s_h^2 / n_h, with a lone label's square standing in for s_h^2."""
    variance = 0.0
    for h in np.flatnonzero(sizes):
        v = values[which == h]
        if len(v):
            spread = v.var(ddof=1) if len(v) > 1 else v[0] ** 2
            variance += sizes[h] ** 2 * max(0.0, 1 - len(v) / sizes[h]) * spread / len(v)
    return variance


def labelled_share(
    population_p: np.ndarray,
    labelled_p: np.ndarray,
    answers: np.ndarray,
    population_weight: np.ndarray | None = None,
    labelled_weight: np.ndarray | None = None,
    groups: tuple[np.ndarray, np.ndarray] | None = None,
) -> Estimate:
    """The weighted share of true pairs in a population from its ``p_same`` and labelled pairs.

    ``population_p`` (N,) is every pair's p_same; ``labelled_p`` and ``answers`` (n,) are those
    of the labelled pairs (members of the population, answers 0/1). Weights count a pair several
    times (an audit pair met by several rows); default 1. ``groups`` (population's,
    labelled's) split the strata as the sample was split (`sample.draw`'s ``by``).
    """
    p = np.asarray(population_p, dtype=np.float64)
    m = np.ones_like(p) if population_weight is None else np.asarray(population_weight, float)
    lp = np.asarray(labelled_p, dtype=np.float64)
    y = np.asarray(answers, dtype=np.float64)
    lm = np.ones_like(lp) if labelled_weight is None else np.asarray(labelled_weight, float)
    total = float(m.sum())
    if total == 0:
        return Estimate(0.0, (0.0, 0.0), int(len(y)))
    sizes = stratum_sizes(p, None if groups is None else groups[0])
    which = strata(lp, None if groups is None else groups[1])
    residual = lm * (y - lp)
    estimate = float((m * p).sum())
    for h in np.flatnonzero(sizes):
        r = residual[which == h]
        if len(r):
            estimate += sizes[h] * r.mean()
    value = min(1.0, max(0.0, estimate / total))
    half = Z95 * np.sqrt(_stratified_variance(sizes, which, residual)) / total
    return Estimate(value, (max(0.0, value - half), min(1.0, value + half)), int(len(y)))


def share_from_labels(
    population: pl.DataFrame,
    answers: pl.DataFrame,
    weight: str | None = None,
    by: str | None = None,
) -> tuple[Estimate, int]:
    """`labelled_share` of a population (``pair_id``, ``p_same``, the ``weight`` column and
    the ``by`` column its sample was split by) from the answered labels (``pair_id``,
    ``label``) that name its pairs, and how many answers name none of them (kept in their file,
    reported, never used here)."""
    hit = population.join(answers.select("pair_id", "label"), on="pair_id", how="inner")

    def weights(frame: pl.DataFrame) -> np.ndarray | None:
        return None if weight is None else frame[weight].to_numpy().astype(np.float64)

    found = labelled_share(
        population["p_same"].to_numpy(),
        hit["p_same"].to_numpy(),
        hit["label"].to_numpy().astype(np.float64),
        weights(population),
        weights(hit),
        None if by is None else (population[by].to_numpy(), hit[by].to_numpy()),
    )
    return found, answers.height - hit.height


def labelled_ratio(
    population_p: np.ndarray,
    population_in: np.ndarray,
    labelled_p: np.ndarray,
    labelled_in: np.ndarray,
    answers: np.ndarray,
    groups: tuple[np.ndarray, np.ndarray] | None = None,
) -> Estimate:
    """The share of a population's true pairs that fall in a subset (``*_in``): recall of the
    pairs pairsieve linked among all judged pairs. Numerator and denominator are each a
    difference estimate (`labelled_share`'s, as totals) over strata split by ``groups``
    (population's, labelled's: as `sample.draw` split them; default the subset itself); the
    interval is the ratio's, by linearisation: the labelled residuals weighted by
    (in - ratio)."""
    p = np.asarray(population_p, dtype=np.float64)
    inside = np.asarray(population_in, dtype=np.float64)
    lp = np.asarray(labelled_p, dtype=np.float64)
    lin = np.asarray(labelled_in, dtype=np.float64)
    residual = np.asarray(answers, dtype=np.float64) - lp
    groups = (inside, lin) if groups is None else groups
    sizes = stratum_sizes(p, groups[0])
    which = strata(lp, groups[1])
    top, bottom = float((inside * p).sum()), float(p.sum())
    for h in np.flatnonzero(sizes):
        here = which == h
        if here.any():
            top += sizes[h] * (lin[here] * residual[here]).mean()
            bottom += sizes[h] * residual[here].mean()
    if bottom <= 0:
        return Estimate(0.0, (0.0, 1.0), int(len(lp)))
    ratio = min(1.0, max(0.0, top / bottom))
    half = Z95 * np.sqrt(_stratified_variance(sizes, which, (lin - ratio) * residual)) / bottom
    return Estimate(ratio, (max(0.0, ratio - half), min(1.0, ratio + half)), int(len(lp)))
