"""A clustering tuned to the user's labels (`pairsieve.labels.adapt`): which vetoes hold on this
catalog, and the accept, link and unjudged knobs.

The labels name candidate pairs by their listings (``listing_a``, ``listing_b``, as `pairsieve
label sample --run` wrote them from a build of the same catalog). Each is matched to the node
pair it joins; answers that match no judged pair of this clustering are counted, never dropped
silently. The sample was stratified by ``p_same`` and by whether the build merged the pair, so the
answers are weighted by the same strata over this clustering's pairs (as the report's estimates
are). Judging a setting that lifts a veto, or that judges by the pair model refitted to the
labels (`pairsieve.labels.refit`), needs the pairs judged again under it: one more pass of
judging per distinct (lifted vetoes, pair model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import linkage
from pairsieve.cluster.candidates import NODE, listing_nodes
from pairsieve.cluster.judge import best_cosines, judge, judging, resolved_link_threshold
from pairsieve.config import ClusterConfig
from pairsieve.errors import PairsieveError
from pairsieve.labels import adapt, refit, sample
from pairsieve.labels.store import answered
from pairsieve.pair_model.calibration import load_calibration
from pairsieve.pair_model.model import NEIGHBOUR_FEATURES, PairModel, load_model, neighbour_graph

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

JudgeWith = Callable[[tuple[str, ...], PairModel | None], pl.DataFrame]


@dataclass
class Rejudge:
    """What judging the candidates again reads: every title's attributes, the candidate pairs
    and their cosines (the stage keeps them only when tuning to labels), and the graph of the
    pairs no veto held apart in the first judgement (`pair_model.NEIGHBOUR_FEATURES`; set by
    `tune`)."""

    cfg: ClusterConfig
    candidates: pl.DataFrame
    nodes: pl.DataFrame
    attrs: list
    cosine: np.ndarray
    graph: csr_matrix | None = None
    best: np.ndarray | None = field(init=False)  # each node's best cosine, for every judging

    def __post_init__(self) -> None:
        self.best = best_cosines(self.candidates, self.cosine, len(self.attrs))

    def __call__(self, lifted: tuple[str, ...], model: PairModel | None = None) -> pl.DataFrame:
        """Every candidate judged with the vetoes ``lifted`` by ``model`` (None: shipped)."""
        cfg = self.cfg.model_copy(update={"lifted_vetoes": lifted})
        graph = self.graph if model is not None else None
        context = judging(cfg, self.nodes, self.attrs, self.best, model, graph)
        return judge(context, self.cosine, self.candidates)

    def features(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The pair model's features of the candidates ``rows`` (a node's best cosine and
        neighbours are still over all candidates)."""
        context = judging(self.cfg, self.nodes, self.attrs, self.best, None, self.graph)
        found: dict[str, np.ndarray] = {}
        judge(context, self.cosine[rows], self.candidates[rows], found)
        return found


@dataclass
class Tuned:
    """The clustering's judged pairs and the setting they were judged with, after adapting to
    labels."""

    scored: pl.DataFrame
    setting: adapt.Setting
    details: dict


def _matched(answers: pl.DataFrame, frame: pl.DataFrame, scored: pl.DataFrame) -> pl.DataFrame:
    """(row in ``scored``, label) of the answers that name a judged node pair."""
    node_of = listing_nodes(frame)
    ends = answers.filter(pl.col("source") == "candidate").select("label", S.LISTING_A, S.LISTING_B)
    for end in (S.LISTING_A, S.LISTING_B):
        ends = ends.join(node_of.rename({S.LISTING_ID: end, NODE: f"_{end}"}), on=end, how="inner")
    pairs = ends.select(
        pl.min_horizontal(f"_{S.LISTING_A}", f"_{S.LISTING_B}").alias("a"),
        pl.max_horizontal(f"_{S.LISTING_A}", f"_{S.LISTING_B}").alias("b"),
        pl.col("label").cast(pl.Float64),
    )
    rows = scored.select(pl.col("a").cast(pl.Int64), pl.col("b").cast(pl.Int64)).with_row_index()
    return rows.join(pairs, on=["a", "b"], how="inner").unique("index", keep="last").sort("index")


