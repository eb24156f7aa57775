"""InfoNCE losses that never count a copy of the positive's product as a negative.

Four pieces, all reading the `label` column of pairsieve shards (the integer product ids
`[positive, negative_1, ...]` that sentence-transformers' collator hands to the loss):

* `masked_info_nce`, the per-anchor loss with same-product candidates left out of the softmax;
* `MaskedMultipleNegativesRankingLoss`, the stock loss with that mask;
* `MaskedCachedMultipleNegativesRankingLoss`, the same loss by gradient caching (GradCache,
  arXiv 2101.06983), so batches of 512 and more train in the memory of one mini-batch;
* `MaskedQueueRankingLoss`, the masked loss with earlier batches' documents as extra negatives
  (a memory queue), so a small batch sees many negatives without a large one's memory.

The losses take `learn_scale=True` to train the temperature instead of fixing it: at low τ one
false negative owns the gradient, so τ is a knob worth measuring rather than guessing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from sentence_transformers.base.losses.gradcache import CachedLossMixin
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.util import all_gather, all_gather_with_grad, cos_sim, get_rank
from torch import Tensor, nn

CLIP_TEMPERATURE = 0.07  # CLIP's initial τ (arXiv 2103.00020)
MAX_SCALE = 100.0  # CLIP's clamp on 1 / τ: below τ = 0.01 training becomes unstable


def masked_info_nce(
    logits: Tensor,
    anchor_products: Tensor,
    candidate_products: Tensor,
    positive_index: Tensor,
    also_out: Tensor | None = None,
) -> Tensor:
    """Per-anchor InfoNCE loss with every copy of the anchor's positive product left out.

    `logits` (b, n) float are scaled similarities of b anchors to n candidates; `anchor_products`
    (b,) int64 the product of each anchor's positive; `candidate_products` (n,) int64 the product
    of each candidate; `positive_index` (b,) int64 the column of each anchor's own positive. A
    candidate of the anchor's positive product other than the positive itself is a false negative
    (the same product from another seller, or a reworded title): its logit becomes -inf, so it
    leaves the softmax denominator instead of being pushed away. `also_out` (b, n) bool leaves
    out more candidates the same way (never the positive). Returns (b,) float losses.
    """
    rows = torch.arange(logits.size(0), device=logits.device)
    copies = candidate_products.unsqueeze(0) == anchor_products.unsqueeze(1)  # (b, n) bool
    if also_out is not None:
        copies |= also_out
    copies[rows, positive_index] = False
    masked = logits.masked_fill(copies, float("-inf"))
    return torch.logsumexp(masked, dim=1) - masked[rows, positive_index]


class LearnedScale(nn.Module):
    """1 / τ as a trained parameter, parametrised by its logarithm and clamped at `max_scale`.

    The log keeps the scale positive and makes its steps relative, as in CLIP; the clamp stops τ
    collapsing towards 0, where a single hard negative would decide every step.
    """

    def __init__(self, temperature: float = CLIP_TEMPERATURE, max_scale: float = MAX_SCALE) -> None:
        super().__init__()
        if not 0 < temperature:
            raise ValueError(f"the initial temperature must be positive, got {temperature}")
        self.log_scale = nn.Parameter(torch.tensor(math.log(1.0 / temperature)))
        self.max_scale = max_scale

    def forward(self) -> Tensor:
        return self.log_scale.exp().clamp(max=self.max_scale)


def product_labels(labels: Tensor | None, batch_size: int, columns: int, loss_name: str) -> Tensor:
    """The (batch, columns) int64 product ids of a batch, or a ValueError that says what is
    needed: the masked losses cannot tell copies apart without them."""
    if labels is None or tuple(labels.shape) != (batch_size, columns):
        shape = None if labels is None else tuple(labels.shape)
        raise ValueError(
            f"{loss_name} needs a `label` column of {columns} product ids per row "
            f"(positive, negative_1, ...) as pairsieve shards carry; got shape {shape}"
        )
    return labels.to(dtype=torch.long)


def split_batch(
    embeddings: list[Tensor], labels: Tensor | None, loss_name: str
) -> tuple[Tensor, list[Tensor], Tensor]:
    """(anchors, document columns, product ids on the anchors' device) of an embedded batch,
    or a ValueError naming what is missing."""
    if len(embeddings) < 2:
        raise ValueError(f"Expected at least 2 embeddings, got {len(embeddings)}")
    queries, docs = embeddings[0], embeddings[1:]
    labels = product_labels(labels, queries.size(0), len(docs), loss_name)
    return queries, docs, labels.to(device=queries.device)


class _ScaleMixin:
    """The scale of a masked loss: a fixed float, or a `LearnedScale` trained with the model."""

    scale: float  # the fixed 1 / τ, or the learned one's starting value
    learned_scale: LearnedScale | None

    def _init_scale(self, scale: float, learn_scale: bool) -> None:
        self.learned_scale = LearnedScale(1.0 / scale) if learn_scale else None

    def current_scale(self) -> Tensor | float:
        """1 / τ as the loss applies it now (a tensor with a gradient when learned)."""
        return self.scale if self.learned_scale is None else self.learned_scale()

    @property
    def temperature(self) -> float:
        """τ now, for logging: it moves during training when the scale is learned."""
        return 1.0 / float(torch.as_tensor(self.current_scale()).detach())


class MaskedMultipleNegativesRankingLoss(_ScaleMixin, MultipleNegativesRankingLoss):
    """`MultipleNegativesRankingLoss` (InfoNCE, arXiv 1705.00652) that masks false negatives.

    Needs the `label` column of pairsieve shards: labels (b, 1 + k) int64 product ids of each
    row's positive and k negatives. Every in-batch candidate (other rows' positives and all hard
    negatives) whose product equals the anchor's positive product, other than the positive itself,
    gets a logit of -inf. With no shared products in a batch the loss equals the stock loss
    exactly. `scale` is 1 / temperature (20 = 0.05), as in the stock loss; with `learn_scale` it
    is the starting value of a trained `LearnedScale` (`1 / CLIP_TEMPERATURE` is CLIP's).
    Only the stock default direction (`query_to_doc`, joint partition, no hardness weighting) is
    implemented. With `gather_across_devices`, candidates and their product ids are gathered from
    all ranks.
    """

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = cos_sim,
        gather_across_devices: bool = False,
        learn_scale: bool = False,
    ) -> None:
        super().__init__(
            model,
            scale=scale,
            similarity_fct=similarity_fct,
            gather_across_devices=gather_across_devices,
        )
        self._init_scale(scale, learn_scale)

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor) -> Tensor:
        """Mean masked InfoNCE of local anchors against all (gathered) candidates.

        Raises:
            ValueError: labels missing or not (batch, number of candidate columns).
        """
        queries, docs, labels = split_batch(embeddings, labels, type(self).__name__)
        batch_size = queries.size(0)
        offset = 0
        if self.gather_across_devices:
            docs = [all_gather_with_grad(doc) for doc in docs]
            all_labels = all_gather(labels)
            offset = get_rank() * batch_size
        else:
            all_labels = labels
        # Candidates are ordered column by column: all positives, then all negative_1, ...
        candidates = torch.cat(docs, dim=0)  # (ws * b * (1 + k), d)
        candidate_products = all_labels.T.reshape(-1)  # (ws * b * (1 + k),) same order
        logits = self.similarity_fct(queries, candidates) * self.current_scale()
        positive_index = torch.arange(offset, offset + batch_size, device=queries.device)
        return masked_info_nce(logits, labels[:, 0], candidate_products, positive_index).mean()

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "learn_scale": self.learned_scale is not None}


class MaskedCachedMultipleNegativesRankingLoss(_ScaleMixin, CachedLossMixin, nn.Module):
    """`MaskedMultipleNegativesRankingLoss` by gradient caching: large batches, small memory.

    The batch is embedded `mini_batch_size` texts at a time without a graph, the masked loss is
    computed (in chunks of `mini_batch_size` anchors) and back-propagated to the embeddings, and
    each mini-batch is embedded again with its graph to carry those gradients into the model
    (sentence-transformers' `CachedLossMixin` does the first and last step, replaying dropout).
    Only one mini-batch of activations is alive at once, so memory follows `mini_batch_size`,
    not the batch; loss and gradients equal the uncached masked loss's. The same `label` column,
    `scale` and `learn_scale` as the uncached loss; not for several devices.
    """

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = cos_sim,
        mini_batch_size: int = 32,
        learn_scale: bool = False,
    ) -> None:
        super().__init__()
        if mini_batch_size < 1:
            raise ValueError(f"mini_batch_size must be at least 1, got {mini_batch_size}")
        self.model = model
        self.scale = scale
        self.similarity_fct = similarity_fct
        self.mini_batch_size = mini_batch_size
        self._init_scale(scale, learn_scale)
        self._scale_grad: Tensor | None = None

    def calculate_loss(
        self, reps: list[list[Tensor]], labels: Tensor | None = None, *, with_backward: bool = False
    ) -> Tensor:
        """Mean masked InfoNCE over the batch, computed (and, with `with_backward`, back-propagated)
        `mini_batch_size` anchors at a time so no full score graph is ever held."""
        queries = torch.cat(reps[0])
        candidates = torch.cat([torch.cat(column) for column in reps[1:]])
        batch_size = queries.size(0)
        labels = product_labels(labels, batch_size, len(reps) - 1, type(self).__name__)
        labels = labels.to(device=queries.device)
        candidate_products = labels.T.reshape(-1)
        # A learned scale enters as a detached leaf: its gradient is collected here and handed to
        # the parameter in `forward`, so the outer backward pass scales it like the model's.
        scale = torch.as_tensor(self.current_scale(), dtype=queries.dtype).detach()
        scale.requires_grad_(with_backward and self.learned_scale is not None)
        total = []
        for begin in range(0, batch_size, self.mini_batch_size):
            rows = torch.arange(begin, min(begin + self.mini_batch_size, batch_size))
            logits = self.similarity_fct(queries[rows], candidates) * scale
            losses = masked_info_nce(logits, labels[rows, 0], candidate_products, rows)
            part = losses.sum() / batch_size
            if with_backward:
                part.backward()
                part = part.detach()
            total.append(part)
        self._scale_grad = scale.grad
        return torch.stack(total).sum()

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        loss = self.forward_cached(sentence_features, labels)
        if self.learned_scale is None or self._scale_grad is None:
            return loss
        # Same value as `loss`; its gradient reaches the scale as dL/dscale.
        pull = self.learned_scale() * self._scale_grad
        return loss + pull - pull.detach()

    def get_config_dict(self) -> dict[str, Any]:
        return {
            "scale": self.scale,
            "similarity_fct": getattr(self.similarity_fct, "__name__", str(self.similarity_fct)),
            "mini_batch_size": self.mini_batch_size,
            "learn_scale": self.learned_scale is not None,
        }


class MaskedQueueRankingLoss(MaskedMultipleNegativesRankingLoss):
    """`MaskedMultipleNegativesRankingLoss` that also scores each anchor against a queue of the
    documents (positives and negatives) of earlier batches, as in MoCo (arXiv 1911.05722) and
    cross-batch memory (arXiv 1912.06798).

    The queue holds the encoder's own embeddings, detached, with their product ids, and keeps the
    newest `queue_size`: no momentum encoder, since the encoder moves little between steps at
    fine-tuning learning rates, which is what makes a stale entry still a fair negative. A queued
    document of the anchor's positive product is masked like an in-batch copy: a queue spans
    many batches, so product-disjoint batches alone cannot keep copies out of it. The queue only
    grows in training (with gradients enabled), so evaluating the loss leaves it as it was.
    """

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = cos_sim,
        queue_size: int = 1024,
        learn_scale: bool = False,
    ) -> None:
        super().__init__(model, scale=scale, similarity_fct=similarity_fct, learn_scale=learn_scale)
        if queue_size < 1:
            raise ValueError(f"queue_size must be at least 1, got {queue_size}")
        self.queue_size = queue_size
        self.queued: Tensor | None = None  # (q, d) detached document embeddings, newest last
        self.queued_products: Tensor | None = None  # (q,) their product ids

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor) -> Tensor:
        """Mean masked InfoNCE of the anchors against the batch's documents and the queue.

        Raises:
            ValueError: labels missing or not (batch, number of candidate columns).
        """
        queries, docs, labels = split_batch(embeddings, labels, type(self).__name__)
        batch_size = queries.size(0)
        batch_docs = torch.cat(docs, dim=0)
        batch_products = labels.T.reshape(-1)
        candidates, candidate_products = batch_docs, batch_products
        if self.queued is not None:
            candidates = torch.cat([batch_docs, self.queued.to(batch_docs.device)])
            candidate_products = torch.cat([batch_products, self.queued_products])
        logits = self.similarity_fct(queries, candidates) * self.current_scale()
        positive_index = torch.arange(batch_size, device=queries.device)
        loss = masked_info_nce(logits, labels[:, 0], candidate_products, positive_index).mean()
        if torch.is_grad_enabled():
            self._enqueue(batch_docs.detach(), batch_products)
        return loss

    def _enqueue(self, docs: Tensor, products: Tensor) -> None:
        if self.queued is not None:
            docs = torch.cat([self.queued, docs])
            products = torch.cat([self.queued_products, products])
        self.queued, self.queued_products = docs[-self.queue_size :], products[-self.queue_size :]

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "queue_size": self.queue_size}
