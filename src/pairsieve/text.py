"""Text normalisation for matching: keeps digits and units, so variants stay distinguishable.

The original text is always kept for training; normalised text is only a matching key.
"""

from __future__ import annotations

import re
import unicodedata

import polars as pl

# Units whose spelling varies between sellers ("64 GB", "64gb", "64-gb"): glued to their number.
UNITS = (
    "tb|gb|mb|kb|mah|wh|mp|mpx|ghz|mhz|hz|w|kw|v|mm|cm|m|l|ml|kg|g|in|inch|"
    "mbps|gbps|rpm|db|k|p|x"
)
_UNIT_GLUE = rf"(\d)[\s\-]+({UNITS})\b"
_CONTROL = r"[\x00-\x1f\x7f-\x9f]"
_SEPARATORS = r"[\s\u00a0]+"


def normalize_expr(expr: pl.Expr) -> pl.Expr:
    """Vectorised normalisation: NFKC, lower case, no control chars, units glued, single spaces."""
    return (
        expr.str.normalize("NFKC")
        .str.to_lowercase()
        .str.replace_all(_CONTROL, " ")
        .str.replace_all(_SEPARATORS, " ")
        .str.replace_all(_UNIT_GLUE, "${1}${2}")
        .str.strip_chars()
    )


def normalize(text: str) -> str:
    """The same normalisation as `normalize_expr` for one string."""
    out = unicodedata.normalize("NFKC", text).lower()
    out = re.sub(_CONTROL, " ", out)
    out = re.sub(_SEPARATORS, " ", out)
    out = re.sub(_UNIT_GLUE, r"\1\2", out)
    return out.strip()
