"""Judging of candidate pairs: attribute vetoes, then acceptance by the learned judge
(`pairsieve.pair_model.model`) or the hand-set rule, evaluated column-wise over every pair.

Kept apart from `pairsieve.cluster.stage` (candidates, agglomeration, the stage) because it is the
part that decides which pairs may ever join, and the part its tests check pair by pair against
`match.assess` / `match.jaccard`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster.attribute_columns import (
    R_BRAND,
    R_LOW,
    VETO_TYPE,
    AttributeColumns,
    intern,
)
from pairsieve.config import ClusterConfig, PairsieveConfig
from pairsieve.core import io, partitions, progress
from pairsieve.core.partitions import Span
from pairsieve.core.plans import Plan
from pairsieve.errors import PairsieveError
from pairsieve.pair_model import model as pair_model
from pairsieve.text import attributes as text

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from pairsieve.core.partitions import Mapper

INFORMATIVE = "_informative"  # node column: the title carries a brand, model or attribute token
_JUDGE_CHUNK = 1 << 20  # candidates judged at a time (a mapped span): progress, a bounded peak


def lifted_vetoes(cfg: ClusterConfig) -> frozenset[str]:
    """``cfg.lifted_vetoes``, checked against the reasons judging can give.

    Raises:
        PairsieveError: ``bad_config`` naming the first unknown reason.
    """
    known = set(VETO_TYPE.categories)
    unknown = sorted(set(cfg.lifted_vetoes) - known)
    if unknown:
        raise PairsieveError(
            "bad_config",
            f"unknown veto reason {unknown[0]!r}; known: {', '.join(sorted(known))}",
            knob="cluster.lifted_vetoes",
        )
    return frozenset(cfg.lifted_vetoes)


def _brand_ids(nodes: pl.DataFrame) -> np.ndarray:
    """(n,) int64 id of each node's brand, equal for equal brands, -1 for none."""
    has_brand = (nodes[S.BRAND].str.len_bytes() > 0).fill_null(False).to_numpy()
    return np.where(has_brand, intern(nodes[S.BRAND].to_list())[0], -1)


