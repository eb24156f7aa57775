"""The arms of an experiment: one base encoder, the same pairs and steps, different hygiene.

* `zero-shot`: the base encoder, untrained.
* `naive`: sentence-transformers' `mine_hard_negatives` without a margin, the stock
  `MultipleNegativesRankingLoss`, random batches: what a team runs without pairsieve.
* `st-best`: the strongest recipe sentence-transformers ships: its miner with
  `relative_margin=0.05`, `NoDuplicatesBatchSampler`, `GISTEmbedLoss` with the base encoder
  as guide (it drops in-batch candidates the guide scores above the positive).
* `cleaned`: the naive miner's rows after `pairsieve clean` (each negative that is the
  positive's product replaced by a safe one, product ids as labels), with
  `ProductDisjointBatchSampler` and the masked loss: a team that keeps its miner and adds
  pairsieve after it.
* `pairsieve`: the build's shards, `ProductDisjointBatchSampler`, the masked loss.
* `pairsieve-queue`: the same with a memory queue of earlier batches' documents as more
  negatives, copies of the positive's product masked there too (`MaskedQueueRankingLoss`):
  whether more negatives pay at a small batch. Run on request only: on a catalog whose copies
  the product ids miss, the queue brings more of them in, and it cost Altosight 0.023
  recall@10 (benchmarks/RESULTS.md).
* `pairsieve-guided`, `pairsieve-contrast`, `pairsieve-gist`: the same with GISTEmbedLoss's
  additions (`MaskedGISTEmbedLoss`): the base encoder as a guide that also masks any
  in-batch candidate it scores above the positive; the other anchors and positives as
  negatives (contrast); or both, st-best's loss with pairsieve's product mask. Each measures
  one part of the gap between st-best's loss and the masked loss. `pairsieve-contrast-guided`
  lets the guide rule on the contrast candidates alone, leaving the build's vetted negatives
  to the judgement. Run on request; a guided step costs about a third more.
* `shards-stock`: the build's shards with the stock loss and random batches: what the shards
  alone buy a team that changes nothing in its trainer, and what separates pairsieve's
  negatives from its batching and mask.
* `oracle`: the same rows with ground-truth product ids in the label column, so the sampler and
  the mask know every copy (the ceiling of what better product ids could win).

Every trained arm starts from the build's (anchor, positive) train pairs, so only the negatives,
the batches and the loss differ. A `learned` τ starts at CLIP's 0.07; `naive` learns it through
the masked loss with a label per cell (nothing masked: the stock loss with a trained scale),
and so does `shards-stock`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.errors import PairsieveError
from pairsieve.experiment.data import RELEVANT, ExperimentData
from pairsieve.experiment.settings import ARMS, Settings
from pairsieve.training import (
    CLIP_TEMPERATURE,
    MaskedCachedMultipleNegativesRankingLoss,
    MaskedGISTEmbedLoss,
    MaskedMultipleNegativesRankingLoss,
    MaskedQueueRankingLoss,
    ProductDisjointBatchSampler,
)

LEARNED = "learned"
# the masked loss with GISTEmbed's additions: arm -> (guided by the base encoder, contrast,
# the guide ruling on the contrast candidates alone)
GIST_PARTS = {
    "pairsieve-guided": (True, False, False),
    "pairsieve-contrast": (False, True, False),
    "pairsieve-gist": (True, True, False),
    "pairsieve-contrast-guided": (True, True, True),
}
UNCACHED = ("pairsieve-queue", *GIST_PARTS)  # no gradient-cached form
ON_REQUEST = UNCACHED  # not among the default arms
QUEUE_SIZE = 1024  # the documents of 8 earlier batches of 64 rows with one negative each
ST_BEST_RELATIVE_MARGIN = 0.05
MINED_ARMS = {"naive": None, "st-best": ST_BEST_RELATIVE_MARGIN}  # arm -> miner's margin
CLEANED = "cleaned"  # trains on the naive arm's rows after `pairsieve clean`


@dataclass(frozen=True)
class Recipe:
    """What the trainer gets for one arm: rows, loss and batch sampler."""

    dataset: Any  # datasets.Dataset
    loss: Any  # a sentence-transformers loss module
    batch_sampler: Any  # a BatchSamplers value or a sampler class


@dataclass(frozen=True)
class TrainingRows:
    """What the arms train on: the build's rows (`ExperimentData`) and, by arm, the rows of the
    sentence-transformers miner for the arms that use it (`MINED_ARMS`, and `cleaned`: the naive
    rows cleaned)."""

    data: ExperimentData
    mined: dict[str, pl.DataFrame]


def default_arms(truth: bool) -> tuple[str, ...]:
    """The arms an experiment runs unless told: all but those run on request, and `oracle` only
    with a truth column."""
    return tuple(a for a in ARMS if a not in ON_REQUEST and (truth or a != "oracle"))


def supports(arm: str, tau: float | str) -> bool:
    """Whether an arm can train at `tau`: GISTEmbedLoss takes no learned temperature."""
    return not (arm == "st-best" and tau == LEARNED)


def text_columns(k: int) -> list[str]:
    return [S.ANCHOR, S.POSITIVE, *(S.negative_column(i) for i in range(1, k + 1))]


def mine_with_sentence_transformers(
    data: ExperimentData, model: Any, k: int, relative_margin: float | None, cache: Path
) -> pl.DataFrame:
    """The train pairs with k negatives from sentence-transformers' own miner over the whole
    catalog; `cache` holds its embeddings, so a second margin does not embed again."""
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    pairs = data.train.select(S.ANCHOR, S.POSITIVE)
    cache.mkdir(parents=True, exist_ok=True)
    mined = mine_hard_negatives(
        Dataset.from_polars(pairs),
        model,
        corpus=data.corpus[S.TITLE].unique().sort().to_list(),
        num_negatives=k,
        relative_margin=relative_margin,
        output_format="n-tuple",
        batch_size=128,
        use_faiss=True,
        cache_folder=str(cache),
        verbose=False,
    )
    return mined.to_polars().select(text_columns(k))


def clean_mined(naive: pl.DataFrame, data: ExperimentData, cfg: Any, folder: Path) -> pl.DataFrame:
    """The naive miner's rows through `pairsieve clean` (resumable in ``folder``), with the
    corpus as its catalog and ``cfg`` as its config: the rows of the `cleaned` arm, `label`
    included."""
    from pairsieve.cleaning.stage import DATASET_DIR, Inputs
    from pairsieve.core import io
    from pairsieve.orchestration.steps import clean_step

    dataset, catalog = folder / "naive.parquet", folder / "catalog.parquet"
    io.write_parquet(naive, dataset)
    io.write_parquet(data.corpus.select(S.LISTING_ID, S.TITLE), catalog)
    clean_step(cfg, Inputs(dataset, catalog), folder / "clean")
    return pl.read_parquet(folder / "clean" / DATASET_DIR / dataset.name)


def _unique_labels(rows: int, columns: int) -> pl.Series:
    """A distinct label per cell: the masked loss then masks nothing."""
    return pl.Series(
        S.LABEL,
        [[r * columns + c for c in range(columns)] for r in range(rows)],
        dtype=pl.List(pl.Int64),
    )


def _masked(
    model: Any, tau: float | str, mini_batch_size: int | None, arm: str = "", guide: Any = None
) -> Any:
    """The masked loss of a masked arm at `tau`: by gradient caching when `mini_batch_size` is
    set; with a memory queue for `pairsieve-queue`; with GISTEmbed's parts for the arms of
    `GIST_PARTS` (``guide``: the base encoder)."""
    learned = tau == LEARNED
    scale = 1 / CLIP_TEMPERATURE if learned else 1 / float(tau)
    if arm in UNCACHED and mini_batch_size is not None:
        raise PairsieveError("bad_option", f"{arm} takes no --mini-batch-size")
    if arm in GIST_PARTS:
        guided, contrast, contrast_only = GIST_PARTS[arm]
        return MaskedGISTEmbedLoss(
            model, guide if guided else None, scale, learned, contrast, contrast_only
        )
    if arm == "pairsieve-queue":
        return MaskedQueueRankingLoss(
            model, scale=scale, queue_size=QUEUE_SIZE, learn_scale=learned
        )
    if mini_batch_size is not None:
        return MaskedCachedMultipleNegativesRankingLoss(
            model, scale=scale, mini_batch_size=mini_batch_size, learn_scale=learned
        )
    return MaskedMultipleNegativesRankingLoss(model, scale=scale, learn_scale=learned)


def _stock_loss(arm: str, model: Any, guide: Any, tau: float, mini_batch_size: int | None) -> Any:
    """sentence-transformers' own loss of a stock arm at a fixed `tau`: GISTEmbedLoss (guided by
    the base encoder) for st-best, MultipleNegativesRankingLoss for the others; their cached
    forms when `mini_batch_size` is set."""
    from sentence_transformers.sentence_transformer import losses

    if arm == "st-best":
        if mini_batch_size is None:
            return losses.GISTEmbedLoss(model, guide=guide, temperature=tau)
        return losses.CachedGISTEmbedLoss(
            model, guide=guide, temperature=tau, mini_batch_size=mini_batch_size
        )
    if mini_batch_size is None:
        return losses.MultipleNegativesRankingLoss(model, scale=1 / tau)
    return losses.CachedMultipleNegativesRankingLoss(
        model, scale=1 / tau, mini_batch_size=mini_batch_size
    )


def _shard_rows(data: ExperimentData, k: int, labels: pl.Series | None = None) -> pl.DataFrame:
    label = data.train[S.LABEL] if labels is None else labels
    return data.train.select(text_columns(k)).with_columns(label.list.head(1 + k).alias(S.LABEL))


def recipe(
    arm: str, tau: float | str, model: Any, guide: Any, rows: TrainingRows, settings: Settings
) -> Recipe:
    """The dataset, loss and batch sampler of a trained arm at temperature `tau` (``guide``: the
    frozen model that GISTEmbedLoss and `MaskedGISTEmbedLoss` consult), with the negatives per
    row and the gradient-caching mini-batch of `settings`. Each arm's loss is the cached form of
    itself when a mini-batch is set, so a large batch changes only the memory.

    Raises:
        PairsieveError: `oracle` without a truth column, or `st-best` with a learned τ
            (GISTEmbedLoss takes a fixed temperature).
    """
    from datasets import Dataset
    from sentence_transformers.base.sampler import BatchSamplers

    k, mini = settings.negatives, settings.mini_batch_size
    data, mined = rows.data, rows.mined
    if arm in ("naive", "shards-stock"):
        table = mined[arm] if arm == "naive" else data.train.select(text_columns(k))
        if tau == LEARNED:
            table = table.with_columns(_unique_labels(table.height, 1 + k))
            return Recipe(
                Dataset.from_polars(table), _masked(model, tau, mini), BatchSamplers.BATCH_SAMPLER
            )
        loss = _stock_loss(arm, model, guide, float(tau), mini)
        return Recipe(Dataset.from_polars(table), loss, BatchSamplers.BATCH_SAMPLER)
    if arm == "st-best":
        if tau == LEARNED:
            raise PairsieveError("bad_option", "st-best's GISTEmbedLoss takes no learned τ")
        loss = _stock_loss(arm, model, guide, float(tau), mini)
        return Recipe(Dataset.from_polars(mined[arm]), loss, BatchSamplers.NO_DUPLICATES)
    if arm == CLEANED:
        return Recipe(
            Dataset.from_polars(mined[arm]), _masked(model, tau, mini), ProductDisjointBatchSampler
        )
    if arm in ("pairsieve", "pairsieve-queue", *GIST_PARTS):
        loss = _masked(model, tau, mini, arm, guide)
        return Recipe(Dataset.from_polars(_shard_rows(data, k)), loss, ProductDisjointBatchSampler)
    if arm == "oracle":
        if data.truth_column is None:
            raise PairsieveError("bad_option", "the oracle arm needs --truth-column")
        table = _shard_rows(data, k, data.labels_by(data.corpus.select(S.LISTING_ID, RELEVANT)))
        return Recipe(
            Dataset.from_polars(table), _masked(model, tau, mini), ProductDisjointBatchSampler
        )
    raise PairsieveError("bad_option", f"unknown arm {arm!r}; arms are {', '.join(ARMS)}")
