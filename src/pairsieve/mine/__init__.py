"""Stage 3: mine hard negatives that exclude the positive's product and respect a margin."""

from pairsieve import schemas as S
from pairsieve.core.declaration import Stage
from pairsieve.vectors.knn import CENTROIDS_FILE, LISTS_FILE

STAGE = Stage(
    "mine",
    upstream=("ingest", "cluster"),
    sections=("embed", "knn", "mine", "seed"),
    writes=(
        S.NEGATIVES_FILE,
        S.NEGATIVES_DROPPED_FILE,
        S.NEGATIVES_JUDGEMENT_FILE,
        CENTROIDS_FILE,
        LISTS_FILE,
    ),
)
