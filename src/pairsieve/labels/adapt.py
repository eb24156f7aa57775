"""Labels tune the clustering of the catalog they came from: which vetoes hold, and the
thresholds of the pair model and the linkage.

Catalogs disagree on what one product is (one counts a camera body and its kits as one product,
another sells each as its own SKU), and no default fitted on other catalogs can know which
granularity this one has. A few hundred labelled candidate pairs can: they estimate, for any
setting of the clustering's knobs, the pairwise F1 over the judged candidate pairs, and the
setting with the best estimate is chosen. One of the settings' knobs is the pair model itself:
the shipped one, or its refit to these labels (`pairsieve.labels.refit`).

The estimate is model-assisted, like the report's (`pairsieve.labels.estimate`): over all
candidate pairs, ``p_same`` counts the true pairs, and the labelled residuals (label - p_same,
times each label's weight, the inverse of its inclusion probability) correct it. So
``TP(setting) = sum over merged pairs of p_same + sum over labelled merged pairs of w (y - p)``,
``Y = sum of p_same + sum of w (y - p)`` over all pairs, and ``F1 = 2 TP / (merged + Y)``.

Thresholds are searched over a grid, one knob at a time (`climb`), from the default and from
each pair model's and veto set's best. Vetoes are not: lifting one judges pairs afresh, so only
the reasons the labels argue for are tried (`proposed_lifts`). Merged pairs that are one
product at a rate p raise pairwise F1 when p exceeds half of it, so a reason is proposed when
its vetoed pairs that the judging pair model (shipped or refitted) would accept are, by the
same estimator, one product at more than half the default's estimated F1: a quarter on a
catalog clustered at F1 0.5, less on one clustered badly, where a merge pays sooner. The
proposed reasons are tried one at a time, the most one-product first, each kept lifted only
when it raises the estimate beside those kept before it: one bad reason lifted beside good ones
would hide what the good ones pay. The default setting is kept unless another one beats its
estimate by ``min_gain``: with a few hundred labels, small estimated gains are mostly noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import numpy as np

ACCEPT_PROBABILITIES = (0.2, 0.3, 0.4, 0.5)
LINK_THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.4)
UNJUDGED_WEIGHTS = (1.0, 0.5, 0.2, 0.0)
_ROUNDS = 3  # of the coordinate search over the knobs
MIN_GAIN = 0.01  # estimated F1 a setting must gain over the default to replace it
MIN_LIFT_LABELS = 3  # labelled pairs of a reason's would-be merges needed to judge it


SHIPPED = "shipped"  # the pair model as shipped
REFIT = "refit"  # the pair model refitted to the labels (`pairsieve.labels.refit`)


@dataclass(frozen=True)
class Setting:
    """The knobs labels tune (their `ClusterConfig` fields of the same names) and the pair model
    that judges (`SHIPPED` or `REFIT`)."""

    accept_probability: float
    link_threshold: float
    unjudged_weight: float
    lifted_vetoes: tuple[str, ...] = ()
    pair_model: str = SHIPPED


@dataclass(frozen=True)
class Population:
    """Every judged candidate pair of a clustering (numpy arrays of one length): its
    ``p_same``, the pair model's ``score`` and its veto reason ("" for none)."""

    p_same: np.ndarray
    score: np.ndarray
    veto_reason: np.ndarray


@dataclass(frozen=True)
class Labelled:
    """Labelled pairs: ``rows`` index the population, ``label`` is 0/1, ``weight`` the inverse
    inclusion probability."""

    rows: np.ndarray
    label: np.ndarray
    weight: np.ndarray

    def residual_total(self, population: Population, within: np.ndarray) -> float:
        """Model-assisted count of one-product pairs among the population's ``within`` (bool)."""
        p = population.p_same
        labelled = within[self.rows]
        residuals = self.weight * (self.label - p[self.rows])
        return float(p[within].sum() + residuals[labelled].sum())


@dataclass(frozen=True)
class Adaptation:
    """The setting chosen, the default, and their estimated pairwise F1 over candidate pairs."""

    chosen: Setting
    default: Setting
    chosen_f1: float
    default_f1: float
    proposed_lifts: tuple[str, ...]

    def as_json(self) -> dict:
        return {
            "chosen": asdict(self.chosen),
            "default": asdict(self.default),
            "estimated_f1": round(self.chosen_f1, 4),
            "default_estimated_f1": round(self.default_f1, 4),
            "proposed_lifts": list(self.proposed_lifts),
        }


