"""The masked loss with a guide: a frozen encoder also leaves out the candidates it scores above
the anchor's positive.

Product ids mask the copies a build knows. A catalog whose ids miss some copies (a match list
that is incomplete, titles too unlike for the judgement) still puts them in a batch as
negatives. GISTEmbed (arXiv 2402.16829) removes those by a guide's scores: any candidate the
guide finds more similar to the anchor than its positive is a likely copy and is not pushed
away. `GuidedMaskedRankingLoss` applies both rules: the product mask of
`MaskedMultipleNegativesRankingLoss`, and the guide's. The guide encodes every batch once more
without gradients, so a step costs about a third more.
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


class GuidedMaskedRankingLoss(MaskedMultipleNegativesRankingLoss):
    """`MaskedMultipleNegativesRankingLoss` that also masks every candidate the frozen `guide`
    scores above the anchor's positive (GISTEmbed's rule, with no margin).

    With `contrast`, the other anchors and, for the anchor's positive, the other positives join
    the candidates, as in GISTEmbedLoss (its `contrast_anchors` and `contrast_positives`): a
    query is also pushed from other queries, and a title from other titles. Both rules mask
    them too: the same product, or scored by the guide above the anchor's positive.

    The guide must share the model's tokenizer (the base encoder of a fine-tune does), so the
    batch's tokens serve both. Needs the shards' `label` column as the masked loss does.
    """

    def __init__(
        self,
        model: Any,
        guide: Any,
        scale: float = 20.0,
        learn_scale: bool = False,
        contrast: bool = False,
    ) -> None:
        super().__init__(model, scale=scale, learn_scale=learn_scale)
        if model.tokenizer.get_vocab() != guide.tokenizer.get_vocab():
            raise ValueError("the guide must share the model's tokenizer")
        self.guide = guide
        self.contrast = contrast

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor) -> Tensor:
        features = list(sentence_features)
        guide_features = [dict(feature) for feature in features]  # the guide writes into them
        embeddings = embed_columns(self.model, features)
        with torch.no_grad():
            guided = embed_columns(self.guide, guide_features)
        queries, docs, labels = split_batch(embeddings, labels, type(self).__name__)
        logits = [self.similarity_fct(queries, torch.cat(docs, dim=0))]
        guide_sims = [cos_sim(guided[0], torch.cat(guided[1:], dim=0))]
        products = [labels.T.reshape(-1)]  # candidates column by column: positives, negative_1..
        if self.contrast:  # row i also against the anchors, and its positive against positives
            logits += [self.similarity_fct(queries, queries), self.similarity_fct(docs[0], docs[0])]
            guide_sims += [cos_sim(guided[0], guided[0]), cos_sim(guided[1], guided[1])]
            products += [labels[:, 0], labels[:, 0]]  # an anchor's product is its positive's
        positive_index = torch.arange(queries.size(0), device=queries.device)
        also_out = above_the_positive(torch.cat(guide_sims, dim=1), positive_index)
        return masked_info_nce(
            torch.cat(logits, dim=1) * self.current_scale(),
            labels[:, 0],
            torch.cat(products),
            positive_index,
            also_out,
        ).mean()

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "contrast": self.contrast}
