"""Stage 3: mine hard negatives that exclude the positive's product and respect a margin."""

from pairsieve.core.declaration import Stage

STAGE = Stage("mine", upstream=("ingest", "cluster"), sections=("embed", "knn", "mine", "seed"))
