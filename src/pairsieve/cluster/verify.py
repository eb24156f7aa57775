"""Verification of candidate pairs: attribute vetoes, then acceptance by the learned verifier
(`pairsieve.pair_model.model`) or the hand-set rule, evaluated column-wise over every pair.

Kept apart from `pairsieve.cluster.stage` (candidates, agglomeration, the stage) because it is the
part that decides which pairs may ever join, and the part its tests check pair by pair against
`match.assess` / `match.jaccard`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import ClusterConfig, PairsieveConfig
from pairsieve.core import io, partitions, progress
from pairsieve.core.parallel import in_processes
from pairsieve.core.partitions import Span
from pairsieve.errors import PairsieveError
from pairsieve.pair_model import model as verifier
from pairsieve.text import attributes as text
from pairsieve.text import match

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from pairsieve.cluster.neighbours import Mapper

INFORMATIVE = "_informative"  # node column: the title carries a brand, model or attribute token


def _set_matrix(sets: list, vocab: dict | None = None) -> tuple[csr_matrix, dict]:
    """(n, |vocab|) binary CSR of n sets (row i holds set i) and the item -> column vocabulary.

    Items are taken in sorted order, not set order: set order follows Python's per-process
    string hashing, and the float sums over a row (IDF masses) would differ in the last bit
    from one run to the next.
    """
    from scipy.sparse import csr_matrix

    vocab = {} if vocab is None else vocab
    indptr = np.zeros(len(sets) + 1, dtype=np.int64)
    indices: list[int] = []
    for i, items in enumerate(sets):
        indices.extend(vocab.setdefault(item, len(vocab)) for item in sorted(items))
        indptr[i + 1] = len(indices)
    data = np.ones(len(indices), dtype=np.int32)
    matrix = csr_matrix(
        (data, np.asarray(indices, dtype=np.int64), indptr), shape=(len(sets), max(len(vocab), 1))
    )
    return matrix, vocab


def _overlap(matrix: csr_matrix, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m,) int64 size of the intersection of the sets in rows a[i] and b[i] of a binary CSR."""
    out = np.empty(len(a), dtype=np.int64)
    for start in range(0, len(a), _PAIR_CHUNK):
        end = start + _PAIR_CHUNK
        both = matrix[a[start:end]].multiply(matrix[b[start:end]])
        out[start:end] = np.asarray(both.sum(axis=1)).ravel()
    return out


def _intern(values: list) -> tuple[np.ndarray, list]:
    """(n,) int64 id per value, equal ids for equal values, and the distinct values by id."""
    ids: dict = {}
    found = np.fromiter((ids.setdefault(v, len(ids)) for v in values), np.int64, len(values))
    return found, list(ids)


