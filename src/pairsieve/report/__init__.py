"""Stage 5: what duplicates cost and what was removed, as JSON and HTML."""

from pairsieve import schemas as S
from pairsieve.core.declaration import Stage

STAGE = Stage(
    "report",
    upstream=("ingest", "cluster", "mine", "shards"),
    sections=("report", "seed"),
    writes=(S.REPORT_JSON, S.REPORT_HTML, S.JUDGED_PAIRS_FILE),
)
