"""Repair a contrastive dataset built elsewhere: its unsafe negatives replaced, its layout kept."""

from pairsieve import schemas as S
from pairsieve.core.declaration import Stage

STAGE = Stage(
    "clean",
    upstream=(),
    sections=("ingest", "embed", "knn", "cluster", "mine", "shards", "report", "seed"),
    writes=(
        "dataset/*",
        "clean_negatives.parquet",
        "clean_rows_dropped.parquet",
        "before/*",
        "after/*",
        "mine/*",
        S.REPORT_JSON,
        S.REPORT_HTML,
    ),
)
