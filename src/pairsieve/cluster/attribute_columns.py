"""Every node's attributes as integer columns and binary set matrices, and the veto reasons.

`match.assess` and `match.jaccard` decide one pair from two parsed titles; judging asks the same
of millions of pairs, so the titles are encoded once here and the checks run per pair in numpy.
A test checks the two agree pair by pair.
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from pairsieve.core.parallel import in_processes
from pairsieve.pair_model import model as pair_model
from pairsieve.text import attributes as text
from pairsieve.text import match

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

_PAIR_CHUNK = 1 << 20  # pairs compared at a time: a bounded peak


def set_matrix(sets: list, vocab: dict | None = None) -> tuple[csr_matrix, dict]:
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


def overlap(matrix: csr_matrix, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(m,) int64 size of the intersection of the sets in rows a[i] and b[i] of a binary CSR."""
    out = np.empty(len(a), dtype=np.int64)
    for start in range(0, len(a), _PAIR_CHUNK):
        end = start + _PAIR_CHUNK
        both = matrix[a[start:end]].multiply(matrix[b[start:end]])
        out[start:end] = np.asarray(both.sum(axis=1)).ravel()
    return out


def intern(values: list) -> tuple[np.ndarray, list]:
    """(n,) int64 id per value, equal ids for equal values, and the distinct values by id."""
    ids: dict = {}
    found = np.fromiter((ids.setdefault(v, len(ids)) for v in values), np.int64, len(values))
    return found, list(ids)


class AttributeColumns:
    """The attributes of every node encoded as integer columns and binary set matrices, so the
    checks of `match.assess` and `match.jaccard` run per candidate pair in numpy.

    It keeps no per-node Python object (the titles' distinct code sets are all `match` still
    compares in Python): a mapped span's worker reads it whole, and a million parsed titles
    are GBs where these columns are a few hundred MB.
    """

    def __init__(self, attrs: list[text.Attributes]) -> None:
        self.words, vocab = set_matrix([a.words for a in attrs])
        self.weights = pair_model.word_weights(vocab, self.words)
        self.n_words = np.diff(self.words.indptr)
        self.models, _ = set_matrix([a.models for a in attrs])
        self.numbers, _ = set_matrix([a.numbers for a in attrs])
        self.quantities, items = set_matrix([a.quantities for a in attrs])
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
        self.generations = intern([a.generations for a in attrs])[0]
        self.variants = intern([a.variants for a in attrs])[0]
        self.code_ids, self.code_sets = intern([match.Codes(a.codes, a.joined) for a in attrs])
        self.has_codes = np.array([bool(a.codes or a.joined) for a in attrs], dtype=bool)

    def jaccard(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """`match.jaccard` per pair."""
        inter = overlap(self.words, a, b)
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
        index `REASONS`, 0 meaning none; quantity conflicts are ``len(REASONS) + unit``.
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
            & (overlap(self.models, a, b) == 0)
        )
        numbers = (
            (np.diff(self.numbers.indptr)[a] > 0)
            & (np.diff(self.numbers.indptr)[b] > 0)
            & (overlap(self.numbers, a, b) == 0)
        )
        variants = self.variants[a] != self.variants[b]
        models &= "model_token_conflict" not in lifted
        variants &= "variant_conflict" not in lifted
        numbers &= "number_conflict" not in lifted
        strong = np.where(unit >= 0, len(REASONS) + unit, np.where(generation, R_GENERATION, 0))
        weak = np.select(
            [models, variants, numbers],
            [R_MODEL_TOKEN, R_VARIANT, R_NUMBER],
            default=0,
        )
        reason = np.where(
            code_conflict,
            R_MODEL_CODE,
            np.where((strong > 0) | shared_code, strong, weak),
        )
        return reason, shared_code

    def reason_names(self) -> list[str | None]:
        return [*REASONS, *(f"{unit}_conflict" for unit in self.units)]


REASONS: tuple[str | None, ...] = (
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
    [*(r for r in REASONS if r), *(f"{unit}_conflict" for unit in text.UNIT_CLASSES)]
)
R_LOW, R_BRAND, R_MODEL_CODE, R_GENERATION, R_MODEL_TOKEN, R_VARIANT, R_NUMBER = range(1, 8)
