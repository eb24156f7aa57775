"""Column names and file names of every artifact: the data contracts in one place
(docs/contracts.md).

Stages refer to columns through these constants only, so a renamed column is one edit here and a
misspelt one is an AttributeError at import time rather than a silently empty column.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

# --- inputs --------------------------------------------------------------------------------------
QUERY = "query"
LISTING_ID = "listing_id"
TITLE = "title"
TS = "ts"
SESSION_ID = "session_id"
POSITION = "position"
CLICKS = "clicks"
WEIGHT = "weight"
DESCRIPTION = "description"
BRAND = "brand"
SELLER_ID = "seller_id"
PRICE = "price"
CATEGORY = "category"
# Ground-truth product of a labelled catalog (benchmarks, synth); for evaluation only.
TRUE_PRODUCT_ID = "true_product_id"
# Canonical name of a ground-truth product (PriceRunner cluster_label, synth); evaluation only.
TRUE_PRODUCT_NAME = "true_product_name"

CLICKS_REQUIRED = (QUERY, LISTING_ID)
CATALOG_REQUIRED = (LISTING_ID, TITLE)

# --- ingest outputs ------------------------------------------------------------------------------
QUERY_NORM = "query_norm"
QUERY_ID = "query_id"
CLICK_ROWS = "click_rows"  # raw click rows merged into one (query_norm, listing_id) row
TITLE_NORM = "title_norm"
SOURCE_FILE = "source_file"
ROW_NUMBER = "row_number"
REASON = "reason"
RAW = "raw"  # JSON of the raw row values in quarantine
TABLE = "table"  # which input a quarantined row came from: "clicks" or "catalog"

# --- cluster outputs -----------------------------------------------------------------------------
PRODUCT_ID = "product_id"
CLUSTER_SIZE = "cluster_size"
CANONICAL_TITLE = "canonical_title"
METHOD = "method"
LISTING_A = "listing_a"
LISTING_B = "listing_b"
JACCARD = "jaccard"
COSINE = "cosine"
SIGNAL = "signal"
ACCEPTED = "accepted"
VETO_REASON = "veto_reason"
LINK_SCORE = "link_score"  # pairs.parquet: the judge's score that average linkage sums
P_SAME = "p_same"  # pairs.parquet: calibrated probability that the two are one product
P_COPY = "p_copy"  # negatives_judgement.parquet: probability a negative is the positive's product

# --- mine outputs --------------------------------------------------------------------------------
POSITIVE_LISTING_ID = "positive_listing_id"
NEGATIVE_LISTING_ID = "negative_listing_id"
RANK = "rank"
SCORE = "score"
POSITIVE_SCORE = "positive_score"

# --- shard outputs -------------------------------------------------------------------------------
ANCHOR = "anchor"
POSITIVE = "positive"
LABEL = "label"
ROW_ID = "row_id"
POSITIVE_PRODUCT_ID = "positive_product_id"
NEGATIVE_LISTING_IDS = "negative_listing_ids"
NEGATIVE_PRODUCT_IDS = "negative_product_ids"
NEGATIVE_SCORES = "negative_scores"


def negative_column(i: int) -> str:
    """Name of the i-th (1-based) negative text column, as sentence-transformers writes it."""
    return f"negative_{i}"


# --- files ---------------------------------------------------------------------------------------
STAGE_JSON = "stage.json"
CLICKS_FILE = "clicks.parquet"
LISTINGS_FILE = "listings.parquet"
QUARANTINE_FILE = "quarantine.parquet"
PRODUCTS_FILE = "products.parquet"
PAIRS_FILE = "pairs.parquet"
AUDIT_PAIRS_FILE = "audit_pairs.parquet"
JUDGED_PAIRS_FILE = "negatives_judged.parquet"  # report/: negatives kept above the margin
ID_CHANGES_FILE = "id_changes.parquet"
CHANGE = "change"  # id_changes.parquet: new, merged, split or removed
NEGATIVES_FILE = "negatives.parquet"
NEGATIVES_DROPPED_FILE = "negatives_dropped.parquet"
# mine/: the kept negatives whose candidate the judgement decided, with their p_copy
NEGATIVES_JUDGEMENT_FILE = "negatives_judgement.parquet"
MANIFEST_FILE = "manifest.json"
TRAIN_PREFIX = "train"  # shard file name prefixes
EVAL_PREFIX = "eval"
META_PREFIX = "meta"
REPORT_HTML = "report.html"
CARD_FILE = "README.md"  # shards/: the dataset card
REPORT_JSON = "report.json"

STAGES = ("ingest", "cluster", "mine", "shards", "report")
