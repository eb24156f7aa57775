"""`pairsieve audit`: how many false negatives does a contrastive dataset built elsewhere hold?

Reads a dataset as sentence-transformers' `mine_hard_negatives` writes it (`anchor`,
`positive`, `negative` or `negative_1` … `negative_k`; pairsieve's own train shards have the same
shape) or as FlagEmbedding writes it (JSONL `query`, `pos` list, `neg` list; one row per
positive). Every text it contains, plus the catalog when given, is clustered into products with
`pairsieve.cluster.stage`; a negative is a *false negative* when it is its row's positive
product (an exact copy of the positive text included). ``false_negative_rate`` is the mean
``p_same`` of the (positive, negative) pairs, each judged by the cluster stage, with an interval
from the calibration error; the share of negatives clustered into the positive's product stays
beside it. The report adds in-batch collisions per batch size (κ at text and product level, and
replayed in file order and a seeded shuffle) and, with the encoder's scores, what those false
negatives cost at each temperature.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.audits.dataset import read_dataset
from pairsieve.audits.pairs import (
    NEGATIVES,
    cluster_texts,
    distinct_pairs,
    negative_table,
    per_row,
)
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult
from pairsieve.core.hashing import hex_digest
from pairsieve.errors import PairsieveError
from pairsieve.ingest.catalog import read_catalog
from pairsieve.labels.estimate import share_from_labels
from pairsieve.labels.pairs import ROWS
from pairsieve.labels.store import answered
from pairsieve.pair_model.calibration import load_calibration, mean_with_interval
from pairsieve.report import sections as R
from pairsieve.report.duplicates import duplicates_section
from pairsieve.report.recommendations import recommendations_section
from pairsieve.report.stage import REPORT_SCHEMA_VERSION, padded, write_report
from pairsieve.report.temperature import temperature_section

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inputs:
    """What an audit reads: a training dataset built elsewhere and, optionally, the catalog its
    texts come from (clustered with them)."""

    dataset: Path
    catalog: Path | None = None
    labels: tuple[Path, ...] = ()  # label files (`pairsieve label sample`) with answers


EXAMPLES = 10  # false-negative examples shown in the report


def listings_for(data: pl.DataFrame, catalog: pl.DataFrame | None) -> pl.DataFrame:
    """One listing per distinct dataset text (id ``t`` + hash) plus the catalog's listings; a
    dataset text equal to a catalog title maps to that title's catalog listings instead."""
    texts = pl.concat([data[S.POSITIVE], data[NEGATIVES].explode()]).drop_nulls().unique().sort()
    own = pl.DataFrame({S.TITLE: texts}).with_columns(
        pl.col(S.TITLE).map_elements(lambda t: "t" + hex_digest(t), pl.String).alias(S.LISTING_ID)
    )
    if catalog is None:
        return own.select(S.LISTING_ID, S.TITLE)
    cat = catalog.with_columns(
        pl.col(S.LISTING_ID).cast(pl.String), pl.col(S.TITLE).cast(pl.String)
    )
    own = own.join(cat.select(S.TITLE), on=S.TITLE, how="anti")
    return pl.concat([cat, own.select(S.LISTING_ID, S.TITLE)], how="diagonal_relaxed")


def label_rows(data: pl.DataFrame, product_of: pl.DataFrame) -> pl.DataFrame:
    """Adds positive_product_id, negative_product_ids and per-negative false-negative flags."""
    lookup = dict(
        zip(product_of[S.TITLE].to_list(), product_of[S.PRODUCT_ID].to_list(), strict=True)
    )
    pos_products = [lookup[t] for t in data[S.POSITIVE].to_list()]
    neg_products = [[lookup[t] for t in negs] for negs in data[NEGATIVES].to_list()]
    flags = [[n == p for n in negs] for p, negs in zip(pos_products, neg_products, strict=True)]
    return data.with_columns(
        pl.Series(S.POSITIVE_PRODUCT_ID, pos_products, dtype=pl.String),
        pl.Series(S.NEGATIVE_PRODUCT_IDS, neg_products, dtype=pl.List(pl.String)),
        pl.Series("_false", flags, dtype=pl.List(pl.Boolean)),
    )


