"""Stage 1: validate the click log and the catalog, quarantine bad rows with reasons."""

from pairsieve import schemas as S
from pairsieve.core.declaration import Stage

STAGE = Stage(
    "ingest",
    upstream=(),
    sections=("ingest",),
    writes=(S.CLICKS_FILE, S.LISTINGS_FILE, S.QUARANTINE_FILE),
)
