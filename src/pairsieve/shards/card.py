"""The shards folder's README.md: a dataset card, so a folder pushed to a dataset hub or opened
months later says what its columns are, why its row order matters and how to train on it.

The card is written from the manifest alone (no timestamps), so the same build writes the same
bytes.
"""

from __future__ import annotations

from typing import Any

from pairsieve import schemas as S

CARD_FILE = "README.md"


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
        f"  - split: {split}\n    path: \"{prefix}-*.parquet\""
        for split, prefix in (("train", S.TRAIN_PREFIX), ("eval", S.EVAL_PREFIX))
        if split in rows
    )
    dropped = ", ".join(f"{k}={v}" for k, v in sorted(figures.get("dropped", {}).items()) if v)
    return f"""---
license: other  # set the licence of the click log and catalog this was built from
task_categories:
- sentence-similarity
size_categories:
- {size_category(sum(rows.values()))}
configs:
- config_name: default
  data_files:
{splits}
---

# Contrastive training pairs built by pairsieve

(query, clicked listing) pairs from product search, each with {k} mined hard negatives, written
by `pairsieve build` (pairsieve {manifest["pairsieve_version"]}, config hash
`{manifest["config_hash"][:16]}`, seed {manifest["seed"]}). Every listing carries a **product
id**: copies of one product (other sellers, reworded titles) share it, so no negative of a row
is a copy of its positive.

## Columns

| column | meaning |
|---|---|
| `{S.ANCHOR}` | the search query |
| `{S.POSITIVE}` | the title of the listing clicked for it |
| {negatives} | titles of hard negatives: other products, scored below the margin |
| `{S.LABEL}` | int64 product ids `[positive, negative_1, ...]`, for the masked loss |

`{S.META_PREFIX}-*.parquet` files hold the same rows' lineage (query and listing ids, product
ids, scores); `manifest.json` lists every file with its sha256 (`pairsieve verify`).

## Row order: product-disjoint batches

Rows are ordered so that every block of {manifest["batch_size"]} consecutive rows holds no
product twice, counting the negatives: in-batch InfoNCE then never treats a copy of a positive
as a negative. Keep the order (no shuffle) at that batch size, or use
`pairsieve.training.ProductDisjointBatchSampler`, which plans such batches each epoch.

## Training

```python
from datasets import load_dataset
from pairsieve.training import MaskedMultipleNegativesRankingLoss, ProductDisjointBatchSampler

train = load_dataset("parquet", data_files="{S.TRAIN_PREFIX}-*.parquet", split="train")
loss = MaskedMultipleNegativesRankingLoss(model, scale=20.0)  # scale = 1 / temperature
```

The masked loss removes same-product candidates from each row's softmax using `{S.LABEL}`.

## Figures

| | |
|---|---|
| training rows | {rows.get("train", 0)} |
| held-out rows (product-disjoint from training) | {rows.get("eval", 0)} |
| clicked pairs in | {figures.get("pairs", "")} |
| pairs not written, by reason | {dropped or "none"} |
"""
