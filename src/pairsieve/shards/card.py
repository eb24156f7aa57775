"""The shards folder's README.md: a dataset card, so a folder pushed to a dataset hub or opened
months later says what its columns are, why its row order matters and how to train on it.

The card is written from the manifest alone (no timestamps), so the same build writes the same
bytes.
"""

from __future__ import annotations

from typing import Any

from pairsieve import schemas as S

_CARD = """---
license: other  # set the licence of the click log and catalog this was built from
task_categories:
- sentence-similarity
size_categories:
- {size}
configs:
- config_name: default
  data_files:
{splits}
---

# Contrastive training pairs built by pairsieve

(query, clicked listing) pairs from product search, each with {k} mined hard negatives, written
by `pairsieve build` (pairsieve {version}, config hash `{config_hash}`, seed {seed}). Every
listing carries a **product id**: copies of one product (other sellers, reworded titles) share
it, so no negative of a row is a copy of its positive.

## Columns

| column | meaning |
|---|---|
| `{anchor}` | the search query |
| `{positive}` | the title of the listing clicked for it |
| {negatives} | titles of hard negatives: other products, scored below the margin |
| `{label}` | int64 product ids `[positive, negative_1, ...]`, for the masked loss |

`{meta}-*.parquet` files hold the same rows' lineage (query and listing ids, product
ids, scores); `manifest.json` lists every file with its sha256 (`pairsieve verify`).

## Row order: product-disjoint batches

Rows are ordered so that every block of {batch_size} consecutive rows holds no
product twice, counting the negatives: in-batch InfoNCE then never treats a copy of a positive
as a negative. Keep the order (no shuffle) at that batch size, or use
`pairsieve.training.ProductDisjointBatchSampler`, which plans such batches each epoch.

## Training

```python
from datasets import load_dataset
from pairsieve.training import MaskedMultipleNegativesRankingLoss, ProductDisjointBatchSampler

train = load_dataset("parquet", data_files="{train}-*.parquet", split="train")
loss = MaskedMultipleNegativesRankingLoss(model, scale=20.0)  # scale = 1 / temperature
```

The masked loss removes same-product candidates from each row's softmax using `{label}`.

## Figures

| | |
|---|---|
| training rows | {train_rows} |
| held-out rows (product-disjoint from training) | {eval_rows} |
| clicked pairs in | {pairs} |
| pairs not written, by reason | {dropped} |
"""


def size_category(rows: int) -> str:
    """The dataset-card size bucket of ``rows`` (n<1K, 1K<n<10K, ... 1B<n<10B)."""
    bounds = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")]
    bounds += [(1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M")]
    bounds += [(1_000_000_000, "100M<n<1B")]
    return next((label for bound, label in bounds if rows < bound), "1B<n<10B")


def dataset_card(manifest: dict[str, Any], figures: dict[str, Any]) -> str:
    """Markdown with a YAML header for the shards described by ``manifest``; ``figures`` are the
    shards stage's counts (pairs in, rows dropped per reason)."""
    rows = manifest["rows"]
    k = manifest["num_negatives"]
    negatives = ", ".join(f"`{S.negative_column(i + 1)}`" for i in range(k)) or "none"
    splits = "\n".join(
        f'  - split: {split}\n    path: "{prefix}-*.parquet"'
        for split, prefix in (("train", S.TRAIN_PREFIX), ("eval", S.EVAL_PREFIX))
        if split in rows
    )
    dropped = ", ".join(f"{k}={v}" for k, v in sorted(figures.get("dropped", {}).items()) if v)
    return _CARD.format(
        size=size_category(sum(rows.values())),
        splits=splits,
        k=k,
        version=manifest["pairsieve_version"],
        config_hash=manifest["config_hash"][:16],
        seed=manifest["seed"],
        anchor=S.ANCHOR,
        positive=S.POSITIVE,
        negatives=negatives,
        label=S.LABEL,
        meta=S.META_PREFIX,
        batch_size=manifest["batch_size"],
        train=S.TRAIN_PREFIX,
        train_rows=rows.get("train", 0),
        eval_rows=rows.get("eval", 0),
        pairs=figures.get("pairs", ""),
        dropped=dropped or "none",
    )
