"""Stage 4: write product-disjoint, labelled training shards."""

from pairsieve import schemas as S
from pairsieve.core.declaration import Stage

STAGE = Stage(
    "shards",
    upstream=("ingest", "cluster", "mine"),
    sections=("shards", "mine", "seed"),
    writes=(
        f"{S.TRAIN_PREFIX}-*.parquet",
        f"{S.EVAL_PREFIX}-*.parquet",
        f"{S.META_PREFIX}-*.parquet",
        S.MANIFEST_FILE,
        S.CARD_FILE,
    ),
)
