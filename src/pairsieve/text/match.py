"""Whether two titles can name one product, from their extracted attributes (`text.Attributes`).

Model codes are compared up to the region prefixes and suffixes sellers add ("ue55nu8000" and
"ue55nu8000txxu" are one TV), conflicting quantities, generations, model tokens, variant words and
numbers veto a pair with a named reason, and word Jaccard scores what is left. `code_keys` gives
the blocking keys under which compatible codes meet as candidates.
"""

from __future__ import annotations

from typing import NamedTuple

from pairsieve.text.attributes import Attributes


class Codes(NamedTuple):
    """A title's model codes, all `compare_codes` reads of it (an `Attributes` has the same two
    fields): what judging ships to its workers for each distinct set of codes."""

    codes: frozenset[str]
    joined: frozenset[str]


def code_core(code: str) -> str:
    """The stretch from a code's first to its last digit: "ue55nu8000txxu" -> "55nu8000".

    Sellers add or drop region prefixes and suffixes ("ue55nu8000", "ue55nu8000txxu",
    "55nu8000" are one TV), so candidate blocking keys on this core.
    """
    first = next(i for i, ch in enumerate(code) if ch.isdigit())
    last = max(i for i, ch in enumerate(code) if ch.isdigit())
    return code[first : last + 1]


def codes_compatible(a: str, b: str) -> bool:
    """Same model code up to region prefixes and suffixes: equal, or the shorter (>= 5 chars)
    contained in the longer ("55nu8000" in "ue55nu8000txxu"). A strict equality veto removes
    8,401 true PriceRunner pairs (benchmarks/RESULTS.md, "cluster")."""
    if a == b:
        return True
    short, long = (a, b) if len(a) <= len(b) else (b, a)
    return len(short) >= 5 and short in long


def code_keys(code: str) -> set[str]:
    """Blocking keys of a code, so compatible codes share one: the code itself, its digit core
    and every 6-char stretch holding a digit ("nu8000" keys "ue75nu8000" and "ue75nu8000txxu").
    Stretches shared by many titles form oversized blocks, which the caller skips."""
    keys = {code}
    digits = [i for i, ch in enumerate(code) if ch.isdigit()]
    if not digits:
        return keys
    # The stretch starting at i holds a digit d when d - 5 <= i <= d: every start from
    # first digit - 5 to the last digit, less those inside a run of >= 6 non-digits.
    starts = range(max(0, digits[0] - 5), min(digits[-1], len(code) - 6) + 1)
    gaps = [(p + 1, q - 6) for p, q in zip(digits, digits[1:], strict=False) if q - p > 6]
    if gaps:
        starts = [i for i in starts if not any(lo <= i <= hi for lo, hi in gaps)]
    keys.update([code[i : i + 6] for i in starts])
    core = code[digits[0] : digits[-1] + 1]  # `code_core`
    if len(core) >= 4:
        keys.add(core)
    return keys


def compare_codes(a: Attributes | Codes, b: Attributes | Codes) -> tuple[bool, bool]:
    """(shared, conflicting) model codes of two titles.

    Shared: some pair of codes (space-joined ones included) is compatible (`codes_compatible`).
    Conflicting: each title has a code the other cannot match, such as two codes of one family
    ("ue55nu8000" vs "ue65nu8000") or "i7 2600k" vs "i7 3770" sharing only a socket number. A
    conflict cancels a shared code: one common accessory or seller code ("wc01") must not
    merge two TVs. Space-joined codes ("sony rx100" -> "sonyrx100") may match but never
    conflict, as most joins are not codes.
    """
    if not (a.codes or a.joined) or not (b.codes or b.joined):
        return False, False
    matched_a, matched_b, shared = set(), set(), False
    for x in a.codes | a.joined:
        for y in b.codes | b.joined:
            if x in y or y in x:  # a short contained code ("1486" in "gp1486") is no conflict
                matched_a.add(x)
                matched_b.add(y)
                shared = shared or codes_compatible(x, y)
    conflicting = bool(a.codes - matched_a) and bool(b.codes - matched_b)
    conflicting = conflicting or _near_miss(a.codes, b.codes)
    return shared and not conflicting, conflicting


def _grams(code: str, n: int = 5) -> set[str]:
    return {code[i : i + n] for i in range(len(code) - n + 1)}


def _near_miss(codes_a: frozenset[str], codes_b: frozenset[str]) -> bool:
    """Two codes of one family that differ: sharing a 5-char stretch with a digit, neither
    containing the other ("32lv541h" vs "49lv541h", "ue55nu8000" vs "ue65nu8000")."""
    for x in codes_a:
        for y in codes_b:
            if x in y or y in x:
                continue
            if any(any(map(str.isdigit, g)) for g in _grams(x) & _grams(y)):
                return True
    return False


def quantity_conflict(a: Attributes, b: Attributes) -> str | None:
    """The first unit class both titles state with no value in common ("bytes": 64 vs 256)."""
    by_unit_a: dict[str, set[float]] = {}
    for unit, value in a.quantities:
        by_unit_a.setdefault(unit, set()).add(value)
    by_unit_b: dict[str, set[float]] = {}
    for unit, value in b.quantities:
        by_unit_b.setdefault(unit, set()).add(value)
    for unit in sorted(by_unit_a.keys() & by_unit_b.keys()):
        if by_unit_a[unit].isdisjoint(by_unit_b[unit]):
            return f"{unit}_conflict"
    return None


def conflict(a: Attributes, b: Attributes) -> str | None:
    """Why two titles cannot be one product, or None: the veto reason recorded per pair."""
    return assess(a, b)[0]


def assess(a: Attributes, b: Attributes) -> tuple[str | None, bool]:
    """(veto reason or None, shared model code) of two titles, comparing codes once.

    A shared model code outranks the weaker digit-less cues (marketing words such as "ultra"
    appear in one seller's title and not another's), but never a conflicting quantity or
    generation marker.
    """
    shared_code, code_conflict = compare_codes(a, b)
    if code_conflict:
        return "model_code_conflict", False
    reason = quantity_conflict(a, b)
    if reason is None and a.generations != b.generations:
        reason = "generation_conflict"
    if reason is not None or shared_code:
        return reason, shared_code
    if a.models and b.models and a.models.isdisjoint(b.models):
        reason = "model_token_conflict"
    elif a.variants != b.variants:
        reason = "variant_conflict"
    elif a.numbers and b.numbers and a.numbers.isdisjoint(b.numbers):
        reason = "number_conflict"
    return reason, False


def jaccard(a: Attributes, b: Attributes) -> float:
    """Jaccard similarity of the two titles' word sets (colour words excluded)."""
    if not a.words and not b.words:
        return 1.0
    return len(a.words & b.words) / len(a.words | b.words)