def _weighted(rows: np.ndarray, label: np.ndarray, p: np.ndarray, groups: np.ndarray):
    """`adapt.Labelled` weighted by the sample's strata (p_same within `sample.build_groups`)
    over the population."""
    which = sample.strata(p, groups)
    sizes = np.bincount(which)
    taken = np.bincount(which[rows], minlength=len(sizes))
    return adapt.Labelled(rows, label, sizes[which[rows]] / taken[which[rows]])


_DECIDED = ("score", S.VETO_REASON)  # what a judging under another setting changes


class Clusterings:
    """The clustering of one catalog's judged pairs under any setting; the pairs are judged
    once per (lifted vetoes, pair model). ``refitted`` is the `adapt.REFIT` pair model.

    A judging keeps only what a setting changes, each pair's score and veto reason (9
    bytes a pair, against 42 for the judged pairs on PriceRunner): the search may judge every
    pair under several sets of lifted vetoes, and holds them all."""

    def __init__(
        self,
        counts: np.ndarray,
        scored: pl.DataFrame,
        lifted: tuple[str, ...],
        judge_with: JudgeWith,
        refitted: PairModel | None = None,
    ) -> None:
        self.counts = counts
        self.scored = scored
        self.judged_under = {(lifted, adapt.SHIPPED): scored.select(_DECIDED)}
        self.judge_with = judge_with
        self.models = {adapt.SHIPPED: None, adapt.REFIT: refitted}
        self.a, self.b = scored["a"].to_numpy(), scored["b"].to_numpy()

    def _judged_under(self, lifted: tuple[str, ...], model: str) -> pl.DataFrame:
        if (lifted, model) not in self.judged_under:
            judged = self.judge_with(lifted, self.models[model])
            self.judged_under[lifted, model] = judged.select(_DECIDED)
        return self.scored.with_columns(self.judged_under[lifted, model].get_columns())

    def scores(self, lifted: tuple[str, ...], model: str) -> np.ndarray:
        """(pairs,) float64 score of every pair by ``model``, with the vetoes ``lifted``."""
        return self._judged_under(lifted, model)["score"].to_numpy()

    def judged(self, setting: adapt.Setting) -> pl.DataFrame:
        """The pairs as ``setting`` judges them: its vetoes, its pair model's score, accepted
        from its threshold. A refitted model's pairs carry the shipped model's calibrated
        ``p_same`` (the report's estimates and a label sample read that probability)."""
        rows = self._judged_under(setting.lifted_vetoes, setting.pair_model)
        ok = rows[S.VETO_REASON].is_null() & (pl.col("score") >= setting.accept_probability)
        rows = rows.with_columns(ok.alias(S.ACCEPTED))
        if setting.pair_model == adapt.SHIPPED:
            return rows
        shipped = self._judged_under(setting.lifted_vetoes, adapt.SHIPPED)
        vetoed = shipped[S.VETO_REASON].is_not_null().to_numpy()
        p_same = load_calibration().p_same(shipped["score"].to_numpy(), vetoed)
        return rows.with_columns(pl.Series(S.P_SAME, p_same))

    def labels(self, setting: adapt.Setting) -> np.ndarray:
        """(nodes,) cluster label per node under ``setting``."""
        return linkage.agglomerate(
            self.counts, self.judged(setting), setting.link_threshold, setting.unjudged_weight
        )

    def merged(self, setting: adapt.Setting) -> np.ndarray:
        """(pairs,) bool: the pair ends in one product under ``setting``."""
        labels = self.labels(setting)
        return labels[self.a] == labels[self.b]


