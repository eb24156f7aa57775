"""Text normalisation and attribute extraction for matching listings.

Normalisation keeps digits and units, so variants stay distinguishable ("64 GB", "64gb" and
"64-gb" all become "64gb"); it drops prices, which tell offers apart, not products. The
original text is always kept for training; normalised text is only a matching key.

Attributes are what separates two products whose titles are otherwise near-identical (measured
on PriceRunner): model codes (mixed letter-digit tokens such as "ue55nu8000"), quantities
with units (capacities, sizes, weights, speeds), bare numbers ("iphone 8" vs "iphone 7"), short
model tokens ("s8", "a2", "i7") and variant words without digits ("plus", "max", "mark ii").
Only general product vocabulary lives here (units, variant words, colour words), no data-set
specific lists.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, replace

import polars as pl

from pairsieve.text.vocabulary import COLOUR_WORDS, GENERATION_WORDS, VARIANT_WORDS

# Units whose spelling varies between sellers ("64 GB", "64gb", "64-gb"): glued to their number.
UNITS = (
    "tb|gb|mb|kb|mah|wh|mp|mpx|ghz|mhz|hz|w|kw|v|mm|cm|m|l|ml|kg|g|in|inch|mbps|gbps|rpm|db|k|p|x"
)
_UNIT_GLUE = rf"(\d)[\s\-]+({UNITS})\b"
# French byte units ("16 Go", "45 Mo/s"): the same sizes as "16gb" and "45mb/s", so spelt so.
# Not "To" (terabytes): "usb 2.0 to db25" is English.
_FRENCH_BYTES = r"\b(\d+(?:\.\d+)?)[\s\-]?([gm])o\b"
# A speed in bytes ("90 MB/s", "20 mb/sec", "95mb/sek."): a rate, not a size, spelt "90mbs".
# Read as bytes, the "90mb" of "16gb ... 90mb/s" and "32gb ... 90mb/s" is a size both titles
# share, which hides their capacity conflict.
_BYTE_RATE = r"\b(\d+(?:\.\d+)?)\s?([kmg])b\s?/\s?s(?:ec|ek|eg)?\b\.?"
# A pixel count whose decimal point became a space ("20 2 mp", "12 1mp": titles stripped of
# punctuation) is one number, "20.2mp". A lone digit between a number and a pixel unit has no
# other reading; for other units it may ("2 4gb" is two 4 GB sticks), so they are left alone.
_LOST_DECIMAL = r"\b(\d+) (\d)[\s\-]?(mpx|mp)\b"
_MEGAPIXEL = r"\bmega ?pixels?\b"  # spelt "mp", the unit most titles use
# A price ("on sale for $2498.88", "used $1", "39,90 €") is what a seller asks, not what the
# product is: as a bare number it would tell two offers of one camera apart.
_PRICE = r"[$€£¥]\s?\d[\d,]*(?:\.\d+)?|\d[\d,]*(?:\.\d+)?\s?[€£]"
_CONTROL = r"[\x00-\x1f\x7f-\x9f]"
_SEPARATORS = r"[\s\u00a0]+"


# The rewrites of a lower-cased NFKC title, in order, as (pattern, replacement in polars'
# "${1}" spelling); `normalize_expr` and `normalize` both apply this one list.
_REWRITES = (
    (_CONTROL, " "),
    (_PRICE, " "),
    (_SEPARATORS, " "),
    (_FRENCH_BYTES, "${1}${2}b"),
    (_BYTE_RATE, "${1}${2}bs"),
    (_MEGAPIXEL, "mp"),
    (_LOST_DECIMAL, "${1}.${2}${3}"),
    (_UNIT_GLUE, "${1}${2}"),
)
_PYTHON_REWRITES = tuple(
    (re.compile(pattern), re.sub(r"\$\{(\d+)\}", r"\\g<\1>", replacement))
    for pattern, replacement in _REWRITES
)


def normalize_expr(expr: pl.Expr) -> pl.Expr:
    """Vectorised normalisation: NFKC, lower case, no control chars or prices, units glued,
    single spaces."""
    out = expr.str.normalize("NFKC").str.to_lowercase()
    for pattern, replacement in _REWRITES:
        out = out.str.replace_all(pattern, replacement)
    return out.str.strip_chars()


def brand_expr(columns: list[str]) -> pl.Expr:
    """The ``brand`` column normalised like titles, "" when missing or absent."""
    if "brand" not in columns:
        return pl.lit("").alias("brand")
    return normalize_expr(pl.col("brand").cast(pl.String)).fill_null("").alias("brand")


def normalize(text: str) -> str:
    """The same normalisation as `normalize_expr` for one string."""
    out = unicodedata.normalize("NFKC", text).lower()
    for pattern, replacement in _PYTHON_REWRITES:
        out = pattern.sub(replacement, out)
    return out.strip()


# --- tokens --------------------------------------------------------------------------------------

# A unit spelled as a word ("inch", "litre") or symbol maps to one unit class, so "55in" and
# "55 inch" compare equal; tb becomes 1000 gb so "1tb" and "1000gb" agree.
_UNIT_CLASS = {
    "tb": ("bytes", 1000.0),
    "gb": ("bytes", 1.0),
    "mb": ("bytes", 0.001),
    "mah": ("charge", 1.0),
    "wh": ("energy", 1.0),
    "mp": ("pixels", 1.0),
    "mpx": ("pixels", 1.0),
    "ghz": ("freq", 1000.0),
    "mhz": ("freq", 1.0),
    "hz": ("refresh", 1.0),
    "w": ("power", 1.0),
    "kw": ("power", 1000.0),
    "v": ("volt", 1.0),
    "mm": ("length", 0.1),
    "cm": ("length", 1.0),
    "m": ("length", 100.0),
    "l": ("volume", 1.0),
    "ltr": ("volume", 1.0),
    "litre": ("volume", 1.0),
    "liter": ("volume", 1.0),
    "ml": ("volume", 0.001),
    "kg": ("mass", 1.0),
    "g": ("mass", 0.001),
    "in": ("inch", 1.0),
    "inch": ("inch", 1.0),
    "inches": ("inch", 1.0),
    '"': ("inch", 1.0),
    "rpm": ("rpm", 1.0),
    "db": ("noise", 1.0),
    "mbps": ("rate", 1.0),
    "gbps": ("rate", 1000.0),
    "kbs": ("rate", 0.008),  # bytes a second, in megabits a second
    "mbs": ("rate", 8.0),
    "gbs": ("rate", 8000.0),
    "p": ("lines", 1.0),
    "k": ("k", 1.0),
    "x": ("times", 1.0),
    "pack": ("pack", 1.0),
    "pcs": ("pack", 1.0),
    "pk": ("pack", 1.0),
}
# Figures sellers round: one offer says 16.1 MP, another 16 MP. Whole megapixels tell cameras
# apart; the decimals do not, so a pixel count is compared in whole units.
_ROUNDED_UNITS = frozenset({"pixels"})
# The unit classes a quantity conflict can name ("<class>_conflict").
UNIT_CLASSES = tuple(sorted({unit for unit, _ in _UNIT_CLASS.values()}))
_QUANTITY = re.compile(
    r"^(\d+(?:\.\d+)?)(" + "|".join(sorted(_UNIT_CLASS, key=len, reverse=True)) + r")$"
)
# Mobile network generations look like quantities ("4g") but name a radio, not a size.
_NETWORK = frozenset({"2g", "3g", "4g", "5g", "lte"})
_NUMBER = re.compile(r"^\d+(?:\.\d+)?$")
_ALNUM = re.compile(r"^(?=.*[a-z])(?=.*\d)[a-z0-9]+$")
_SPLIT = re.compile(r"[^a-z0-9.+\"]+")
_HYPHEN_CODE = re.compile(r"\b([a-z0-9]*\d[a-z0-9]*)-(?=[a-z0-9]*\d)([a-z0-9]+)\b")
# "dav-hdx279wc", "cli-8y", "mb15-blu-see-v2": a hyphenated group with a part mixing letters
# and digits is one model code, which other sellers write glued ("davhdx279wc", "cli8y").
_HYPHEN_GROUP = re.compile(r"\b[a-z0-9]+(?:-[a-z0-9]+)+\b")
_MIXED_PART = re.compile(r"^(?=.*[a-z])(?=.*\d)")
# "55pus6503/12" and "mq8n2b/a": a short suffix after "/" is a region code, not a token.
_REGION_SUFFIX = re.compile(r"\b([a-z]*\d[a-z0-9]*)/[a-z0-9]{1,3}\b")
# "s8+" is "s8 plus"; a trailing "+" on a word is a variant marker, not punctuation.
_PLUS = re.compile(r"(?<=[a-z0-9])\+")


def _join_mixed_group(match: re.Match[str]) -> str:
    parts = match.group(0).split("-")
    return "".join(parts) if any(_MIXED_PART.match(p) for p in parts) else match.group(0)


def tokens(title_norm: str) -> list[str]:
    """Word tokens of a normalised title; hyphenated codes joined ("i7-8700k" -> "i78700k")."""
    text = title_norm
    # Each pattern needs its character; most titles have none, so skip the regex call.
    if "/" in text:
        text = _REGION_SUFFIX.sub(r"\1", text)
    if "+" in text:
        text = _PLUS.sub(" plus", text)
    if "-" in text:
        text = _HYPHEN_CODE.sub(r"\1\2", text)
        text = _HYPHEN_GROUP.sub(_join_mixed_group, text)
    out = []
    for tok in _SPLIT.split(text):
        tok = tok.strip(".")
        if tok:
            out.append(tok)
    return out


@dataclass(frozen=True, slots=True)
class Attributes:
    """What a title says about its product, beyond its words.

    ``codes`` are model codes (>= 4 chars, letters and >= 2 digits, not a quantity);
    ``joined`` codes split by a space and rejoined ("gnp 2713" -> "gnp2713");
    ``models`` short letter-digit tokens ("s8", "a2"); ``numbers`` bare numbers;
    ``quantities`` (unit class, value) pairs; ``variants`` digit-less variant words;
    ``generations`` generation markers;
    ``words`` the token set used for Jaccard (colour words removed).
    """

    codes: frozenset[str]
    joined: frozenset[str]
    models: frozenset[str]
    numbers: frozenset[str]
    quantities: frozenset[tuple[str, float]]
    variants: frozenset[str]
    generations: frozenset[str]
    words: frozenset[str]

    @property
    def informative(self) -> bool:
        """True when the title names a product: a code or model token, or two weaker cues.

        Titles such as "washing machine" (90 offers of 90 products in PriceRunner) carry no
        identifying token; they are never merged on text alone.
        """
        if self.codes or self.joined or self.models:
            return True
        named = self.variants | self.generations
        cues = bool(named) + bool(self.numbers) + bool(self.quantities)
        return cues >= 2 and bool(named or self.numbers)

    def __reduce__(self) -> tuple:
        """Pickled as its field values, ~2x faster than the dataclass default (which sets each
        slot by name): `cluster` sends half of a catalog's attributes from a worker process."""
        fields = (self.codes, self.joined, self.models, self.numbers, self.quantities)
        return Attributes, (*fields, self.variants, self.generations, self.words)

    def without_codes(self, common: set[str] | frozenset[str]) -> Attributes:
        """A copy whose codes exclude ``common`` ones: a code on many different titles
        ("hdr1000", "lga1151") names a feature, not a product."""
        if not (self.codes | self.joined) & common:
            return self
        return replace(self, codes=self.codes - common, joined=self.joined - common)


