"""Trainer side: product-disjoint batches and InfoNCE losses that never count a copy as negative.

All read the shards' `label` column, the integer product ids `[positive, negative_1, ...]` that
sentence-transformers' collator hands to the loss instead of encoding. Use them together with
`SentenceTransformerTrainer`::

    args = SentenceTransformerTrainingArguments(..., batch_sampler=ProductDisjointBatchSampler)
    loss = MaskedMultipleNegativesRankingLoss(model, scale=20.0)

`MaskedCachedMultipleNegativesRankingLoss` is the same loss for batches too large to hold in
memory, `MaskedQueueRankingLoss` adds earlier batches' documents as negatives,
`MaskedGISTEmbedLoss` adds GISTEmbed's guide and contrast (each optional), and
`learn_scale=True` on any of them trains the temperature (`LearnedScale`).
"""

from pairsieve.training.gist import MaskedGISTEmbedLoss
from pairsieve.training.losses import (
    CLIP_TEMPERATURE,
    MAX_SCALE,
    LearnedScale,
    MaskedCachedMultipleNegativesRankingLoss,
    MaskedMultipleNegativesRankingLoss,
    MaskedQueueRankingLoss,
    masked_info_nce,
)
from pairsieve.training.sampler import ProductDisjointBatchSampler

__all__ = [
    "CLIP_TEMPERATURE",
    "MAX_SCALE",
    "LearnedScale",
    "MaskedCachedMultipleNegativesRankingLoss",
    "MaskedGISTEmbedLoss",
    "MaskedMultipleNegativesRankingLoss",
    "MaskedQueueRankingLoss",
    "ProductDisjointBatchSampler",
    "masked_info_nce",
]
