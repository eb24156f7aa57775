"""GISTEmbed's loss with the product mask: a frozen guide also masks the candidates it scores
above the positive (a copy the product ids miss is not pushed away), and contrast adds the other
anchors and positives as candidates under both masks."""

from __future__ import annotations

import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.util import cos_sim

from pairsieve.training import MaskedGISTEmbedLoss, MaskedMultipleNegativesRankingLoss
from pairsieve.training.gist import above_the_positive
from pairsieve.vectors.embed import bundled_model_path

SCALE = 20.0
WARM = 2.0  # τ 0.5


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
    guided = _loss(MaskedGISTEmbedLoss(model, model, SCALE, contrast=False), model, columns, labels)
    assert guided < masked


def test_with_nothing_above_any_positive_the_guided_loss_is_the_masked_loss(model):
    columns = [ANCHORS, POSITIVES, ["Miele washing machine W1", "Canon EOS 80D body"]]
    labels = [[1, 10], [2, 20]]
    masked = _loss(MaskedMultipleNegativesRankingLoss(model, scale=SCALE), model, columns, labels)
    guided = _loss(MaskedGISTEmbedLoss(model, model, SCALE, contrast=False), model, columns, labels)
    assert guided == pytest.approx(masked, abs=1e-6)


def test_a_guide_with_another_tokenizer_is_refused(model):
    class Other:
        class tokenizer:  # noqa: N801 - stands in for a tokenizer attribute
            @staticmethod
            def get_vocab() -> dict[str, int]:
                return {"[CLS]": 0}

    with pytest.raises(ValueError, match="tokenizer"):
        MaskedGISTEmbedLoss(model, Other(), scale=SCALE)


def test_guiding_the_contrast_alone_needs_a_guide_and_contrast(model):
    with pytest.raises(ValueError, match="contrast"):
        MaskedGISTEmbedLoss(model, None, SCALE, guide_contrast_only=True)
    with pytest.raises(ValueError, match="contrast"):
        MaskedGISTEmbedLoss(model, model, SCALE, contrast=False, guide_contrast_only=True)


@pytest.mark.parametrize(
    "guided, contrast_only",
    [(True, False), (False, False), (True, True)],
    ids=["guide", "no-guide", "guide-on-contrast-only"],
)
def test_contrast_adds_the_other_anchors_and_positives_under_the_masks(
    model, guided, contrast_only
):
    """With `contrast`, row i's softmax also holds the other anchors (against its anchor) and
    the other positives (against its positive); the product mask, and the guide's rule when
    guided, mask them as they mask the documents. A guide on the contrast candidates alone
    leaves every document to the product mask. Checked against the loss written out by hand,
    at a high temperature so that every candidate left in weighs on the loss."""
    columns = [
        [*ANCHORS, "canon eos 80d"],
        [*POSITIVES, "Canon EOS 80D Body"],
        # row 0's negative words its query exactly: the guide scores it above row 0's positive
        ["bosch kgn34 fridge freezer", "Bosch KGN34 fridge freezer", "Canon EOS 80D 18-55 kit"],
    ]
    labels = [[1, 10], [2, 1], [3, 30]]  # row 1's negative is row 0's product: masked for row 0
    guide = model if guided else None
    loss = MaskedGISTEmbedLoss(model, guide, WARM, contrast=True, guide_contrast_only=contrast_only)
    found = _loss(loss, model, columns, labels)

    with torch.no_grad():
        q, p, n = (model.encode(texts, convert_to_tensor=True) for texts in columns)
    products = torch.tensor([1, 2, 3, 10, 1, 30, 1, 2, 3, 1, 2, 3])
    expected = []
    for i in range(3):
        sims = torch.cat([cos_sim(q[i : i + 1], torch.cat([p, n])), cos_sim(q[i : i + 1], q),
                          cos_sim(p[i : i + 1], p)], dim=1)[0]  # fmt: skip
        out = products == labels[i][0]
        if guided:  # the guide is the model itself: its similarities are these
            above = sims > sims[i]
            if contrast_only:
                above[:6] = False  # the six documents: three positives, three negatives
            out |= above
        out[i] = False
        logits = (sims * WARM).masked_fill(out, float("-inf"))
        expected.append(torch.logsumexp(logits, 0) - logits[i])
    assert found == pytest.approx(torch.stack(expected).mean().item(), abs=1e-4)
    if contrast_only:
        everywhere = _loss(MaskedGISTEmbedLoss(model, guide, WARM), model, columns, labels)
        assert found > everywhere  # the documents the guide would have masked stay in
        return
    plain = _loss(MaskedGISTEmbedLoss(model, guide, WARM, contrast=False), model, columns, labels)
    assert found > plain  # other anchors and positives of other products are more negatives
