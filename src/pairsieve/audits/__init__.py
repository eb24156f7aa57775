"""Audit a contrastive dataset built elsewhere for false negatives."""

from pairsieve import schemas as S
from pairsieve.core.declaration import Stage

STAGE = Stage(
    "audit",
    upstream=(),
    sections=("ingest", "embed", "knn", "cluster", "shards", "report", "seed"),
    writes=(S.REPORT_JSON, S.REPORT_HTML, S.AUDIT_PAIRS_FILE),
)
