"""The guided masked loss: a frozen encoder also masks the candidates it scores above the
positive, so a copy that the product ids miss is not pushed away."""

from __future__ import annotations

import pytest
import torch
from sentence_transformers import SentenceTransformer

from pairsieve.training import GuidedMaskedRankingLoss, MaskedMultipleNegativesRankingLoss
from pairsieve.training.guided import above_the_positive
from pairsieve.vectors.embed import bundled_model_path

SCALE = 20.0


def test_above_the_positive_marks_what_the_guide_ranks_over_the_positive():
    sims = torch.tensor([[0.9, 0.95, 0.2, 0.9], [0.1, 0.5, 0.6, 0.4]])
    above = above_the_positive(sims, torch.tensor([0, 1]))
    # a tie with the positive stays a negative; the positive itself is never masked
    assert above.tolist() == [[False, True, False, False], [False, False, True, False]]


@pytest.fixture(scope="module")
def model() -> SentenceTransformer:
    encoder = SentenceTransformer(bundled_model_path(), device="cpu")
    encoder.max_seq_length = 64
    return encoder


def _loss(loss, model, columns: list[list[str]], labels: list[list[int]]) -> float:
    features = [model.preprocess(texts) for texts in columns]
    with torch.no_grad():
        return loss(features, torch.tensor(labels)).item()


ANCHORS = ["bosch kgn34 fridge freezer", "samsung galaxy s9 64gb black"]
POSITIVES = ["Bosch KGN34NL30G Fridge Freezer", "Samsung Galaxy S9 64GB Midnight Black"]


def test_a_copy_with_another_product_id_is_masked_by_the_guide_alone(model):
    """Row 1's negative is a reworded copy of row 0's product, worded closer to row 0's query
    than its positive is, and labelled as another product: the product mask keeps it as a
    negative for row 0, the guide (scoring it above row 0's positive) leaves it out."""
    negatives = ["Samsung Galaxy S9 Dual SIM 64GB Black", "Bosch KGN34 fridge freezer"]
    labels = [[1, 10], [2, 20]]  # ids that miss the copy
    columns = [ANCHORS, POSITIVES, negatives]
    masked = _loss(MaskedMultipleNegativesRankingLoss(model, scale=SCALE), model, columns, labels)
    guided = _loss(GuidedMaskedRankingLoss(model, model, scale=SCALE), model, columns, labels)
    assert guided < masked


def test_with_nothing_above_any_positive_the_guided_loss_is_the_masked_loss(model):
    columns = [ANCHORS, POSITIVES, ["Miele washing machine W1", "Canon EOS 80D body"]]
    labels = [[1, 10], [2, 20]]
    masked = _loss(MaskedMultipleNegativesRankingLoss(model, scale=SCALE), model, columns, labels)
    guided = _loss(GuidedMaskedRankingLoss(model, model, scale=SCALE), model, columns, labels)
    assert guided == pytest.approx(masked, abs=1e-6)


def test_a_guide_with_another_tokenizer_is_refused(model):
    class Other:
        class tokenizer:  # noqa: N801 - stands in for a tokenizer attribute
            @staticmethod
            def get_vocab() -> dict[str, int]:
                return {"[CLS]": 0}

    with pytest.raises(ValueError, match="tokenizer"):
        GuidedMaskedRankingLoss(model, Other(), scale=SCALE)
