"""Which arms an experiment runs unless told."""

from __future__ import annotations

from pairsieve.experiment.arms import ARMS, ON_REQUEST, default_arms


def test_default_arms_leave_out_the_arms_run_on_request_and_oracle_without_truth():
    assert "pairsieve-queue" in ON_REQUEST and "pairsieve-queue" in ARMS
    with_truth = default_arms(truth=True)
    assert with_truth == tuple(a for a in ARMS if a not in ON_REQUEST)
    assert "oracle" in with_truth and "pairsieve" in with_truth
    assert default_arms(truth=False) == tuple(a for a in with_truth if a != "oracle")
