"""Audit a contrastive dataset built elsewhere for false negatives."""

from pairsieve.core.declaration import Stage

STAGE = Stage(
    "audit", upstream=(), sections=("ingest", "embed", "knn", "cluster", "shards", "report", "seed")
)
