"""Stage 2: cluster listings into product ids (candidates, pair judging, linkage)."""

from pairsieve import schemas as S
from pairsieve.core.declaration import Stage
from pairsieve.vectors.knn import CENTROIDS_FILE, LISTS_FILE

STAGE = Stage(
    "cluster",
    upstream=("ingest",),
    sections=("embed", "knn", "cluster", "seed"),
    writes=(S.PRODUCTS_FILE, S.PAIRS_FILE, S.ID_CHANGES_FILE, CENTROIDS_FILE, LISTS_FILE),
)
