"""The masked memory-queue loss: earlier batches' documents as negatives, their copies masked."""

from __future__ import annotations

import pytest
import torch

from pairsieve.training import MaskedMultipleNegativesRankingLoss, MaskedQueueRankingLoss

SCALE = 20.0


def batch(seed: int, products: list[list[int]]) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Random unit embeddings for anchors, positives and negatives, and their product labels."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.tensor(products)
    rows, columns = labels.shape
    embeddings = [
        torch.nn.functional.normalize(torch.randn(rows, 8, generator=generator), dim=1)
        for _ in range(1 + columns)
    ]
    return embeddings, labels


def test_first_batch_equals_the_masked_loss_and_later_batches_add_the_queue():
    loss = MaskedQueueRankingLoss(None, scale=SCALE, queue_size=100)
    plain = MaskedMultipleNegativesRankingLoss(None, scale=SCALE)
    first, first_labels = batch(0, [[1, 10], [2, 20], [3, 30]])
    second, second_labels = batch(1, [[4, 40], [1, 50], [6, 2]])

    value = loss.compute_loss_from_embeddings(first, first_labels).item()
    assert value == pytest.approx(plain.compute_loss_from_embeddings(first, first_labels).item())
    assert loss.queued.shape == (6, 8)
    assert loss.queued_products.tolist() == [1, 2, 3, 10, 20, 30]

    queued = torch.cat(first[1:])
    value = loss.compute_loss_from_embeddings(second, second_labels).item()
    anchors = second[0]
    docs = torch.cat([*second[1:], queued])
    products = torch.cat([second_labels.T.reshape(-1), torch.tensor([1, 2, 3, 10, 20, 30])])
    expected = []
    for i in range(anchors.size(0)):
        own = second_labels[i, 0].item()
        keep = [j for j, p in enumerate(products.tolist()) if j == i or p != own]
        logits = (anchors[i] @ docs[keep].T) * SCALE
        expected.append(torch.logsumexp(logits, 0) - (anchors[i] @ docs[i]) * SCALE)
    assert value == pytest.approx(torch.stack(expected).mean().item(), abs=1e-5)


def test_a_queued_copy_of_the_positive_is_masked():
    """The same second batch after a first batch that holds a copy of its positive's product,
    and after one that holds the same texts as another product: only the latter pushes it away."""
    first, _ = batch(0, [[1, 10], [2, 20]])
    second, second_labels = batch(1, [[1, 40], [5, 50]])
    first[1][0] = second[1][0]  # the first batch's positive is the same text as row 0's

    masking = MaskedQueueRankingLoss(None, scale=SCALE)
    masking.compute_loss_from_embeddings(first, torch.tensor([[1, 10], [2, 20]]))
    masked = masking.compute_loss_from_embeddings(second, second_labels).item()

    blind = MaskedQueueRankingLoss(None, scale=SCALE)
    blind.compute_loss_from_embeddings(first, torch.tensor([[99, 10], [2, 20]]))
    pushed = blind.compute_loss_from_embeddings(second, second_labels).item()
    assert pushed > masked


def test_the_queue_keeps_the_newest_entries_and_does_not_grow_without_gradients():
    loss = MaskedQueueRankingLoss(None, scale=SCALE, queue_size=5)
    for seed in range(3):
        embeddings, labels = batch(seed, [[seed * 10 + 1, seed * 10 + 2]] * 2)
        loss.compute_loss_from_embeddings(embeddings, labels)
    assert loss.queued.shape == (5, 8)
    assert loss.queued_products.tolist() == [12, 21, 21, 22, 22]
    before = loss.queued.clone()
    with torch.no_grad():
        loss.compute_loss_from_embeddings(*batch(7, [[70, 71]]))
    assert torch.equal(loss.queued, before)


def test_queue_size_must_be_positive():
    with pytest.raises(ValueError, match="queue_size"):
        MaskedQueueRankingLoss(None, queue_size=0)