def _vetoes(context: Judging, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pair (a[i], b[i]): the veto reason code (0 for none) and whether the titles share a
    model code. Low-information titles and different brands veto before the attributes do;
    the context's ``lifted`` reasons do not veto."""
    informative, brands, lifted = context.informative, context.brands, context.lifted
    low = ~(informative[a] & informative[b]) & ("low_information" not in lifted)
    brand = ~low & (brands[a] >= 0) & (brands[b] >= 0) & (brands[a] != brands[b])
    brand &= "brand_conflict" not in lifted
    rest = np.flatnonzero(~low & ~brand)
    reason = np.where(low, R_LOW, np.where(brand, R_BRAND, 0))
    shared = np.zeros(len(a), dtype=bool)
    reason[rest], shared[rest] = context.columns.assess(a[rest], b[rest], lifted)
    return reason, shared


def pair_cosines(candidates: pl.DataFrame, vectors: np.ndarray) -> np.ndarray:
    """Every candidate pair's cosine, from the (n_nodes, d) unit vectors of the titles.

    The only step of the judgement that reads the vectors: once it has run they can go, before
    the attribute columns (`judging`) are built beside the candidates (1.4 GB at 10^6 titles).
    """
    from pairsieve.vectors.knn import pair_scores  # faiss, only where embeddings are used

    a = candidates["a"].to_numpy().astype(np.int64, copy=False)
    b = candidates["b"].to_numpy().astype(np.int64, copy=False)
    return pair_scores(vectors, a, vectors, b).clip(-1, 1)


def best_cosines(
    candidates: pl.DataFrame, cosine: np.ndarray | None, n_nodes: int
) -> np.ndarray | None:
    """Each node's best cosine over all the candidate pairs (`pair_model.best_cosines`), from
    every candidate's cosine (`pair_cosines`); None without embeddings."""
    if cosine is None:
        return None
    a = candidates["a"].to_numpy().astype(np.int64, copy=False)
    b = candidates["b"].to_numpy().astype(np.int64, copy=False)
    return pair_model.best_cosines(n_nodes, a, b, cosine)


def judging(
    cfg: ClusterConfig,
    nodes: pl.DataFrame,
    attrs: list[text.Attributes],
    best: np.ndarray | None,
    model: pair_model.PairModel | None = None,
    neighbours: csr_matrix | None = None,
) -> Judging:
    """What every chunk of the candidates is judged with (`Judging`), given each node's best
    cosine over all candidates (`best_cosines`; None without embeddings), the learned pair
    model (None: shipped) and the candidate graph its `pair_model.NEIGHBOUR_FEATURES` read
    (None: not read)."""
    columns = AttributeColumns(attrs)
    informative = nodes[INFORMATIVE].to_numpy()
    brands, lifted = _brand_ids(nodes), lifted_vetoes(cfg)
    return Judging(cfg, columns, informative, brands, best, lifted, model, neighbours)


def judge(
    context: Judging,
    cosine: np.ndarray | None,
    candidates: pl.DataFrame,
    features: dict[str, np.ndarray] | None = None,
) -> pl.DataFrame:
    """Score every candidate and decide it, given what `judging` made of them (its settings,
    attributes and cosines): jaccard, cosine, score, accepted, veto_reason.

    A pair is accepted when nothing vetoes it and, with the learned judge (default, with
    embeddings), its probability (`pair_model`) reaches accept_probability; that probability is
    its score for the average linkage. ``features``, when given and embeddings are used,
    receives the judge's pair features. With the rule judge (or without embeddings), a
    pair is accepted when the titles share a model code or are similar enough (cosine >=
    accept_cosine and Jaccard >= accept_jaccard, or Jaccard >= accept_jaccard_alone; Jaccard >=
    accept_jaccard alone when no embeddings are used), and its score is the cosine, else
    Jaccard (1.0 for a shared code).

    The checks are `match.jaccard` and `match.assess` per pair, column-wise over encoded
    attributes (`AttributeColumns`; a test checks they agree pair by pair), in chunks of pairs
    (`judge_mapped` maps the same chunks over a runner)."""
    parts, found = [], []
    with progress.step(JUDGE_STEP, len(candidates), "pairs") as counter:
        for lo, hi in partitions.spans(len(candidates), _JUDGE_CHUNK):
            found.append(None if features is None else {})
            part_cosine = None if cosine is None else cosine[lo:hi]
            chunk = candidates.slice(lo, hi - lo)
            parts.append(_judge_chunk(context, chunk, part_cosine, found[-1]))
            counter.advance(hi - lo)
    if features is not None and found[0]:
        features.update({key: np.concatenate([f[key] for f in found]) for key in found[0]})
    return pl.concat(parts)


JUDGE_STEP = "judging candidate pairs"


@dataclass(frozen=True)
class JudgePlan(Plan):
    """What every span of a mapped judging reads: the attributes and the best cosines
    (`Judging`, pickled for workers), the candidates sorted by (a, b), so that a span is a
    range of the pairs' smaller node, and their cosines."""

    context: Judging
    candidates: pl.DataFrame | pl.LazyFrame
    cosine: np.ndarray | None


def judge_span(plan: str, span: Span, cfg: Any) -> str:
    """A mapped span: its candidates judged into a parquet file beside the plan folder, named by
    the span (written atomically: a retried span rewrites the same file). The settings it
    judges by are the plan's; ``cfg``, the map's, is not read."""
    held = partitions.held(plan, JudgePlan.read)
    lo, hi = span
    chunk = held.candidates.slice(lo, hi - lo).lazy().collect()
    cosine = None if held.cosine is None else np.asarray(held.cosine[lo:hi])
    scored = _judge_chunk(held.context, chunk, cosine, None)
    return str(io.write_parquet(scored, Path(plan).parent / f"judged-{lo:012d}.parquet"))


def judge_mapped(
    cfg: PairsieveConfig,
    context: Judging,
    cosine: np.ndarray | None,
    candidates: pl.DataFrame,
    mapper: Mapper,
) -> list[str]:
    """`judge` as a map over spans of the candidates on ``mapper``'s runner (``cfg.runner``),
    given what `judging` made of them: the parquet files of the judged spans, in span order
    (together, `judge`'s frame). Only a span's judged pairs are in memory at a time, and the
    vectors the cosines came from are not needed."""
    folder = mapper.folder / "judge-plan"
    JudgePlan(context, candidates, cosine).write(folder)
    spans = partitions.spans(len(candidates), _JUDGE_CHUNK)
    return mapper.run(judge_span, folder, spans, cfg, JUDGE_STEP)


@dataclass(frozen=True)
class Judging:
    """What every chunk of `judge` reads: the attributes encoded once, whether each node's
    title is informative (`INFORMATIVE`) and its brand (`_brand_ids`), and each node's best
    cosine over all candidates (a feature of the learned judge)."""

    cfg: ClusterConfig
    columns: AttributeColumns
    informative: np.ndarray
    brands: np.ndarray
    best: np.ndarray | None
    lifted: frozenset[str]
    model: pair_model.PairModel | None = None  # None: the shipped pair model
    neighbours: csr_matrix | None = None  # the graph of `pair_model.NEIGHBOUR_FEATURES`


def _judge_chunk(
    context: Judging,
    candidates: pl.DataFrame,
    cosine: np.ndarray | None,
    features: dict[str, np.ndarray] | None,
) -> pl.DataFrame:
    cfg, columns = context.cfg, context.columns
    a = candidates["a"].to_numpy().astype(np.int64, copy=False)
    b = candidates["b"].to_numpy().astype(np.int64, copy=False)
    jac = columns.jaccard(a, b)
    reason, shared = _vetoes(context, a, b)
    vetoed = reason > 0
    names = columns.reason_names()
    reasons = pl.Series(S.VETO_REASON, names, dtype=pl.String).gather(reason).cast(VETO_TYPE)
    learned = uses_pair_model(cfg) and cosine is not None
    if cosine is not None and (learned or features is not None):
        signals = candidates[S.SIGNAL]
        best, graph = context.best, context.neighbours
        pairs = pair_model.PairInputs(a, b, jac, shared, signals, cosine, best, graph)
        found = {} if features is None else features
        probability = _learned_probability(columns, pairs, found, context.model)
    if learned:
        score = probability
        similar, shared = score >= cfg.accept_probability, np.zeros(len(a), dtype=bool)
    elif cosine is not None:
        similar = (cosine >= cfg.accept_cosine) & (jac >= cfg.accept_jaccard)
        similar |= jac >= cfg.accept_jaccard_alone
        shared &= cosine >= cfg.code_min_cosine
        score = np.where(shared, 1.0, cosine)
    else:
        similar = jac >= cfg.accept_jaccard
        score = np.where(shared, 1.0, jac)
    return candidates.with_columns(
        pl.Series(S.JACCARD, jac.round(4)),
        pl.Series(S.COSINE, cosine.round(4), dtype=pl.Float64)
        if cosine is not None
        else pl.lit(None, dtype=pl.Float64).alias(S.COSINE),
        pl.Series("score", score.astype(np.float64)),
        pl.Series(S.ACCEPTED, ~vetoed & (shared | similar)),
        reasons,
    )


def uses_pair_model(cfg: ClusterConfig) -> bool:
    """The learned judge decides when chosen and embeddings give it its cosine features."""
    return cfg.judge == "learned" and cfg.use_embeddings


def resolved_link_threshold(cfg: ClusterConfig) -> float:
    """``cfg.link_threshold``, or its default for the judge in use (see the knob): 0.3 for
    the learned judge's probabilities (best on both PriceRunner category halves, Abt-Buy
    0.803 vs 0.795 at 0.4), 0.5 for the rule's cosine and Jaccard scores."""
    if cfg.link_threshold is not None:
        return cfg.link_threshold
    return 0.3 if uses_pair_model(cfg) else 0.5


def _learned_probability(
    columns: AttributeColumns,
    pairs: pair_model.PairInputs,
    features: dict[str, np.ndarray],
    model: pair_model.PairModel | None,
) -> np.ndarray:
    """(m,) float64 P(same product) of each pair by ``model`` (None: the shipped pair
    model); ``features`` is filled with the pair features."""
    found = pair_model.pair_features(columns.words, columns.weights, columns.has_codes, pairs)
    features.update(found)
    return (model or pair_model.load_model()).probability(features)
