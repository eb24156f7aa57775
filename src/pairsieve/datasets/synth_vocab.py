"""Vocabulary of the synthetic marketplace: categories, product lines, variants, seller wording.

The words are data (`synth_vocab.json`); `pairsieve.datasets.synth` turns them into listings.
Brands and line names are real so that titles tokenise and embed like real ones; generations
beyond the real ones are fictional. ``SIZE_FORMS`` holds how sellers write one size, four house
styles per unit (``{v}`` the size, ``{c}`` the size in centimetres); ``REGIONS`` the region codes
sellers append to part numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


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
