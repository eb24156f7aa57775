"""The `shards` stage: labelled training shards in a product-disjoint order, and their manifest.

A trainer reads `train-00000.parquet` ... as they are: `anchor`, `positive`, `negative_1` ...
`negative_k` are texts and `label` is the list of integer product ids `[positive, negative_1, ...]`.
sentence-transformers' collator hands a column named `label` to the loss instead of encoding it, so
the stock `MultipleNegativesRankingLoss` ignores it and `pairsieve.training`'s masked loss uses it.

Rows are ordered so that every consecutive block of `shards.batch_size` rows holds no two rows with
the same positive product or the same query, and no row whose negatives include another row's
positive product: a sequential reader (streaming datasets, a plain `DataLoader`) then never sees a
copy of its positive among in-batch negatives. The number of negatives is fixed (`label` must stack
into one tensor); rows short of negatives are dropped as `too_few_negatives`, never padded with
random listings. Eval shards hold whole positive products, chosen by a seeded hash of the product
id, so no positive product is on both sides.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pairsieve import __version__
from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io, progress
from pairsieve.core.contract import Source, StageResult
from pairsieve.core.hashing import label_int, seeded_key
from pairsieve.core.layout import RunLayout
from pairsieve.core.partitions import Mapper, MapSpans, map_here
from pairsieve.errors import PairsieveError
from pairsieve.shards import placement
from pairsieve.shards.card import dataset_card

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Inputs:
    """What the shards are built from: ingest's clicks and listings, the cluster stage's product
    ids and the mine stage's negatives."""

    clicks: Source
    listings: Source
    products: Source
    negatives: Source

    @classmethod
    def of(cls, layout: RunLayout) -> Inputs:
        return cls(layout.clicks, layout.listings, layout.products, layout.negatives)


_KEY = "_query_key"  # the query text negatives.parquet is keyed on (raw or normalised query)
_ORDER = "_order_key"  # seeded per-row hash: the order-independent priority of a row
_GROUP = "_query_group"  # dense integer id of the query, for query-exclusive blocks
_POS_INT = "_positive_product"
_NEG_TEXTS = "_negative_texts"
_N_NEG = "_n_negatives"
_PLACEMENT = "_placement"  # the placement's plan and partitions until it ends


def is_eval_product(seed: int, product_id: str, fraction: float) -> bool:
    """Whether a product is held out: its seeded hash falls in the lowest `fraction` of 2**64."""
    return fraction > 0 and seeded_key(seed, "eval", product_id) < fraction * 2.0**64


# --- reading and joining the inputs ---------------------------------------------------------------


_TEXT_KEYS = (S.QUERY, S.LISTING_ID, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID, S.PRODUCT_ID)


def _lazy(source: Source, name: str, required: tuple[str, ...]) -> pl.LazyFrame:
    """The input as a lazy frame with its key columns as strings; missing columns stop the run."""
    frame = source.lazy() if isinstance(source, pl.DataFrame) else pl.scan_parquet(source)
    columns = frame.collect_schema().names()
    for column in required:
        if column not in columns:
            where = name if isinstance(source, pl.DataFrame) else str(source)
            raise PairsieveError(
                "missing_column", f"{name} has no column {column!r}", file=where, column=column
            )
    return frame.with_columns(pl.col(c).cast(pl.String) for c in required if c in _TEXT_KEYS)


def _join_key(clicks: pl.LazyFrame, negatives: pl.LazyFrame) -> str:
    """The clicks column that negatives.parquet's `query` refers to (raw or normalised query)."""
    if S.QUERY_NORM not in clicks.collect_schema().names():
        return S.QUERY
    wanted = negatives.select(S.QUERY).unique()
    hits = {
        column: wanted.join(
            clicks.select(pl.col(column).alias(S.QUERY)).unique(), on=S.QUERY, how="semi"
        )
        .select(pl.len())
        .collect()
        .item()
        for column in (S.QUERY, S.QUERY_NORM)
    }
    return S.QUERY if hits[S.QUERY] >= hits[S.QUERY_NORM] else S.QUERY_NORM


def _pairs(clicks: pl.LazyFrame, key: str) -> pl.LazyFrame:
    """Distinct (query, clicked listing) pairs: the candidate training rows."""
    has_id = S.QUERY_ID in clicks.collect_schema().names()
    query_id = pl.col(S.QUERY_ID).cast(pl.String).min() if has_id else pl.col(key).min()
    return clicks.group_by(pl.col(key).alias(_KEY), S.LISTING_ID).agg(
        query_id.alias(S.QUERY_ID), pl.col(S.QUERY).min().alias(S.ANCHOR)
    )