class _AttributeColumns:
    """The attributes of every node encoded as integer columns and binary set matrices, so the
    checks of `match.assess` and `match.jaccard` run per candidate pair in numpy.

    It keeps no per-node Python object (the titles' distinct code sets are all `match` still
    compares in Python): a mapped span's worker reads it whole, and a million parsed titles
    are GBs where these columns are a few hundred MB.
    """

    def __init__(self, attrs: list[text.Attributes]) -> None:
        self.words, vocab = _set_matrix([a.words for a in attrs])
        self.weights = verifier.word_weights(vocab, self.words)
        self.n_words = np.diff(self.words.indptr)
        self.models, _ = _set_matrix([a.models for a in attrs])
        self.numbers, _ = _set_matrix([a.numbers for a in attrs])
        self.quantities, items = _set_matrix([a.quantities for a in attrs])
        self.units = sorted({unit for unit, _ in items})
        unit_col = {unit: i for i, unit in enumerate(self.units)}
        item_unit = np.zeros(max(len(items), 1), dtype=np.int64)
        for (unit, _), col in items.items():
            item_unit[col] = unit_col[unit]
        self.item_unit = item_unit
        has_unit = np.zeros((len(attrs), max(len(self.units), 1)), dtype=bool)
        for node, a in enumerate(attrs):
            for unit, _ in a.quantities:
                has_unit[node, unit_col[unit]] = True
        self.has_unit = has_unit
        self.generations = _intern([a.generations for a in attrs])[0]
        self.variants = _intern([a.variants for a in attrs])[0]
        self.code_ids, self.code_sets = _intern([match.Codes(a.codes, a.joined) for a in attrs])
        self.has_codes = np.array([bool(a.codes or a.joined) for a in attrs], dtype=bool)

    def jaccard(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`match.jaccard` per pair."""
        inter = _overlap(self.words, a, b)
        union = self.n_words[a] + self.n_words[b] - inter
        with np.errstate(invalid="ignore", divide="ignore"):
            out = inter / union
        return np.where(union == 0, 1.0, out)

    def compare_codes(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`match.compare_codes` per pair, computed once per distinct pair of code sets."""
        shared = np.zeros(len(a), dtype=bool)
        conflicting = np.zeros(len(a), dtype=bool)
        both = np.flatnonzero(self.has_codes[a] & self.has_codes[b])
        if not len(both):
            return shared, conflicting
        codes_a, codes_b = self.code_ids[a[both]], self.code_ids[b[both]]
        keys = codes_a * (int(self.code_ids.max()) + 1) + codes_b
        order = np.argsort(keys)
        head = np.r_[True, keys[order][1:] != keys[order][:-1]]
        first = order[head]
        inverse = np.empty(len(keys), dtype=np.int64)
        inverse[order] = np.cumsum(head) - 1

        def compare(lo: int, hi: int) -> np.ndarray:
            # In chunks, straight into a bool array: at 10^6 listings there are millions of
            # distinct code-set pairs, and a list of result tuples held GBs at the peak.
            out = np.empty((hi - lo, 2), dtype=bool)
            for start in range(lo, hi, _PAIR_CHUNK):
                part = first[start : min(start + _PAIR_CHUNK, hi)]
                sets = self.code_sets
                results = (
                    match.compare_codes(sets[x], sets[y])
                    for x, y in zip(codes_a[part].tolist(), codes_b[part].tolist(), strict=True)
                )
                flat = np.fromiter(chain.from_iterable(results), dtype=bool, count=2 * len(part))
                out[start - lo : start - lo + len(part)] = flat.reshape(-1, 2)
            return out

        table = np.concatenate(in_processes(compare, len(first)))
        shared[both] = table[inverse.ravel(), 0]
        conflicting[both] = table[inverse.ravel(), 1]
        return shared, conflicting

    def quantity_conflict(
        self, a: np.ndarray, b: np.ndarray, lifted: frozenset[str] = frozenset()
    ) -> np.ndarray:
        """(m,) int64 index into ``units`` of `match.quantity_conflict`'s unit, -1 for none;
        units whose ``<unit>_conflict`` is ``lifted`` never conflict."""
        out = np.full(len(a), -1, dtype=np.int64)
        counted = np.array([f"{unit}_conflict" not in lifted for unit in self.units], dtype=bool)
        if not counted.any():
            return out
        for start in range(0, len(a), _PAIR_CHUNK):
            ca, cb = a[start : start + _PAIR_CHUNK], b[start : start + _PAIR_CHUNK]
            both = self.has_unit[ca] & self.has_unit[cb]
            rows = np.flatnonzero(both.any(axis=1))
            if not len(rows):
                continue
            common = self.quantities[ca[rows]].multiply(self.quantities[cb[rows]]).tocoo()
            shared = np.zeros((len(rows), len(self.units)), dtype=bool)
            shared[common.row, self.item_unit[common.col]] = True
            clash = both[rows] & ~shared & counted
            hit = clash.any(axis=1)
            out[start + rows[hit]] = clash[hit].argmax(axis=1)
        return out

    def assess(
        self, a: np.ndarray, b: np.ndarray, lifted: frozenset[str] = frozenset()
    ) -> tuple[np.ndarray, np.ndarray]:
        """`match.assess` per pair: (reason code per pair, shared model code). Reason codes
        index `_REASONS`, 0 meaning none; quantity conflicts are ``len(_REASONS) + unit``.
        A ``lifted`` reason never applies: the pair falls through to the next check."""
        shared_code, code_conflict = self.compare_codes(a, b)
        shared_code &= ~code_conflict
        code_conflict &= "model_code_conflict" not in lifted
        unit = self.quantity_conflict(a, b, lifted)
        generation = (self.generations[a] != self.generations[b]) & (
            "generation_conflict" not in lifted
        )
        models = (
            (np.diff(self.models.indptr)[a] > 0)
            & (np.diff(self.models.indptr)[b] > 0)
            & (_overlap(self.models, a, b) == 0)
        )
        numbers = (
            (np.diff(self.numbers.indptr)[a] > 0)
            & (np.diff(self.numbers.indptr)[b] > 0)
            & (_overlap(self.numbers, a, b) == 0)
        )
        variants = self.variants[a] != self.variants[b]
        models &= "model_token_conflict" not in lifted
        variants &= "variant_conflict" not in lifted
        numbers &= "number_conflict" not in lifted
        strong = np.where(unit >= 0, len(_REASONS) + unit, np.where(generation, _R_GENERATION, 0))
        weak = np.select(
            [models, variants, numbers],
            [_R_MODEL_TOKEN, _R_VARIANT, _R_NUMBER],
            default=0,
        )
        reason = np.where(
            code_conflict,
            _R_MODEL_CODE,
            np.where((strong > 0) | shared_code, strong, weak),
        )
        return reason, shared_code

    def reason_names(self) -> list[str | None]:
        return [*_REASONS, *(f"{unit}_conflict" for unit in self.units)]


_PAIR_CHUNK = 1 << 20
_VERIFY_CHUNK = 1 << 20  # candidates verified at a time (a mapped span): progress, a bounded peak
_REASONS: tuple[str | None, ...] = (
    None,
    "low_information",
    "brand_conflict",
    "model_code_conflict",
    "generation_conflict",
    "model_token_conflict",
    "variant_conflict",
    "number_conflict",
)
# Every reason a veto can give, as an enum (a pair's reason in four bytes, not sixteen).
VETO_TYPE = pl.Enum(
    [*(r for r in _REASONS if r), *(f"{unit}_conflict" for unit in text.UNIT_CLASSES)]
)
_R_LOW, _R_BRAND, _R_MODEL_CODE, _R_GENERATION, _R_MODEL_TOKEN, _R_VARIANT, _R_NUMBER = range(1, 8)


def lifted_vetoes(cfg: ClusterConfig) -> frozenset[str]:
    """``cfg.lifted_vetoes``, checked against the reasons verification can give.

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
    return np.where(has_brand, _intern(nodes[S.BRAND].to_list())[0], -1)


def _vetoes(context: Judging, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pair (a[i], b[i]): the veto reason code (0 for none) and whether the titles share a
    model code. Low-information titles and different brands veto before the attributes do;
    the context's ``lifted`` reasons do not veto."""
    informative, brands, lifted = context.informative, context.brands, context.lifted
    low = ~(informative[a] & informative[b]) & ("low_information" not in lifted)
    brand = ~low & (brands[a] >= 0) & (brands[b] >= 0) & (brands[a] != brands[b])
    brand &= "brand_conflict" not in lifted
    rest = np.flatnonzero(~low & ~brand)
    reason = np.where(low, _R_LOW, np.where(brand, _R_BRAND, 0))
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


def judging(  # noqa: PLR0913 - what a judgement reads
    cfg: ClusterConfig,
    candidates: pl.DataFrame,
    nodes: pl.DataFrame,
    attrs: list[text.Attributes],
    cosine: np.ndarray | None,
    model: verifier.PairModel | None = None,
    neighbours: csr_matrix | None = None,
) -> Judging:
    """What every chunk of the candidates is judged with (`Judging`), given every candidate's
    cosine (`pair_cosines`; None without embeddings), the learned pair model (None: shipped) and
    the candidate graph its `verifier.NEIGHBOUR_FEATURES` read (None: not read)."""
    best = None
    if cosine is not None:
        a = candidates["a"].to_numpy().astype(np.int64, copy=False)
        b = candidates["b"].to_numpy().astype(np.int64, copy=False)
        best = verifier.best_cosines(len(attrs), a, b, cosine)
    columns = _AttributeColumns(attrs)
    informative = nodes[INFORMATIVE].to_numpy()
    brands, lifted = _brand_ids(nodes), lifted_vetoes(cfg)
    return Judging(cfg, columns, informative, brands, best, lifted, model, neighbours)


def verify(
    context: Judging,
    cosine: np.ndarray | None,
    candidates: pl.DataFrame,
    features: dict[str, np.ndarray] | None = None,
) -> pl.DataFrame:
    """Score every candidate and decide it, given what `judging` made of them (its settings,
    attributes and cosines): jaccard, cosine, score, accepted, veto_reason.

    A pair is accepted when nothing vetoes it and, with the learned verifier (default, with
    embeddings), its probability (`verifier`) reaches accept_probability; that probability is
    its score for the average linkage. ``features``, when given and embeddings are used,
    receives the verifier's pair features. With the rule verifier (or without embeddings), a
    pair is accepted when the titles share a model code or are similar enough (cosine >=
    accept_cosine and Jaccard >= accept_jaccard, or Jaccard >= accept_jaccard_alone; Jaccard >=
    accept_jaccard alone when no embeddings are used), and its score is the cosine, else
    Jaccard (1.0 for a shared code).

    The checks are `match.jaccard` and `match.assess` per pair, column-wise over encoded
    attributes (`_AttributeColumns`; a test checks they agree pair by pair), in chunks of pairs
    (`verify_mapped` maps the same chunks over a runner)."""
    parts, found = [], []
    with progress.step(VERIFY_STEP, len(candidates), "pairs") as counter:
        for lo, hi in partitions.spans(len(candidates), _VERIFY_CHUNK):
            found.append(None if features is None else {})
            part_cosine = None if cosine is None else cosine[lo:hi]
            chunk = candidates.slice(lo, hi - lo)
            parts.append(_verify_chunk(context, chunk, part_cosine, found[-1]))
            counter.advance(hi - lo)
    if features is not None and found[0]:
        features.update({key: np.concatenate([f[key] for f in found]) for key in found[0]})
    return pl.concat(parts)


VERIFY_STEP = "verifying candidate pairs"


@dataclass(frozen=True)
class VerifyPlan:
    """What every span of a mapped verification reads: the attributes and the best cosines
    (`Judging`), the candidates sorted by (a, b), so that a span is a range of the pairs'
    smaller node, and their cosines."""

    context: Judging
    candidates: pl.DataFrame | pl.LazyFrame
    cosine: np.ndarray | None

    def write(self, folder: Path) -> Path:
        """Write the plan into ``folder`` (for workers in other processes: the encoded
        attributes are pickled) and hold it in this process, whose spans use it as it is."""
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "context.pickle", "wb") as out:
            pickle.dump(self.context, out, protocol=pickle.HIGHEST_PROTOCOL)
        io.write_parquet(self.candidates, folder / "candidates.parquet")
        if self.cosine is not None:
            np.save(folder / "cosine.npy", self.cosine)
        partitions.hold(folder, self)
        return folder

    @staticmethod
    def read(folder: Path) -> VerifyPlan:
        """The plan in ``folder``: the candidates scanned and the cosines memory-mapped (a
        span reads its own rows)."""
        with open(folder / "context.pickle", "rb") as source:
            context = pickle.load(source)
        cosine = folder / "cosine.npy"
        return VerifyPlan(
            context,
            pl.scan_parquet(folder / "candidates.parquet"),
            np.load(cosine, mmap_mode="r") if cosine.exists() else None,
        )


