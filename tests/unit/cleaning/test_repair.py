"""The repair rule alone: safe negatives stay in place, unsafe ones take the pool's best."""

from __future__ import annotations

from pairsieve.cleaning.repair import DROPPED, KEPT, REPLACED, Slot, repair_row


def test_an_unsafe_negative_takes_the_best_pool_text_in_its_own_place():
    repaired, slots = repair_row(["copy", "other"], ["same_product", None], ["p1", "p2"])
    assert repaired == ["p1", "other"]
    assert slots == [Slot(REPLACED, "same_product", "p1"), Slot(KEPT, None, None)]


def test_a_pool_text_the_row_already_holds_is_skipped_and_none_is_used_twice():
    repaired, _ = repair_row(["a", "b", "c"], ["margin", None, "judged_copy"], ["b", "x", "y"])
    assert repaired == ["x", "b", "y"]


def test_a_negative_is_dropped_only_when_the_pool_runs_out():
    repaired, slots = repair_row(["a", "b"], ["margin", "same_listing"], ["x"])
    assert repaired == ["x"]
    assert [s.action for s in slots] == [REPLACED, DROPPED]
    assert slots[1] == Slot(DROPPED, "same_listing", None)


def test_a_safe_row_is_left_as_it_is():
    assert repair_row(["a", "b"], [None, None], ["x"]) == (
        ["a", "b"],
        [Slot(KEPT, None, None), Slot(KEPT, None, None)],
    )
