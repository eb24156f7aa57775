"""Vocabulary of the synthetic marketplace: categories, product lines, variants, seller wording.

The words are data (`synth_vocab.json`), flattened into lookup tables (`Tables`) that
`pairsieve.datasets.synth` gathers from to write listings.
Brands and line names are real so that titles tokenise and embed like real ones; generations
beyond the real ones are fictional. ``SIZE_FORMS`` holds how sellers write one size, four house
styles per unit (``{v}`` the size, ``{c}`` the size in centimetres); ``REGIONS`` the region codes
sellers append to part numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve.datasets.clicklog import COLOURS


@dataclass(frozen=True)
class Category:
    """One product category. ``lines`` are (brand, model pattern with {g} = generation, first
    generation, part-number prefix); variants are ``tiers`` x ``sizes``."""

    label: str
    lines: tuple[tuple[str, str, int, str], ...]
    tiers: tuple[str, ...]
    sizes: tuple[int, ...]
    unit: str
    n_colours: int
    words: tuple[str, ...]
    price: float
    glue_tier: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Category:
        tuples = {k: tuple(v) for k, v in data.items() if isinstance(v, list)}
        tuples["lines"] = tuple(tuple(line) for line in data["lines"])
        return cls(**{**data, **tuples})


_VOCAB = json.loads((Path(__file__).with_suffix(".json")).read_text(encoding="utf-8"))
CATEGORIES = tuple(Category.from_json(c) for c in _VOCAB["categories"])
SIZE_FORMS = {unit: tuple(forms) for unit, forms in _VOCAB["size_forms"].items()}
REGIONS = tuple(_VOCAB["regions"])


@dataclass(frozen=True)
class Tables:
    """The vocabulary flattened into lookup series, so per-row fields are vectorised gathers."""

    line_cat: np.ndarray
    line_first_gen: np.ndarray
    cat_tiers: np.ndarray
    cat_sizes: np.ndarray
    cat_colours: np.ndarray
    cat_words: np.ndarray
    tier_offset: np.ndarray
    size_offset: np.ndarray
    word_offset: np.ndarray
    cat_price: np.ndarray
    cat_glue: np.ndarray
    strings: dict[str, pl.Series] = field(default_factory=dict)


def _size_text(form: str, value: int) -> str:
    return form.format(v=value, c=round(value * 2.54))


def build_tables() -> Tables:
    """The vocabulary as `Tables`."""
    lines = [(c, *line) for c, cat in enumerate(CATEGORIES) for line in cat.lines]
    sizes = [cat.sizes or (None,) for cat in CATEGORIES]
    colour_names = list(COLOURS)
    strings = {
        "brand": [brand for _, brand, _, _, _ in lines],
        "model_head": [pattern.split("{g}")[0] for _, _, pattern, _, _ in lines],
        "model_tail": [pattern.split("{g}")[1] for _, _, pattern, _, _ in lines],
        "code": [code for *_, code in lines],
        "category": [cat.label for cat in CATEGORIES],
        "tier": [tier or None for cat in CATEGORIES for tier in cat.tiers],
        "tier_letter": ["ABCDEFGH"[i] for cat in CATEGORIES for i in range(len(cat.tiers))],
        # size forms: row (global size index) * 4 + style
        "size": [
            None if v is None else _size_text(SIZE_FORMS[cat.unit][style], v)
            for cat, values in zip(CATEGORIES, sizes, strict=True)
            for v in values
            for style in range(4)
        ],
        # colour forms: colour * 4 + language (English, German, French, Swedish)
        "colour": [
            name.capitalize() if lang == 0 else COLOURS[name][lang - 1].capitalize()
            for name in colour_names
            for lang in range(4)
        ],
        "word": [w for cat in CATEGORIES for w in cat.words],
        "region": list(REGIONS),
    }

    def offsets(counts: list[int]) -> np.ndarray:
        return np.cumsum([0, *counts[:-1]]).astype(np.int64)

    return Tables(
        line_cat=np.array([c for c, *_ in lines], dtype=np.int64),
        line_first_gen=np.array([g for _, _, _, g, _ in lines], dtype=np.int64),
        cat_tiers=np.array([len(c.tiers) for c in CATEGORIES], dtype=np.int64),
        cat_sizes=np.array([len(v) for v in sizes], dtype=np.int64),
        cat_colours=np.array([c.n_colours for c in CATEGORIES], dtype=np.int64),
        cat_words=np.array([len(c.words) for c in CATEGORIES], dtype=np.int64),
        tier_offset=offsets([len(c.tiers) for c in CATEGORIES]),
        size_offset=offsets([len(v) for v in sizes]),
        word_offset=offsets([len(c.words) for c in CATEGORIES]),
        cat_price=np.array([c.price for c in CATEGORIES]),
        cat_glue=np.array([c.glue_tier for c in CATEGORIES]),
        strings={k: pl.Series(k, v, dtype=pl.String) for k, v in strings.items()},
    )
