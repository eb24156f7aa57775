"""Trainer side: product-disjoint batches and an InfoNCE loss that never counts a copy as negative.

Both read the shards' `label` column, the integer product ids `[positive, negative_1, ...]` that
sentence-transformers' collator hands to the loss instead of encoding. Use them together with
`SentenceTransformerTrainer`::

    args = SentenceTransformerTrainingArguments(..., batch_sampler=ProductDisjointBatchSampler)
    loss = MaskedMultipleNegativesRankingLoss(model, scale=20.0)

The sampler keeps copies out of a batch where it can (rows it cannot place are skipped for the
epoch and logged); the loss is the safety net for what still meets in a batch, including across
devices with `gather_across_devices`, where batches from different ranks are never planned together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from sentence_transformers.base.sampler import DefaultBatchSampler
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.util import all_gather, all_gather_with_grad, cos_sim, get_rank
from torch import Tensor

from pairsieve import schemas as S
from pairsieve.shards.batching import BatchPlan, plan_product_disjoint

log = logging.getLogger(__name__)


def masked_info_nce(
    logits: Tensor, anchor_products: Tensor, candidate_products: Tensor, positive_index: Tensor
) -> Tensor:
    """Per-anchor InfoNCE loss with every copy of the anchor's positive product left out.

    `logits` (b, n) float are scaled similarities of b anchors to n candidates; `anchor_products`
    (b,) int64 the product of each anchor's positive; `candidate_products` (n,) int64 the product
    of each candidate; `positive_index` (b,) int64 the column of each anchor's own positive. A
    candidate of the anchor's positive product other than the positive itself is a false negative
    (the same product from another seller, or a reworded title): its logit becomes -inf, so it
    leaves the softmax denominator instead of being pushed away. Returns (b,) float losses.
    """
    rows = torch.arange(logits.size(0), device=logits.device)
    copies = candidate_products.unsqueeze(0) == anchor_products.unsqueeze(1)  # (b, n) bool
    copies[rows, positive_index] = False
    masked = logits.masked_fill(copies, float("-inf"))
    return torch.logsumexp(masked, dim=1) - masked[rows, positive_index]


class MaskedMultipleNegativesRankingLoss(MultipleNegativesRankingLoss):
    """`MultipleNegativesRankingLoss` (InfoNCE, arXiv 1705.00652) that masks false negatives.

    Needs the `label` column of pairsieve shards: labels (b, 1 + k) int64 product ids of each
    row's positive and k negatives. Every in-batch candidate (other rows' positives and all hard
    negatives) whose product equals the anchor's positive product, other than the positive itself,
    gets a logit of -inf. With no shared products in a batch the loss equals the stock loss
    exactly. `scale` is 1 / temperature (20 = 0.05), as in the stock loss. Only the stock default
    direction (`query_to_doc`, joint partition, no hardness weighting) is implemented.
    With `gather_across_devices`, candidates and their product ids are gathered from all ranks.
    """

    def __init__(
        self,
        model: Any,
        scale: float = 20.0,
        similarity_fct: Callable[[Tensor, Tensor], Tensor] = cos_sim,
        gather_across_devices: bool = False,
    ) -> None:
        super().__init__(
            model,
            scale=scale,
            similarity_fct=similarity_fct,
            gather_across_devices=gather_across_devices,
        )

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor) -> Tensor:
        """Mean masked InfoNCE of local anchors against all (gathered) candidates.

        Raises:
            ValueError: labels missing or not (batch, number of candidate columns).
        """
        if len(embeddings) < 2:
            raise ValueError(f"Expected at least 2 embeddings, got {len(embeddings)}")
        queries, docs = embeddings[0], embeddings[1:]
        batch_size = queries.size(0)
        if labels is None or tuple(labels.shape) != (batch_size, len(docs)):
            shape = None if labels is None else tuple(labels.shape)
            raise ValueError(
                f"{type(self).__name__} needs a `label` column of {len(docs)} product ids per row "
                f"(positive, negative_1, ...) as pairsieve shards carry; got shape {shape}"
            )
        labels = labels.to(device=queries.device, dtype=torch.long)
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
        logits = self.similarity_fct(queries, candidates) * self.scale  # (b, ws * b * (1 + k))
        positive_index = torch.arange(offset, offset + batch_size, device=queries.device)
        return masked_info_nce(logits, labels[:, 0], candidate_products, positive_index).mean()


def _label_matrix(dataset: Any, label_column: str) -> np.ndarray:
    """(n, 1 + k) int64 product ids of a dataset's label column."""
    column = dataset.with_format("arrow")[label_column]
    values = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    flat = values.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    return flat.reshape(len(dataset), -1)