def _products_with_ints(products: pl.LazyFrame) -> pl.LazyFrame:
    ids = products.select(S.PRODUCT_ID).unique().collect()[S.PRODUCT_ID].to_list()
    table = pl.DataFrame(
        {S.PRODUCT_ID: ids, _POS_INT: [label_int(str(p)) for p in ids]},
        schema={S.PRODUCT_ID: pl.String, _POS_INT: pl.Int64},
    )
    return products.select(S.LISTING_ID, pl.col(S.PRODUCT_ID).cast(pl.String)).join(
        table.lazy(), on=S.PRODUCT_ID, how="left"
    )


def _negative_lists(
    negatives: pl.LazyFrame, listings: pl.LazyFrame, products: pl.LazyFrame, k: int
) -> pl.LazyFrame:
    """Per (query, positive): the first k known negatives by rank, with texts, products, scores."""
    neg = (
        negatives.select(
            pl.col(S.QUERY).alias(_KEY),
            S.POSITIVE_LISTING_ID,
            S.NEGATIVE_LISTING_ID,
            S.RANK,
            S.SCORE,
            S.POSITIVE_SCORE,
        )
        .join(
            listings.select(pl.col(S.LISTING_ID).alias(S.NEGATIVE_LISTING_ID), S.TITLE),
            on=S.NEGATIVE_LISTING_ID,
            how="inner",
        )
        .join(
            products.select(pl.col(S.LISTING_ID).alias(S.NEGATIVE_LISTING_ID), _POS_INT),
            on=S.NEGATIVE_LISTING_ID,
            how="inner",
        )
        .sort(_KEY, S.POSITIVE_LISTING_ID, S.RANK, S.NEGATIVE_LISTING_ID)
    )
    return neg.group_by(_KEY, S.POSITIVE_LISTING_ID, maintain_order=True).agg(
        pl.col(S.NEGATIVE_LISTING_ID).head(k).alias(S.NEGATIVE_LISTING_IDS),
        pl.col(S.TITLE).head(k).alias(_NEG_TEXTS),
        pl.col(_POS_INT).head(k).alias(S.NEGATIVE_PRODUCT_IDS),
        pl.col(S.SCORE).cast(pl.Float64).head(k).alias(S.NEGATIVE_SCORES),
        pl.col(S.POSITIVE_SCORE).cast(pl.Float64).first(),
        pl.len().alias(_N_NEG),
    )


def _with_order(rows: pl.DataFrame, seed: int) -> pl.DataFrame:
    """Add the seeded priority and query group, and sort by it: the canonical row order."""
    order_keys = [
        seeded_key(seed, q, lid)
        for q, lid in zip(rows[_KEY].to_list(), rows[S.POSITIVE_LISTING_ID].to_list(), strict=True)
    ]
    return rows.with_columns(
        pl.Series(_ORDER, order_keys, dtype=pl.UInt64),
        pl.col(_KEY).rank("dense").cast(pl.Int64).alias(_GROUP),
    ).sort(_ORDER, _KEY, S.POSITIVE_LISTING_ID)


def _unknown_negatives(neg: pl.LazyFrame, lst: pl.LazyFrame, prd: pl.LazyFrame) -> int:
    """Mined negative rows naming a listing absent from the catalog or products (skipped)."""
    known = prd.filter(pl.col(_POS_INT).is_not_null()).join(lst, on=S.LISTING_ID, how="semi")
    known = known.select(pl.col(S.LISTING_ID).alias(S.NEGATIVE_LISTING_ID))
    unknown = neg.join(known, on=S.NEGATIVE_LISTING_ID, how="anti")
    return unknown.select(pl.len()).collect().item()


