"""The cached masked loss against the uncached one, and the learned temperature, on real MiniLM."""

from __future__ import annotations

import math

import pytest
import torch

from pairsieve.training import (
    CLIP_TEMPERATURE,
    MAX_SCALE,
    LearnedScale,
    MaskedCachedMultipleNegativesRankingLoss,
    MaskedMultipleNegativesRankingLoss,
)
from tests.unit.training.test_masked import fresh_model, run_trainer

ANCHORS = ["iphone 8 64gb", "galaxy s21", "pixel 7 pro", "iphone 8 64 gb", "xperia 5", "iphone x"]
POSITIVES = [
    "Apple iPhone 8 64GB Space Grey",
    "Samsung Galaxy S21 5G 128GB",
    "Google Pixel 7 Pro 256GB Obsidian",
    "Apple iPhone 8 (64 GB) - Silver",
    "Sony Xperia 5 IV Black",
    "Apple iPhone X 256GB",
]
NEGATIVES = [
    "Apple iPhone 8 Plus 64GB",
    "Samsung Galaxy S21 Ultra",
    "Google Pixel 7 128GB",
    "Apple iPhone 8 64GB Gold",  # a copy of row 0's and row 3's product: masked for them
    "Sony Xperia 10 IV",
    "Apple iPhone XR 64GB",
]
# Rows 0 and 3 share product 1; row 3's negative is a copy of product 1 too.
LABELS = torch.tensor([[1, 10], [2, 20], [3, 30], [1, 1], [5, 50], [6, 60]])


def features(model):
    return [model.tokenize(texts) for texts in (ANCHORS, POSITIVES, NEGATIVES)]


def loss_and_grads(model, loss) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad()
    value = loss(features(model), LABELS)
    value.backward()
    grads = {n: p.grad.clone() for n, p in loss.named_parameters() if p.grad is not None}
    return value.item(), grads


@pytest.mark.parametrize("learn_scale", [False, True])
def test_cached_loss_and_gradients_equal_the_uncached_masked_loss(learn_scale):
    model = fresh_model()
    model.eval()  # no dropout: both passes see the same network
    plain = MaskedMultipleNegativesRankingLoss(model, scale=1 / 0.05, learn_scale=learn_scale)
    cached = MaskedCachedMultipleNegativesRankingLoss(
        model, scale=1 / 0.05, mini_batch_size=4, learn_scale=learn_scale
    )
    plain_value, plain_grads = loss_and_grads(model, plain)
    cached_value, cached_grads = loss_and_grads(model, cached)
    assert cached_value == pytest.approx(plain_value, abs=1e-5)
    assert set(cached_grads) == set(plain_grads)
    assert len(plain_grads) > 50  # the encoder's weights, and the scale when learned
    assert ("learned_scale.log_scale" in plain_grads) == learn_scale
    for name, grad in plain_grads.items():
        assert torch.allclose(cached_grads[name], grad, atol=1e-5, rtol=1e-4), name


def test_cached_loss_masks_copies():
    """A copy among the candidates changes the stock loss but not the masked one's target."""
    model = fresh_model()
    model.eval()
    cached = MaskedCachedMultipleNegativesRankingLoss(model, mini_batch_size=2)
    with torch.no_grad():
        masked = cached(features(model), LABELS).item()
        unmasked = cached(features(model), torch.arange(12).reshape(6, 2)).item()
    assert masked < unmasked  # the copies of product 1 left the denominators of rows 0 and 3


def test_cached_loss_needs_labels():
    model = fresh_model()
    cached = MaskedCachedMultipleNegativesRankingLoss(model)
    with pytest.raises(ValueError, match="needs a `label` column of 2 product ids"):
        cached(features(model), None)


def test_learned_scale_starts_at_clip_and_is_clamped():
    scale = LearnedScale()
    assert float(scale().detach()) == pytest.approx(1 / CLIP_TEMPERATURE)
    with torch.no_grad():
        scale.log_scale.fill_(math.log(10 * MAX_SCALE))
    assert float(scale().detach()) == MAX_SCALE
    with pytest.raises(ValueError, match="positive"):
        LearnedScale(0.0)


@pytest.mark.parametrize("cached", [False, True])
def test_learned_temperature_trains_with_the_stock_trainer(tmp_path, cached):
    """The trainer's optimizer finds the loss's scale: τ moves off CLIP's 0.07 in five steps."""
    from datasets import Dataset

    model = fresh_model()
    rows = {
        "anchor": ANCHORS * 2,
        "positive": POSITIVES * 2,
        "negative_1": NEGATIVES * 2,
        "label": torch.cat([LABELS, LABELS + 100]).tolist(),
    }
    if cached:
        loss = MaskedCachedMultipleNegativesRankingLoss(
            model, scale=1 / CLIP_TEMPERATURE, mini_batch_size=2, learn_scale=True
        )
    else:
        loss = MaskedMultipleNegativesRankingLoss(
            model, scale=1 / CLIP_TEMPERATURE, learn_scale=True
        )
    assert loss.temperature == pytest.approx(CLIP_TEMPERATURE)
    run_trainer(model, Dataset.from_dict(rows), loss, tmp_path, learning_rate=1e-2)
    assert abs(loss.temperature - CLIP_TEMPERATURE) > 1e-3
    assert 1 / MAX_SCALE <= loss.temperature
