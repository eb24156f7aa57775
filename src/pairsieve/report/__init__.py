"""Stage 5: what duplicates cost and what was removed, as JSON and HTML."""

from pairsieve.core.declaration import Stage

STAGE = Stage(
    "report", upstream=("ingest", "cluster", "mine", "shards"), sections=("report", "seed")
)
