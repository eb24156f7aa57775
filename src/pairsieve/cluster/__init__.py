"""Stage 2: cluster listings into product ids (candidates, pair judging, linkage)."""

from pairsieve.core.declaration import Stage

STAGE = Stage("cluster", upstream=("ingest",), sections=("embed", "knn", "cluster", "seed"))