def verify_span(plan: str, span: Span, cfg: Any) -> str:
    """A mapped span: its candidates judged into a parquet file beside the plan folder, named by
    the span (written atomically: a retried span rewrites the same file). The settings it
    judges by are the plan's; ``cfg``, the map's, is not read."""
    held = partitions.held(plan, VerifyPlan.read)
    lo, hi = span
    chunk = held.candidates.slice(lo, hi - lo).lazy().collect()
    cosine = None if held.cosine is None else np.asarray(held.cosine[lo:hi])
    scored = _verify_chunk(held.context, chunk, cosine, None)
    return str(io.write_parquet(scored, Path(plan).parent / f"verified-{lo:012d}.parquet"))


def verify_mapped(
    cfg: PairsieveConfig,
    context: Judging,
    cosine: np.ndarray | None,
    candidates: pl.DataFrame,
    mapper: Mapper,
) -> list[str]:
    """`verify` as a map over spans of the candidates on ``mapper``'s runner (``cfg.runner``),
    given what `judging` made of them: the parquet files of the judged spans, in span order
    (together, `verify`'s frame). Only a span's judged pairs are in memory at a time, and the
    vectors the cosines came from are not needed."""
    folder = mapper.folder / "verify-plan"
    VerifyPlan(context, candidates, cosine).write(folder)
    spans = partitions.spans(len(candidates), _VERIFY_CHUNK)
    try:
        return mapper.map_spans(verify_span, str(folder), spans, cfg, VERIFY_STEP)
    finally:
        partitions.forget(folder)