def _default(cfg: ClusterConfig) -> adapt.Setting:
    """The setting the config asks for.

    Raises:
        PairsieveError: ``bad_config`` unless the learned pair model judges (labels tune its
            thresholds and calibrated p_same).
    """
    if not (cfg.judge == "learned" and cfg.use_embeddings):
        raise PairsieveError(
            "bad_config",
            "labels tune the learned pair model's clustering; this config uses the rule judge",
            knob="cluster.judge",
        )
    return adapt.Setting(
        cfg.accept_probability,
        resolved_link_threshold(cfg),
        cfg.unjudged_weight,
        tuple(sorted(cfg.lifted_vetoes)),
    )


def tune(
    cfg: ClusterConfig,
    files: tuple[Path, ...],
    frame: pl.DataFrame,
    counts: np.ndarray,
    scored: pl.DataFrame,
    rejudge: Rejudge,
) -> Tuned:
    """The setting the answered labels in ``files`` choose, and the pairs judged under it;
    ``rejudge`` judges the candidates again (other vetoes lifted, another pair model) and
    gives the labelled pairs' features for the refit.

    Raises:
        PairsieveError: ``bad_config`` unless the learned pair model judges.
    """
    default = _default(cfg)
    clusterings = Clusterings(counts, scored, default.lifted_vetoes, rejudge)
    score = scored["score"].to_numpy()
    vetoed = scored[S.VETO_REASON].is_not_null().to_numpy()
    population = adapt.Population(
        load_calibration().p_same(score, vetoed),
        score,
        scored[S.VETO_REASON].cast(pl.String).fill_null("").to_numpy().astype(str),
    )
    answers = answered(list(files))
    hit = _matched(answers, frame, scored)
    rows = hit["index"].to_numpy().astype(np.int64)
    counted = {
        "labels_used": len(rows),
        "labels_not_in_this_clustering": answers.height - len(rows),
    }
    if not len(rows):  # nothing to learn from: the model alone would move the knobs
        return Tuned(scored, default, counted)
    groups = sample.build_groups(
        clusterings.merged(default), vetoed, score, default.accept_probability
    )
    labelled = _weighted(rows, hit["label"].to_numpy(), population.p_same, groups)
    rejudge.graph = neighbour_graph(len(counts), clusterings.a[~vetoed], clusterings.b[~vetoed])
    refitted = refitted_model(labelled, vetoed, rejudge.features)
    clusterings.models[adapt.REFIT] = refitted
    models = (adapt.SHIPPED,) if refitted is None else (adapt.SHIPPED, adapt.REFIT)
    scores = {model: clusterings.scores(default.lifted_vetoes, model) for model in models}
    found = adapt.choose(population, labelled, clusterings.merged, default, scores=scores)
    if refitted is not None:
        counted["refit"] = refitted.as_json()
    return Tuned(clusterings.judged(found.chosen), found.chosen, {**counted, **found.as_json()})


def refitted_model(
    labelled: adapt.Labelled,
    vetoed: np.ndarray,
    features_of: Callable[[np.ndarray], dict[str, np.ndarray]],
) -> PairModel | None:
    """The shipped pair model refitted to the labelled pairs no veto holds apart (vetoed pairs
    never reach the model), or None when they are too few or the refit does not predict
    held-out labels better (`refit.refit_if_better`); ``features_of(rows)`` gives the model's
    features of population rows. Where they include `NEIGHBOUR_FEATURES`, the refit may use
    them too: the prior gives them no weight, as the shipped model does."""
    judged = ~vetoed[labelled.rows]
    rows = labelled.rows[judged]
    if len(rows) < refit.MIN_LABELS:
        return None
    features = features_of(rows)
    shipped = load_model()
    extra = tuple(name for name in NEIGHBOUR_FEATURES if name in features)
    coef = np.concatenate([shipped.coef, np.zeros(len(extra))])
    prior = PairModel(shipped.features + extra, coef, shipped.intercept)
    return refit.refit_if_better(prior, features, labelled.label[judged], labelled.weight[judged])