def _is_code(tok: str) -> bool:
    """A model code: >= 4 chars with letters and >= 2 digits, or an integer of >= 4 digits."""
    if tok.isdigit():
        return len(tok) >= 4
    digits = sum(map(str.isdigit, tok))
    return len(tok) >= 4 and digits >= 2 and _ALNUM.match(tok) is not None


_ROMAN = {"1": "i", "2": "ii", "3": "iii", "4": "iv", "5": "v", "6": "vi", "7": "vii", "8": "viii"}
_MARK = re.compile(r"^(?:mark|mk)(\d|i{1,3}|iv|v|vi{1,3})$")
_VARIANT_DIGITS = re.compile(
    r"^(" + "|".join(sorted(VARIANT_WORDS, key=len, reverse=True)) + r")(\d{1,2})$"
)


def _generation(tok: str, nxt: str) -> str | None:
    """Roman generation named by "mark ii", "mk 2", "mk4", "iv" (None when not one)."""
    if tok in GENERATION_WORDS and tok not in {"mark", "mk"}:
        return tok
    glued = _MARK.match(tok)
    if glued:
        return _ROMAN.get(glued.group(1), glued.group(1))
    if tok in {"mark", "mk"} and (nxt in _ROMAN or nxt in GENERATION_WORDS):
        return _ROMAN.get(nxt, nxt)
    return None