def proposed_lifts(
    population: Population, labelled: Labelled, accept: float, break_even: float
) -> tuple[str, ...]:
    """Veto reasons whose vetoed pairs scoring at least ``accept`` are estimated to be one
    product more often than ``break_even``, the most one-product first; judged only where
    `MIN_LIFT_LABELS` of them are labelled."""
    shares = {}
    for reason in sorted(set(population.veto_reason.tolist()) - {""}):
        would_merge = (population.veto_reason == reason) & (population.score >= accept)
        if would_merge[labelled.rows].sum() < MIN_LIFT_LABELS:
            continue
        share = labelled.residual_total(population, would_merge) / would_merge.sum()
        if share > break_even:
            shares[reason] = share
    return tuple(sorted(shares, key=lambda reason: (-shares[reason], reason)))


def estimated_f1(population: Population, labelled: Labelled, merged: np.ndarray) -> float:
    """Model-assisted pairwise F1 over the candidate pairs of a clustering that merges
    ``merged`` (bool per population pair)."""
    everything = np.ones(len(merged), dtype=bool)
    true_pairs = labelled.residual_total(population, everything)
    true_merged = labelled.residual_total(population, merged)
    denominator = int(merged.sum()) + true_pairs
    return 2 * true_merged / denominator if denominator > 0 else 0.0


def climb(start: Setting, f1_of: Callable[[Setting], float]) -> tuple[Setting, float]:
    """The best setting a coordinate search finds from ``start``: each knob in turn over its
    values, the others held, until a round moves none (at most `_ROUNDS`): 13 clusterings a
    round, where the whole grid takes 80, and a linkage at 10^6 listings takes 14 s."""
    best, best_f1 = start, f1_of(start)
    knobs = (
        ("accept_probability", ACCEPT_PROBABILITIES),
        ("link_threshold", LINK_THRESHOLDS),
        ("unjudged_weight", UNJUDGED_WEIGHTS),
    )
    for _ in range(_ROUNDS):
        moved = False
        for knob, values in knobs:
            for value in values:
                setting = replace(best, **{knob: value})
                f1 = f1_of(setting)
                if f1 > best_f1:
                    best, best_f1, moved = setting, f1, True
        if not moved:
            break
    return best, best_f1


def choose(
    population: Population,
    labelled: Labelled,
    merged_by: Callable[[Setting], np.ndarray],
    default: Setting,
    min_gain: float = MIN_GAIN,
    scores: dict[str, np.ndarray] | None = None,
) -> Adaptation:
    """The setting with the best estimated F1 that a coordinate search over the thresholds and
    unjudged weights finds (`climb`, from the default's values and from what it found for
    earlier models), with the default's lifted vetoes plus those of the labels' `proposed_lifts`
    that raise the best estimate, tried one at a time, judged by each pair model of ``scores``;
    ``merged_by`` clusters with a setting and says which population pairs end up in one product.

    ``scores`` gives each pair model that may judge its score per population pair (None: the
    shipped model alone, ``population.score``): a veto's would-be merges, which propose it for
    lifting, are those the judging model would accept. The models go in order of trust, the
    default's first. Each later one must beat the best setting so far by ``min_gain``, as any
    setting must beat the default: a model refitted to these labels scores them better than the
    shipped one partly because it was fitted to them."""
    known: dict[Setting, float] = {}

    def f1_of(setting: Setting) -> float:
        if setting not in known:
            known[setting] = estimated_f1(population, labelled, merged_by(setting))
        return known[setting]

    default_f1 = f1_of(default)
    best, best_f1 = default, default_f1
    tops: list[Setting] = [default]
    lifts: list[str] = []
    for model, score in (scores or {SHIPPED: population.score}).items():
        judged_by = replace(population, score=score)
        proposed = proposed_lifts(judged_by, labelled, default.accept_probability, default_f1 / 2)
        lifts.extend(reason for reason in proposed if reason not in lifts)
        fresh = [reason for reason in proposed if reason not in default.lifted_vetoes]
        found: list[tuple[Setting, float]] = []
        kept = default.lifted_vetoes
        for reason in [None, *fresh]:
            lifted = kept if reason is None else tuple(sorted({*kept, reason}))
            wider = [
                climb(replace(start, lifted_vetoes=lifted, pair_model=model), f1_of)
                for start in tops
            ]
            if found and max(f1 for _, f1 in wider) <= max(f1 for _, f1 in found):
                continue  # this reason did not pay beside those kept: it stays a veto
            found.extend(wider)
            kept = lifted
        top, top_f1 = max(found, key=lambda pair: pair[1])
        tops.extend(setting for setting, _ in found)
        if top_f1 >= best_f1 + min_gain:
            best, best_f1 = top, top_f1
    return Adaptation(best, default, best_f1, default_f1, tuple(lifts))
