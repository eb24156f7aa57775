"""Stage 4: write product-disjoint, labelled training shards."""

from pairsieve.core.declaration import Stage

STAGE = Stage("shards", upstream=("ingest", "cluster", "mine"), sections=("shards", "mine", "seed"))
