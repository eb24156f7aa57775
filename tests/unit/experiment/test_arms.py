"""Which arms an experiment runs unless told, and the loss each arm trains with."""

from __future__ import annotations

import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.errors import PairsieveError
from pairsieve.experiment.arms import (
    ARMS,
    CLEANED,
    MINED_ARMS,
    ON_REQUEST,
    TrainingRows,
    default_arms,
    recipe,
    text_columns,
)
from pairsieve.experiment.data import RELEVANT, ExperimentData
from pairsieve.experiment.settings import Settings


@pytest.fixture(scope="module")
def bundled_encoder():
    """The bundled MiniLM as a SentenceTransformer, the model the arms' losses train."""
    from pairsieve.experiment.runner import load_model

    return load_model(Settings())


def test_default_arms_leave_out_the_arms_run_on_request_and_oracle_without_truth():
    assert "pairsieve-queue" in ON_REQUEST and "pairsieve-queue" in ARMS
    with_truth = default_arms(truth=True)
    assert with_truth == tuple(a for a in ARMS if a not in ON_REQUEST)
    assert "oracle" in with_truth and "pairsieve" in with_truth
    assert default_arms(truth=False) == tuple(a for a in with_truth if a != "oracle")


def _tiny_data() -> ExperimentData:
    titles = [f"acme widget {i}" for i in range(4)]
    train = pl.DataFrame({
        S.ANCHOR: ["widget one", "widget two"],
        S.POSITIVE: titles[:2],
        S.negative_column(1): titles[2:],
        S.LABEL: [[1, 3], [2, 4]],
        S.POSITIVE_LISTING_ID: ["l0", "l1"],
        S.NEGATIVE_LISTING_IDS: [["l2"], ["l3"]],
    })  # fmt: skip
    corpus = pl.DataFrame({S.LISTING_ID: ["l0", "l1", "l2", "l3"], RELEVANT: ["a", "b", "c", "d"]})
    return ExperimentData(corpus, train, pl.DataFrame(), "truth", truth_column="truth")


@pytest.mark.parametrize(
    ("arm", "plain", "cached"),
    [
        ("naive", "MultipleNegativesRankingLoss", "CachedMultipleNegativesRankingLoss"),
        ("shards-stock", "MultipleNegativesRankingLoss", "CachedMultipleNegativesRankingLoss"),
        ("st-best", "GISTEmbedLoss", "CachedGISTEmbedLoss"),
        (
            "pairsieve",
            "MaskedMultipleNegativesRankingLoss",
            "MaskedCachedMultipleNegativesRankingLoss",
        ),
        (
            "oracle",
            "MaskedMultipleNegativesRankingLoss",
            "MaskedCachedMultipleNegativesRankingLoss",
        ),
        (
            "cleaned",
            "MaskedMultipleNegativesRankingLoss",
            "MaskedCachedMultipleNegativesRankingLoss",
        ),
    ],
)
def test_a_mini_batch_trains_every_arm_with_the_cached_form_of_its_own_loss(
    bundled_encoder, arm, plain, cached
):
    data = _tiny_data()
    mined = {a: data.train.select(text_columns(1)) for a in MINED_ARMS}
    rows = TrainingRows(data, {**mined, CLEANED: data.train.select(*text_columns(1), S.LABEL)})
    as_is = recipe(arm, 0.05, bundled_encoder, bundled_encoder, rows, Settings())
    by_cache = recipe(
        arm, 0.05, bundled_encoder, bundled_encoder, rows, Settings(mini_batch_size=16)
    )
    assert type(as_is.loss).__name__ == plain
    assert type(by_cache.loss).__name__ == cached
    assert by_cache.loss.mini_batch_size == 16
    for loss in (as_is.loss, by_cache.loss):
        temperature = getattr(loss, "temperature", None) or 1 / loss.scale
        assert temperature == pytest.approx(0.05)
    assert by_cache.batch_sampler == as_is.batch_sampler


def test_the_queue_arm_refuses_a_mini_batch(bundled_encoder):
    data = _tiny_data()
    with pytest.raises(PairsieveError, match="mini-batch"):
        recipe(
            "pairsieve-queue", 0.05, bundled_encoder, bundled_encoder, TrainingRows(data, {}),
            Settings(mini_batch_size=16),
        )  # fmt: skip


def test_an_unset_setting_renames_no_kept_run():
    assert Settings().run_key("naive", 0.05, 0, "f") == Settings(mini_batch_size=None).run_key(
        "naive", 0.05, 0, "f"
    )
    assert Settings(mini_batch_size=8).run_key("naive", 0.05, 0, "f") != Settings().run_key(
        "naive", 0.05, 0, "f"
    )