def _anchor_groups(dataset: Any, label_column: str) -> np.ndarray:
    """(n,) int64 id of each row's anchor text (first column), so one query never meets itself."""
    text_columns = [c for c in dataset.column_names if c != label_column]
    if not text_columns:
        return np.arange(len(dataset), dtype=np.int64)
    anchors = dataset.with_format("arrow")[text_columns[0]]
    if hasattr(anchors, "combine_chunks"):
        anchors = anchors.combine_chunks()
    return anchors.dictionary_encode().indices.to_numpy(zero_copy_only=False).astype(np.int64)


class ProductDisjointBatchSampler(DefaultBatchSampler):
    """Batches in which no product is both one row's positive and another row's candidate.

    Pass the class as `SentenceTransformerTrainingArguments(batch_sampler=...)`; the trainer builds
    it with the dataset, batch size and seed. Each epoch shuffles rows with (seed, epoch) and places
    them with `pairsieve.shards.batching.plan_product_disjoint` (also keeping one anchor text per
    batch).
    `__len__` is the number of batches the current epoch's plan yields, exactly, so every rank of a
    distributed run agrees and none hangs waiting for a batch another never sends. Rows a plan
    cannot place (a head product with more rows than there are batches) sit out that epoch.
    """

    def __init__(  # noqa: PLR0913 - the signature the trainer calls batch samplers with
        self,
        dataset: Any,
        batch_size: int,
        drop_last: bool,
        valid_label_columns: list[str] | None = None,
        generator: torch.Generator | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__(
            dataset,
            batch_size=batch_size,
            drop_last=drop_last,
            valid_label_columns=valid_label_columns,
            generator=generator,
            seed=seed,
        )
        columns = [c for c in (valid_label_columns or [S.LABEL]) if c in dataset.column_names]
        if not columns:
            raise ValueError(
                f"{type(self).__name__} needs a label column of product ids (one of "
                f"{valid_label_columns or [S.LABEL]}); the dataset has {dataset.column_names}"
            )
        labels = _label_matrix(dataset, columns[0])
        self._positive = labels[:, 0]
        self._negatives = labels[:, 1:]
        self._groups = _anchor_groups(dataset, columns[0])
        self._plans: dict[int, BatchPlan] = {}

    def plan(self, epoch: int | None = None) -> BatchPlan:
        """The (cached) placement for an epoch, the current one by default."""
        epoch = self.epoch if epoch is None else epoch
        if epoch not in self._plans:
            rng = np.random.default_rng([self.seed or 0, epoch])
            keys = rng.integers(0, np.iinfo(np.int64).max, len(self._positive), dtype=np.int64)
            plan = plan_product_disjoint(
                self._positive,
                self._negatives,
                self._groups,
                keys.astype(np.uint64),
                self.batch_size,
            )
            if len(plan.unplaced):
                log.warning(
                    "epoch %d: %d of %d rows fit no product-disjoint batch and sit out this epoch",
                    epoch,
                    len(plan.unplaced),
                    len(self._positive),
                )
            self._plans = {epoch: plan}
        return self._plans[epoch]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.plan().batches(self.drop_last):
            yield batch.tolist()

    def __len__(self) -> int:
        return len(self.plan().batches(self.drop_last))