def row_scores(cfg: PairsieveConfig, data: pl.DataFrame, encoder: Any) -> pl.DataFrame:
    """Adds the encoder's cosine of each anchor with its positive and with each negative."""
    from pairsieve.vectors.embed import embed_texts, shared_cache

    texts = pl.concat([data[S.ANCHOR], data[S.POSITIVE], data[NEGATIVES].explode()]).unique()
    texts = texts.sort().to_list()
    vectors, _ = embed_texts(texts, encoder, shared_cache(cfg.cache_dir, encoder.model_key))
    index = {t: i for i, t in enumerate(texts)}
    anchors = vectors[[index[t] for t in data[S.ANCHOR].to_list()]]  # (rows, d) float32
    positives = vectors[[index[t] for t in data[S.POSITIVE].to_list()]]
    pos_scores = np.einsum("ij,ij->i", anchors, positives)
    neg_scores = [
        (vectors[[index[t] for t in negs]] @ anchor).tolist()
        for anchor, negs in zip(anchors, data[NEGATIVES].to_list(), strict=True)
    ]
    return data.with_columns(
        pl.Series(S.POSITIVE_SCORE, pos_scores, dtype=pl.Float64),
        pl.Series(S.NEGATIVE_SCORES, neg_scores, dtype=pl.List(pl.Float64)),
    )


def audit_figures(source: Path, labelled: pl.DataFrame) -> dict[str, Any]:
    """The dataset's false-negative rate (estimated from ``p_same`` when the rows carry it,
    else counted by clusters), the cluster count, exact copies and rows hit."""
    negatives = int(labelled[NEGATIVES].list.len().sum())
    false = int(labelled["_false"].list.sum().sum())
    pairs = labelled.select(S.POSITIVE, NEGATIVES).explode(NEGATIVES)
    exact = int((pairs[NEGATIVES] == pairs[S.POSITIVE]).sum())
    rows_hit = int((labelled["_false"].list.sum() > 0).sum())
    by_cluster = false / negatives if negatives else 0.0
    figures = {
        "dataset": str(source),
        "rows": labelled.height,
        "negatives": negatives,
        "false_negative_rate": by_cluster,
        "false_negatives": false,
        "false_negative_rate_by_cluster": by_cluster,
        "exact_copy_negatives": exact,
        "exact_copy_rate": exact / negatives if negatives else 0.0,
        "share_of_rows_with_false_negative": rows_hit / max(labelled.height, 1),
    }
    if S.P_SAME in labelled.columns:
        p = labelled[S.P_SAME].explode().to_numpy()
        error = load_calibration().error
        figures["false_negative_rate"], figures["false_negative_rate_ci"] = mean_with_interval(
            p, error
        )
        figures["expected_false_negatives"] = float(p.sum())
        figures["calibration_error"] = error
    return figures


def audit_section(source: Path, labelled: pl.DataFrame) -> dict[str, Any]:
    """The dataset's false-negative rate, exact copies apart, with examples."""
    figures = audit_figures(source, labelled)
    shares = {
        "exact copy of the positive text": figures["exact_copy_rate"],
        "same product (pairsieve clusters)": figures["false_negative_rate_by_cluster"],
    }
    if "false_negative_rate_ci" in figures:
        shares["same product (estimated)"] = figures["false_negative_rate"]
    columns = [S.ANCHOR, S.POSITIVE, NEGATIVES, "_false"]
    has_scores = S.NEGATIVE_SCORES in labelled.columns
    examples = (
        labelled.select(*columns, *([S.NEGATIVE_SCORES] if has_scores else []))
        .explode([NEGATIVES, "_false", *([S.NEGATIVE_SCORES] if has_scores else [])])
        .filter(pl.col("_false"))
        .drop("_false")
        .rename({NEGATIVES: "negative (same product)"})
    )
    if has_scores:
        examples = examples.sort(S.NEGATIVE_SCORES, descending=True).rename(
            {S.NEGATIVE_SCORES: "score"}
        )
    return R.section(
        "Audit: false negatives in the dataset",
        figures=figures,
        tables={"false negatives, highest scoring first": examples.head(EXAMPLES).to_dicts()},
        charts=[
            R.chart(
                "false-negative-rate",
                "Share of the dataset's negatives that are the positive",
                list(shares),
                {"share of negatives": list(shares.values())},
                y_label="share of negatives (%)",
                percent=True,
            )
        ],
        notes=[
            "The false-negative rate is estimated as the mean probability that a negative is "
            "its positive's product (p_same, calibrated on labelled catalogs); its interval "
            "adds the worst calibration error measured on a catalog held out of that fit. "
            "Beside it, the negatives pairsieve clusters into the positive's product, and the "
            "exact copies a text-equality check would also catch."
        ],
    )