def assemble_rows(
    cfg: PairsieveConfig, inputs: Inputs
) -> tuple[pl.DataFrame, dict[str, int], dict[str, Any]]:
    """One frame of candidate rows in a canonical order, plus drops per reason and details.

    Raises:
        PairsieveError: ``missing_column`` naming the input and column.
    """
    clk = _lazy(inputs.clicks, "clicks", (S.QUERY, S.LISTING_ID))
    lst = _lazy(inputs.listings, "listings", (S.LISTING_ID, S.TITLE))
    prd = _products_with_ints(_lazy(inputs.products, "products", (S.LISTING_ID, S.PRODUCT_ID)))
    neg = _lazy(
        inputs.negatives,
        "negatives",
        (S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID, S.RANK, S.SCORE, S.POSITIVE_SCORE),
    )
    k = num_negatives(cfg)
    key = _join_key(clk, neg)
    pairs = _pairs(clk, key).collect()
    rows = (
        pairs.lazy()
        .join(
            lst.select(S.LISTING_ID, pl.col(S.TITLE).alias(S.POSITIVE)), on=S.LISTING_ID, how="left"
        )
        .join(prd, on=S.LISTING_ID, how="left")
        .rename({S.LISTING_ID: S.POSITIVE_LISTING_ID, S.PRODUCT_ID: S.POSITIVE_PRODUCT_ID})
        .join(_negative_lists(neg, lst, prd, k), on=[_KEY, S.POSITIVE_LISTING_ID], how="left")
        .with_columns(pl.col(_N_NEG).fill_null(0))
        .collect()
    )
    dropped = {
        "unknown_listing": rows[S.POSITIVE].is_null().sum(),
        "no_product": (rows[S.POSITIVE].is_not_null() & rows[_POS_INT].is_null()).sum(),
    }
    rows = rows.filter(pl.col(S.POSITIVE).is_not_null() & pl.col(_POS_INT).is_not_null())
    short = rows[_N_NEG] < k
    dropped["too_few_negatives"] = int(short.sum())
    rows = rows.filter(~short)
    rows = _with_order(rows, cfg.seed)
    details = {
        "query_key": key,
        "pairs": len(pairs),
        "num_negatives": k,
        # mined negatives skipped because their listing is not in the catalog or products
        "negatives_unknown_listing": _unknown_negatives(neg, lst, prd),
    }
    return rows, {r: int(n) for r, n in dropped.items()}, details


def num_negatives(cfg: PairsieveConfig) -> int:
    """Negative columns per row: `shards.num_negatives`, else `mine.num_negatives`."""
    k = cfg.shards.num_negatives
    return cfg.mine.num_negatives if k is None else k


# --- split, order, write --------------------------------------------------------------------------


def _negative_products(rows: pl.DataFrame, k: int) -> np.ndarray:
    """(n, k) int64 product ids of each row's negatives."""
    if k == 0 or rows.height == 0:
        return np.empty((rows.height, k), dtype=np.int64)
    return rows[S.NEGATIVE_PRODUCT_IDS].explode().to_numpy().astype(np.int64).reshape(-1, k)


