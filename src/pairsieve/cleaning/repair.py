"""One row's repair: each unsafe negative gives its place to the next safe hard negative.

Kept apart from reading, judging and mining so that the rule can be read and tested on its own:
a negative judged safe stays where it is; an unsafe one is replaced, in its own place, by the
best candidate of the row's pool (the build's mined negatives for the row's pair, in rank order)
that the row does not already hold; only when the pool runs out is it dropped. The place
matters: sentence-transformers' n-tuple columns are ordered by hardness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

KEPT, REPLACED, DROPPED = "kept", "replaced", "dropped"


@dataclass(frozen=True)
class Slot:
    """What became of one of a row's negatives: its action, the reason it was unsafe (None when
    kept) and the text that took its place (None unless replaced)."""

    action: str
    reason: str | None
    replacement: str | None


def repair_row(
    negatives: Sequence[str], reasons: Sequence[str | None], pool: Sequence[str]
) -> tuple[list[str], list[Slot]]:
    """The row's negatives after repair, in slot order, and what happened in each slot.

    Args:
        negatives: the row's negative texts as given.
        reasons: per negative, None when safe, else why not (`cleaning.verdicts`).
        pool: safe replacements for the row, best first.
    """
    held = {text for text, reason in zip(negatives, reasons, strict=True) if reason is None}
    fresh = iter(text for text in pool if text not in held)
    repaired, slots = [], []
    for text, reason in zip(negatives, reasons, strict=True):
        if reason is None:
            repaired.append(text)
            slots.append(Slot(KEPT, None, None))
            continue
        replacement = next(fresh, None)
        if replacement is None:
            slots.append(Slot(DROPPED, reason, None))
        else:
            repaired.append(replacement)
            slots.append(Slot(REPLACED, reason, replacement))
    return repaired, slots