@dataclass(frozen=True)
class Judging:
    """What every chunk of `verify` reads: the attributes encoded once, whether each node's
    title is informative (`INFORMATIVE`) and its brand (`_brand_ids`), and each node's best
    cosine over all candidates (a feature of the learned verifier)."""

    cfg: ClusterConfig
    columns: _AttributeColumns
    informative: np.ndarray
    brands: np.ndarray
    best: np.ndarray | None
    lifted: frozenset[str]
    model: verifier.PairModel | None = None  # None: the shipped pair model
    neighbours: csr_matrix | None = None  # the graph of `verifier.NEIGHBOUR_FEATURES`


def _verify_chunk(
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
    learned = uses_learned_verifier(cfg) and cosine is not None
    if cosine is not None and (learned or features is not None):
        signals = candidates[S.SIGNAL]
        best, graph = context.best, context.neighbours
        pairs = verifier.PairInputs(a, b, jac, shared, signals, cosine, best, graph)
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


def uses_learned_verifier(cfg: ClusterConfig) -> bool:
    """The learned verifier decides when chosen and embeddings give it its cosine features."""
    return cfg.verifier == "learned" and cfg.use_embeddings


def resolved_link_threshold(cfg: ClusterConfig) -> float:
    """``cfg.link_threshold``, or its default for the verifier in use (see the knob): 0.3 for
    the learned verifier's probabilities (best on both PriceRunner category halves, Abt-Buy
    0.803 vs 0.795 at 0.4), 0.5 for the rule's cosine and Jaccard scores."""
    if cfg.link_threshold is not None:
        return cfg.link_threshold
    return 0.3 if uses_learned_verifier(cfg) else 0.5


def _learned_probability(
    columns: _AttributeColumns,
    pairs: verifier.PairInputs,
    features: dict[str, np.ndarray],
    model: verifier.PairModel | None,
) -> np.ndarray:
    """(m,) float64 P(same product) of each pair by ``model`` (None: the shipped `verifier`
    model); ``features`` is filled with the pair features."""
    found = verifier.pair_features(columns.words, columns.weights, columns.has_codes, pairs)
    features.update(found)
    return (model or verifier.load_model()).probability(features)