def split_eval(rows: pl.DataFrame, cfg: PairsieveConfig) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(train, eval): eval holds every row of the products whose seeded hash is held out."""
    fraction = cfg.shards.eval_fraction
    products = rows[S.POSITIVE_PRODUCT_ID].unique().to_list()
    held = [p for p in products if is_eval_product(cfg.seed, p, fraction)]
    in_eval = pl.col(S.POSITIVE_PRODUCT_ID).is_in(pl.Series(held, dtype=pl.String))
    return rows.filter(~in_eval), rows.filter(in_eval)


def order_train(
    rows: pl.DataFrame, cfg: PairsieveConfig, k: int, mapper: Mapper
) -> tuple[pl.DataFrame, dict[str, int], dict[str, Any]]:
    """Cap rows per product, then place the rest product-disjointly (`placement`, mapped on
    ``mapper`` through a plan in its folder); report what did not fit."""
    entries = placement.Rows(
        rows[_POS_INT].to_numpy().astype(np.int64),
        _negative_products(rows, k),
        rows[_GROUP].to_numpy().astype(np.int64),
        rows[_ORDER].to_numpy(),
    )
    try:
        placed = placement.place_mapped(entries, cfg, mapper)
    finally:
        shutil.rmtree(mapper.folder, ignore_errors=True)
    dropped = {"product_cap": placed.capped, "unplaceable": len(placed.unplaced)}
    details = {
        "batches": -(-len(placed.order) // cfg.shards.batch_size),
        "plan_s": round(placed.plan_s, 3),
        "placement_partitions": placed.partitions,
        "unplaceable_products": rows[S.POSITIVE_PRODUCT_ID].gather(placed.unplaced).n_unique(),
    }
    return rows[placed.order], dropped, details


def _train_frame(rows: pl.DataFrame, k: int) -> pl.DataFrame:
    """The columns a trainer reads: anchor, positive, negative_1..k, label."""
    negatives = [pl.col(_NEG_TEXTS).list.get(i).alias(S.negative_column(i + 1)) for i in range(k)]
    label = pl.concat_list(pl.col(_POS_INT), pl.col(S.NEGATIVE_PRODUCT_IDS)).cast(pl.List(pl.Int64))
    return rows.select(S.ANCHOR, S.POSITIVE, *negatives, label.alias(S.LABEL))


def _meta_frame(rows: pl.DataFrame) -> pl.DataFrame:
    """Row-aligned provenance: ids and mining scores for every training row."""
    return rows.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias(S.ROW_ID),
        pl.col(S.QUERY_ID),
        pl.col(_KEY).alias(S.QUERY),
        S.POSITIVE_LISTING_ID,
        S.POSITIVE_PRODUCT_ID,
        pl.col(S.NEGATIVE_LISTING_IDS).fill_null(pl.lit([], dtype=pl.List(pl.String))),
        pl.col(S.NEGATIVE_SCORES).fill_null(pl.lit([], dtype=pl.List(pl.Float64))),
        S.POSITIVE_SCORE,
    )


def _empty_lists(rows: pl.DataFrame) -> pl.DataFrame:
    """Rows with no mined negatives (allowed when k = 0) get empty lists, not nulls."""
    return rows.with_columns(
        pl.col(S.NEGATIVE_PRODUCT_IDS).fill_null(pl.lit([], dtype=pl.List(pl.Int64))),
        pl.col(_NEG_TEXTS).fill_null(pl.lit([], dtype=pl.List(pl.String))),
    )


def write_split(
    rows: pl.DataFrame, out_dir: Path, prefixes: tuple[str, str], k: int, rows_per_shard: int
) -> list[dict[str, Any]]:
    """Write `<data>-NNNNN.parquet` and `<meta>-NNNNN.parquet` files; one entry per file."""
    data_prefix, meta_prefix = prefixes
    rows = _empty_lists(rows)
    train, meta = _train_frame(rows, k), _meta_frame(rows)
    entries = []
    n_files = max(1, -(-rows.height // rows_per_shard))
    with progress.step(f"writing {data_prefix} shards", rows.height, "rows") as counter:
        for i in range(n_files):
            start = i * rows_per_shard
            for prefix, frame in ((data_prefix, train), (meta_prefix, meta)):
                name = f"{prefix}-{i:05d}.parquet"
                part = frame.slice(start, rows_per_shard)
                if prefix == meta_prefix:
                    part = part.with_columns(pl.col(S.ROW_ID) + start)
                io.write_parquet(part, out_dir / name)
                entries.append(
                    {"name": name, "rows": part.height, "sha256": io.sha256_file(out_dir / name)}
                )
            counter.advance(min(rows_per_shard, rows.height - start))
    return entries


def leakage_check(train: pl.DataFrame, evalset: pl.DataFrame) -> dict[str, Any]:
    """Cross-split overlap: positive products must be disjoint; the rest is informational."""
    train_pos = set(train[S.POSITIVE_PRODUCT_ID].to_list())
    eval_pos = set(evalset[S.POSITIVE_PRODUCT_ID].to_list())
    train_pos_int = set(train[_POS_INT].to_list())
    eval_pos_int = set(evalset[_POS_INT].to_list())
    train_negs = set(train[S.NEGATIVE_PRODUCT_IDS].explode().drop_nulls().to_list())
    eval_negs = set(evalset[S.NEGATIVE_PRODUCT_IDS].explode().drop_nulls().to_list())
    shared = len(train_pos & eval_pos)
    return {
        "positive_products_in_both": shared,
        "eval_products_as_train_negatives": len(eval_pos_int & train_negs),
        "train_products_as_eval_negatives": len(train_pos_int & eval_negs),
        "queries_in_both": len(set(train[_KEY].to_list()) & set(evalset[_KEY].to_list())),
        "train_products": len(train_pos),
        "eval_products": len(eval_pos),
        "ok": shared == 0,
    }


def _manifest(
    cfg: PairsieveConfig,
    k: int,
    files: dict[str, list[dict[str, Any]]],
    leakage: dict[str, Any] | None,
    fingerprints: dict[str, str] | None,
) -> dict[str, Any]:
    return {
        "schema_version": S.SCHEMA_VERSION,
        "pairsieve_version": __version__,
        "config_hash": cfg.config_hash(),
        "input_fingerprints": dict(sorted((fingerprints or {}).items())),
        "seed": cfg.seed,
        "batch_size": cfg.shards.batch_size,
        "rows_per_shard": cfg.shards.rows_per_shard,
        "max_rows_per_product": cfg.shards.max_rows_per_product,
        "eval_fraction": cfg.shards.eval_fraction,
        "num_negatives": k,
        "columns": [S.ANCHOR, S.POSITIVE, *(S.negative_column(i + 1) for i in range(k)), S.LABEL],
        "label": "int64 product ids [positive, negative_1, ...] (pairsieve.core.hashing.label_int)",
        "rows": {
            split: sum(e["rows"] for e in entries if not e["meta"])
            for split, entries in files.items()
        },
        "files": {split: entries for split, entries in files.items()},
        "leakage": leakage,
    }


def _tag(entries: list[dict[str, Any]], meta_prefix: str) -> list[dict[str, Any]]:
    return [{**e, "meta": e["name"].startswith(meta_prefix + "-")} for e in entries]


def _write_splits(
    cfg: PairsieveConfig, train: pl.DataFrame, evalset: pl.DataFrame, out_dir: Path, k: int
) -> tuple[dict[str, list[dict]], dict | None]:
    """Write the train split (and the eval split when ``shards.eval_fraction`` > 0) as shard
    files; return the manifest's file entries per split and the leakage check (None without an
    eval split).

    Raises:
        PairsieveError: ``split_leak`` when a positive product is on both sides.
    """
    per_shard = cfg.shards.rows_per_shard
    train_files = write_split(train, out_dir, (S.TRAIN_PREFIX, S.META_PREFIX), k, per_shard)
    files = {"train": _tag(train_files, S.META_PREFIX)}
    leakage = None
    if cfg.shards.eval_fraction > 0:
        eval_meta = f"{S.EVAL_PREFIX}-{S.META_PREFIX}"
        eval_files = write_split(evalset, out_dir, (S.EVAL_PREFIX, eval_meta), k, per_shard)
        files["eval"] = _tag(eval_files, eval_meta)
        leakage = leakage_check(train, evalset)
        if not leakage["ok"]:
            raise PairsieveError("split_leak", "a positive product is on both sides of the split")
    return files, leakage


def run(
    cfg: PairsieveConfig,
    inputs: Inputs,
    out_dir: Path,
    *,
    fingerprints: dict[str, str] | None = None,
    map_spans: MapSpans = map_here,
) -> StageResult:
    """Build the shards into `out_dir`: train (+ eval) data and meta files and `manifest.json`;
    ``fingerprints`` (of the inputs) are recorded in the manifest. ``map_spans`` runs the
    placement's partitions of the rows (`placement`; default `map_here`).

    Rows in are distinct (query, clicked listing) pairs; each is written or dropped with a reason
    (`unknown_listing`, `no_product`, `too_few_negatives`, `product_cap`, `unplaceable`).

    Raises:
        PairsieveError: ``missing_column`` when an input lacks a contract column.
    """
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, dropped, details = assemble_rows(cfg, inputs)
    k = details["num_negatives"]
    assembled_s = time.perf_counter() - started
    train, evalset = split_eval(rows, cfg)
    train, train_dropped, plan_details = order_train(
        train, cfg, k, Mapper(out_dir / _PLACEMENT, map_spans)
    )
    dropped.update(train_dropped)
    files, leakage = _write_splits(cfg, train, evalset, out_dir, k)
    manifest = _manifest(cfg, k, files, leakage, fingerprints)
    io.write_json(manifest, out_dir / S.MANIFEST_FILE)
    card = dataset_card(manifest, {"pairs": details["pairs"], "dropped": dropped})
    io.write_text(card, out_dir / S.CARD_FILE)
    rows_out = train.height + (evalset.height if cfg.shards.eval_fraction > 0 else 0)
    details.update(plan_details, train_rows=train.height, eval_rows=evalset.height, leakage=leakage)
    written = [e["name"] for entries in files.values() for e in entries]
    outputs = {name: name for name in (*written, S.MANIFEST_FILE, S.CARD_FILE)}
    return StageResult(
        stage="shards",
        rows_in=details["pairs"],
        rows_out=rows_out,
        dropped_by_reason=dropped,
        timings={
            "assemble_s": round(assembled_s, 3),
            "total_s": round(time.perf_counter() - started, 3),
        },
        outputs=outputs,
        details=details,
    )
