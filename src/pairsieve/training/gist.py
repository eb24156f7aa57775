"""GISTEmbed's loss with the product mask: its two additions to InfoNCE, each on its own.

GISTEmbedLoss (arXiv 2402.16829), which sentence-transformers' strongest recipe trains with,
adds two things to InfoNCE:
* a guide: a frozen encoder whose scores leave out any in-batch candidate it finds more similar
  to the anchor than the anchor's positive (a likely copy the data does not name);
* contrast: the other anchors, and for the anchor's positive the other positives, join the
  candidates, so a query is also pushed from other queries and a title from other titles.

`MaskedGISTEmbedLoss` applies the product mask of `MaskedMultipleNegativesRankingLoss` to
every candidate, and either addition when asked, so each can be measured on pairsieve's shards.
The guide may also rule on the contrast candidates alone: the documents, mined negatives among
them, were vetted by the build's judgement, the other anchors and positives never were.
The guide encodes every batch once more without gradients: a step costs about a third more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from sentence_transformers.base.losses.merged_forward import embed_columns
from sentence_transformers.util import cos_sim
from torch import Tensor

from pairsieve.training.losses import (
    MaskedMultipleNegativesRankingLoss,
    masked_info_nce,
    split_batch,
)


def above_the_positive(guide_sims: Tensor, positive_index: Tensor) -> Tensor:
    """(b, n) bool: the candidates whose guide similarity to the anchor exceeds the anchor's
    positive's (`guide_sims` (b, n), `positive_index` (b,)); never the positive itself."""
    rows = torch.arange(guide_sims.size(0), device=guide_sims.device)
    positive = guide_sims[rows, positive_index].unsqueeze(1)
    above = guide_sims > positive
    above[rows, positive_index] = False
    return above


class MaskedGISTEmbedLoss(MaskedMultipleNegativesRankingLoss):
    """`MaskedMultipleNegativesRankingLoss` with GISTEmbed's guide and contrast, each optional.

    With a `guide`, every candidate the frozen guide scores above the anchor's positive is
    masked (GISTEmbed's rule, no margin), or with `guide_contrast_only` only the contrast
    candidates it so scores; the guide must share the model's tokenizer (the base encoder of a
    fine-tune does), so the batch's tokens serve both. With `contrast`, the other anchors
    (against the anchor) and the other positives (against the anchor's positive) join the
    candidates, and both masks apply to them: an anchor's product is its positive's. Needs the
    shards' `label` column as the masked loss does.
    """

    def __init__(
        self,
        model: Any,
        guide: Any = None,
        scale: float = 20.0,
        learn_scale: bool = False,
        contrast: bool = True,
        guide_contrast_only: bool = False,
    ) -> None:
        super().__init__(model, scale=scale, learn_scale=learn_scale)
        if guide is not None and model.tokenizer.get_vocab() != guide.tokenizer.get_vocab():
            raise ValueError("the guide must share the model's tokenizer")
        if guide_contrast_only and not (contrast and guide is not None):
            raise ValueError("guiding the contrast candidates alone needs a guide and contrast")
        self.guide = guide
        self.contrast = contrast
        self.guide_contrast_only = guide_contrast_only

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        features = list(sentence_features)
        # copied before the model writes its outputs into them; the guide writes into its own
        guide_features = [dict(f) for f in features] if self.guide is not None else []
        embeddings = embed_columns(self.model, features)
        queries, docs, labels = split_batch(embeddings, labels, type(self).__name__)
        positive_index = torch.arange(queries.size(0), device=queries.device)
        logits = torch.cat(self._blocks(queries, docs), dim=1)
        products = [labels.T.reshape(-1)]  # candidates column by column: positives, negative_1..
        if self.contrast:
            products += [labels[:, 0], labels[:, 0]]  # an anchor's product is its positive's
        also_out = None
        if self.guide is not None:
            with torch.no_grad():
                guided = embed_columns(self.guide, guide_features)
            guide_sims = torch.cat(self._blocks(guided[0], guided[1:], cos_sim), dim=1)
            also_out = above_the_positive(guide_sims, positive_index)
            if self.guide_contrast_only:
                also_out[:, : queries.size(0) * len(docs)] = False  # the documents' columns
        return masked_info_nce(
            logits * self.current_scale(),
            labels[:, 0],
            torch.cat(products),
            positive_index,
            also_out,
        ).mean()

    def _blocks(self, queries: Tensor, docs: list[Tensor], similarity: Any = None) -> list[Tensor]:
        """Row i's similarities: its anchor to every document, and with `contrast` its anchor to
        every anchor and its positive to every positive."""
        similarity = similarity or self.similarity_fct
        blocks = [similarity(queries, torch.cat(docs, dim=0))]
        if self.contrast:
            blocks += [similarity(queries, queries), similarity(docs[0], docs[0])]
        return blocks

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "guided": self.guide is not None,
                "contrast": self.contrast,
                "guide_contrast_only": self.guide_contrast_only}  # fmt: skip
