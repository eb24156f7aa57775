"""Product-disjoint batches for sentence-transformers' trainer, planned afresh each epoch.

The sampler keeps copies out of a batch where it can (rows it cannot place are skipped for the
epoch and logged); the masked losses are the safety net for what still meets in a batch,
including across devices, where batches from different ranks are never planned together.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from sentence_transformers.base.sampler import DefaultBatchSampler

from pairsieve import schemas as S
from pairsieve.shards.batching import BatchPlan, plan_product_disjoint

log = logging.getLogger(__name__)


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

    def __init__(
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