def batches_from_rows(cfg: PairsieveConfig, labelled: pl.DataFrame) -> dict[str, Any]:
    """κ tables over the rows' positives, and collisions replayed in file order and shuffled."""
    products = (
        pl.concat([labelled[S.POSITIVE_PRODUCT_ID], labelled[S.NEGATIVE_PRODUCT_IDS].explode()])
        .unique()
        .sort()
        .to_list()
    )
    code = {p: i for i, p in enumerate(products)}
    positives = np.array([code[p] for p in labelled[S.POSITIVE_PRODUCT_ID].to_list()])
    neg_lists = labelled[S.NEGATIVE_PRODUCT_IDS].to_list()
    negatives = np.full((len(neg_lists), max(len(n) for n in neg_lists)), -1, dtype=np.int64)
    for i, negs in enumerate(neg_lists):
        negatives[i, : len(negs)] = [code[p] for p in negs]
    replay = {
        "positives": positives,
        "negatives": negatives,
        "batch_size": cfg.shards.batch_size,
        "orders": ["file order", "seeded shuffle"],
    }
    return R.batches_section(cfg, labelled[S.POSITIVE].to_numpy(), positives, replay)


def _split(scores: list[list[float]], flags: list[list[bool]], keep: bool) -> list[list[float]]:
    return [
        [s for s, f in zip(row, fl, strict=True) if f == keep]
        for row, fl in zip(scores, flags, strict=True)
    ]


def score_sections(cfg: PairsieveConfig, labelled: pl.DataFrame) -> tuple[dict, dict]:
    """Temperature and hard-negative sections from the encoder's scores."""
    flags = labelled["_false"].to_list()
    scores = labelled[S.NEGATIVE_SCORES].to_list()
    false, true = _split(scores, flags, True), _split(scores, flags, False)
    positive_scores = labelled[S.POSITIVE_SCORE].to_numpy()
    temperature = temperature_section(cfg, positive_scores, padded(false), padded(true))
    n_false = sum(len(x) for x in false)
    hard = R.hard_negatives_section(
        {"negatives": n_false + sum(len(x) for x in true), "false_negatives": n_false},
        {},
        {
            "positives": positive_scores,
            "true negatives": np.array([s for row in true for s in row]),
            "false negatives": np.array([s for row in false for s in row]),
        },
    )
    return temperature, hard


def catalog_listings(path: Path, cfg: PairsieveConfig) -> pl.DataFrame:
    """The catalog, read as a build reads it (`ingest.catalog.read_catalog`: same column renames,
    encoding and separator), one row per listing id with a title: it names the listings the
    dataset's texts come from.

    Raises:
        PairsieveError: ``missing_file``, ``unreadable_file`` or ``missing_column``.
    """
    frame = read_catalog(str(path), cfg.ingest)
    return frame.drop_nulls([S.LISTING_ID, S.TITLE]).unique(S.LISTING_ID, keep="first")


def quality_from_catalog(
    cfg: PairsieveConfig, catalog: pl.DataFrame | None, work_dir: Path
) -> dict[str, Any] | None:
    truth = cfg.ingest.truth_column
    if catalog is None or not truth or truth not in catalog.columns:
        return None
    products = pl.read_parquet(work_dir / S.PRODUCTS_FILE)
    joined = catalog.select(pl.col(S.LISTING_ID).cast(pl.String), truth).join(
        products, on=S.LISTING_ID
    )
    return R.quality_section(joined[S.PRODUCT_ID], joined[truth])