def _joined_codes(toks: list[str]) -> set[str]:
    """Codes split by a space: "gnp 2713" -> "gnp2713", "55 uk6500" -> "55uk6500"."""
    out = set()
    for left, right in zip(toks, toks[1:], strict=False):
        if not any(map(str.isdigit, right)) or _QUANTITY.match(right):
            continue
        if (left.isalpha() and len(left) <= 4) or (
            left.isdigit() and len(left) == 2 and right[0].isalpha()
        ):
            joined = left + right
            if _is_code(joined):
                out.add(joined)
    return out


def _split_glued(toks: list[str]) -> list[str]:
    """Undo glued variant words ("note8" -> "note", "8") and dots inside codes ("p.1")."""
    out = []
    for tok in toks:
        glued = _VARIANT_DIGITS.match(tok)
        if glued:
            out += [glued.group(1), glued.group(2)]
        elif "." in tok and not _QUANTITY.match(tok) and not _NUMBER.match(tok):
            out.append(tok.replace(".", ""))
        else:
            out.append(tok)
    return out


# Per-token memo of `extract_attributes`, for throughput: a catalog repeats a few thousand
# distinct tokens across ~10^5-10^6 titles, so each token is split, classified and each
# adjacent pair joined once. The cached values are what the plain functions return.
_MEMO_LIMIT = 1 << 20
_SPLIT_MEMO: dict[str, tuple[str, ...]] = {}
_KIND_MEMO: dict[str, tuple[int, object]] = {}
_JOIN_MEMO: dict[tuple[str, str], str | None] = {}
_SKIP, _GENERATION, _QUANTITY_KIND, _CODE, _NUMBER_KIND, _MODEL, _VARIANT, _NONE = range(8)


