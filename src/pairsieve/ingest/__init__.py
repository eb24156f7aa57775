"""Stage 1: validate the click log and the catalog, quarantine bad rows with reasons."""

from pairsieve.core.declaration import Stage

STAGE = Stage("ingest", upstream=(), sections=("ingest",))