def build_report(
    cfg: PairsieveConfig,
    dataset: Path,
    catalog: pl.DataFrame | None,
    labelled: pl.DataFrame,
    listings: pl.DataFrame,
    out_dir: Path,
) -> dict[str, Any]:
    """The audit's report dict: the same sections as a build report, from the labelled rows."""
    temperature, hard = score_sections(cfg, labelled)
    work_dir = out_dir / "cluster"
    audit = audit_section(dataset, labelled)
    report: dict[str, Any] = {
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": "audit",
        "title": "pairsieve audit: false negatives in a contrastive dataset",
        "subtitle": f"dataset {dataset}",
        "false_negative_rate": audit["figures"]["false_negative_rate"],
        "audit": audit,
        "duplicates": duplicates_section(
            pl.read_parquet(work_dir / S.PRODUCTS_FILE),
            listings.select(S.LISTING_ID, S.TITLE),
            pl.scan_parquet(work_dir / S.PAIRS_FILE),
            cfg.report.largest_clusters,
        ),
        "batches": batches_from_rows(cfg, labelled),
        "temperature": temperature,
        "hard_negatives": hard,
        "quality": quality_from_catalog(cfg, catalog, work_dir),
    }
    report["missing"] = (
        ["quality: no catalog with the truth column (ingest.truth_column)"]
        if report["quality"] is None
        else []
    )
    return report


def with_labels(report: dict[str, Any], population: pl.DataFrame | None, files) -> None:
    """Replace the model's false-negative rate by the one the answered labels correct, with
    its interval; the model's own estimate and the labels used or not matched stay beside it.

    Raises:
        PairsieveError: ``bad_config`` when the clustering gave no p_same (rule judge).
    """
    if population is None:
        raise PairsieveError(
            "bad_config", "--labels needs p_same: the learned judge", knob="cluster.judge"
        )
    found, unmatched = share_from_labels(population, answered(list(files)), weight=ROWS)
    figures = report["audit"]["figures"]
    figures["false_negative_rate_model_only"] = figures["false_negative_rate"]
    figures["false_negative_rate"] = report["false_negative_rate"] = found.value
    figures["false_negative_rate_ci"] = list(found.interval)
    figures["labels_used"] = found.labels
    figures["labels_not_in_this_audit"] = unmatched
    report["audit"]["notes"].append(
        f"With {found.labels} answered labels, the rate is the model's mean p_same corrected by "
        "the labelled residuals in each p_same stratum; its interval is that estimator's."
    )


def run(cfg: PairsieveConfig, inputs: Inputs, out_dir: Path, *, encoder: Any = None) -> StageResult:
    """Audit the dataset (and cluster it with the catalog): writes report.html and report.json
    (top key ``false_negative_rate``) into ``out_dir`` and the clustering into ``out_dir/cluster``.

    Raises:
        PairsieveError: ``missing_file``, ``bad_format``, ``missing_column``, ``empty_input``.
    """
    from pairsieve.vectors.embed import load_encoder

    started = time.perf_counter()
    out_dir = Path(out_dir)
    dataset, catalog = Path(inputs.dataset), inputs.catalog
    data, dropped = read_dataset(dataset)
    if data.is_empty():
        raise PairsieveError(
            "empty_input", "no row with anchor, positive and a negative", file=str(dataset)
        )
    catalog_df = catalog_listings(Path(catalog), cfg) if catalog else None
    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    listings = listings_for(data, catalog_df)
    product_of = cluster_texts(cfg, listings, out_dir / "cluster", encoder, data)
    labelled = row_scores(cfg, label_rows(data, product_of), encoder)
    table = negative_table(labelled, listings, out_dir / "cluster")
    population = None if table is None else distinct_pairs(table)
    if table is not None:
        labelled = labelled.with_columns(per_row(table))
        io.write_parquet(population, out_dir / S.AUDIT_PAIRS_FILE)
    report = build_report(cfg, dataset, catalog_df, labelled, listings, out_dir)
    if inputs.labels:
        with_labels(report, population, inputs.labels)
    report["accounting"] = R.section(
        "Accounting",
        tables={
            "rows": [
                {
                    "rows_read": data.height + sum(dropped.values()),
                    "rows_audited": data.height,
                    **dropped,
                    "texts": listings.height,
                }
            ]
        },
    )
    report["recommendations"] = recommendations_section(cfg, report)
    outputs = write_report(report, out_dir)
    return StageResult(
        stage="audit",
        rows_in=data.height + sum(dropped.values()),
        rows_out=data.height,
        dropped_by_reason=dropped,
        timings={"audit_s": round(time.perf_counter() - started, 3)},
        outputs=outputs,
        details={k: v for k, v in report["audit"]["figures"].items() if k != "dataset"},
    )