_EMPTY: frozenset = frozenset()
_SET_MEMO: dict[frozenset, frozenset] = {}


def _shared(items: set, intern: bool = True) -> frozenset:
    """``frozenset(items)``, one shared object per distinct small set (an empty frozenset is
    216 bytes, and most titles repeat a few model, number and quantity sets): the memory of
    ~10^6 titles' attributes, not their values."""
    if not items:
        return _EMPTY
    out = frozenset(items)
    if not intern:
        return out
    if len(_SET_MEMO) > _MEMO_LIMIT:
        _SET_MEMO.clear()
    return _SET_MEMO.setdefault(out, out)


def _split_token(tok: str) -> tuple[str, ...]:
    """`_split_glued` of one token."""
    out = _SPLIT_MEMO.get(tok)
    if out is None:
        if len(_SPLIT_MEMO) > _MEMO_LIMIT:
            _SPLIT_MEMO.clear()
        out = _SPLIT_MEMO[tok] = tuple(_split_glued([tok]))
    return out


def quantity_of(quantity: re.Match[str]) -> tuple[str, float]:
    """(unit class, value in the class's unit) of a token `_QUANTITY` matched."""
    unit_class, factor = _UNIT_CLASS[quantity.group(2)]
    value = float(quantity.group(1)) * factor
    if unit_class in _ROUNDED_UNITS:
        value = float(int(value))
    return unit_class, round(value, 3)


def _classify(tok: str) -> tuple[int, object]:
    """What `extract_attributes` records for a token other than "mark" / "mk" (whose
    generation depends on the next token): (kind, value)."""
    quantity = _QUANTITY.match(tok)
    generation = _generation(tok, "")
    if tok in _NETWORK:
        return _SKIP, None
    if generation:
        return _GENERATION, generation
    if quantity:
        return _QUANTITY_KIND, quantity_of(quantity)
    if _is_code(tok):
        return _CODE, tok
    if _NUMBER.match(tok):
        return _NUMBER_KIND, tok
    if _ALNUM.match(tok):
        return _MODEL, tok
    if tok in VARIANT_WORDS:
        return _VARIANT, tok
    return _NONE, None


def _joined_pair(left: str, right: str) -> str | None:
    """The code `_joined_codes` forms from one adjacent pair, or None."""
    key = (left, right)
    if key in _JOIN_MEMO:
        return _JOIN_MEMO[key]
    if len(_JOIN_MEMO) > _MEMO_LIMIT:
        _JOIN_MEMO.clear()
    joined = _joined_codes([left, right])
    out = _JOIN_MEMO[key] = next(iter(joined)) if joined else None
    return out


def extract_attributes(title_norm: str) -> Attributes:
    """Attributes of one normalised title (see `Attributes`)."""
    toks: list[str] = []
    for tok in tokens(title_norm):
        parts = _SPLIT_MEMO.get(tok)
        toks += _split_token(tok) if parts is None else parts
    codes, models, numbers, quantities = set(), set(), set(), set()
    variants, generations = set(), set()
    sets = (None, generations, quantities, codes, numbers, models, variants, None)
    last = len(toks) - 1
    for i, tok in enumerate(toks):
        if tok == "mark" or tok == "mk":
            generation = _generation(tok, toks[i + 1] if i < last else "")
            if generation:
                generations.add(generation)
            continue
        kind = _KIND_MEMO.get(tok)
        if kind is None:
            if len(_KIND_MEMO) > _MEMO_LIMIT:
                _KIND_MEMO.clear()
            kind = _KIND_MEMO[tok] = _classify(tok)
        target = sets[kind[0]]
        if target is not None:
            target.add(kind[1])
    memo = _JOIN_MEMO
    joined = {
        memo[pair] if pair in memo else _joined_pair(*pair)
        for pair in zip(toks, toks[1:], strict=False)
    }
    joined.discard(None)
    words = frozenset(t for t in toks if t not in COLOUR_WORDS)
    return Attributes(
        codes=_shared(codes, intern=False),
        joined=_shared(joined - codes, intern=False),
        models=_shared(models),
        numbers=_shared(numbers),
        quantities=_shared(quantities),
        variants=_shared(variants),
        generations=_shared(generations),
        words=words,
    )
