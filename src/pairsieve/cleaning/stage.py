"""`pairsieve clean`: repair a contrastive dataset built elsewhere, in its own layout.

The audit says how many of a dataset's negatives are their positive's product; this stage fixes
them. It audits the dataset (`audits.stage`, which clusters its texts with the catalog), judges
each negative against its positive as the build's miner judges a candidate
(`cleaning.verdicts`), mines a pool of safe hard negatives for each (anchor, positive) from the
same texts with the build's own mine stage, and gives each unsafe negative's place to the best
pool candidate the row does not hold (`cleaning.repair`). A negative is dropped only where the
pool runs out; a row of sentence-transformers' fixed columns that cannot be refilled is dropped
with its reason. The result is written file by file in the input's layout, with the product ids
as a `label` column (by default for sentence-transformers' layouts, which
`MaskedMultipleNegativesRankingLoss` and `ProductDisjointBatchSampler` read), and audited again.

Outputs in ``out_dir``: ``dataset/`` (the repaired files, same names), ``clean_negatives.parquet``
(one row per negative given: kept, replaced or dropped, its reason, its replacement),
``clean_rows_dropped.parquet``, ``before/`` and ``after/`` (the two audits), ``mine/`` (the
pool) and report.json/html. Accounting: rows in = rows written + rows dropped by reason; negatives
in = kept + replaced + dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.audits import stage as audit
from pairsieve.audits.pairs import NEGATIVES, text_listings
from pairsieve.cleaning import layout as L
from pairsieve.cleaning.repair import DROPPED, repair_row
from pairsieve.cleaning.report import clean_report
from pairsieve.cleaning.verdicts import judge
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult
from pairsieve.core.hashing import label_int
from pairsieve.errors import PairsieveError
from pairsieve.mine import stage as mine
from pairsieve.report.stage import write_report

DATASET_DIR, BEFORE, AFTER, POOL = "dataset", "before", "after", "mine"
NEGATIVES_FILE = "clean_negatives.parquet"
ROWS_DROPPED_FILE = "clean_rows_dropped.parquet"
SLOT, N = "_slot", "_n"  # a negative's place in its row; a normalised row's number


@dataclass(frozen=True)
class Inputs:
    """What a clean reads: what an audit reads, and whether to add the `label` column (None:
    for sentence-transformers' layouts, not for FlagEmbedding's)."""

    dataset: Path
    catalog: Path | None = None
    labels: tuple[Path, ...] = ()
    label_column: bool | None = None


@dataclass(frozen=True)
class Texts:
    """Every text of the dataset and the catalog as a listing, the audit's product ids, and
    the listing that stands for each distinct text (`audits.pairs.text_listings`)."""

    listings: pl.DataFrame
    products: pl.DataFrame
    ids: pl.DataFrame

    @classmethod
    def of(cls, listings: pl.DataFrame, products: pl.DataFrame) -> Texts:
        return cls(listings, products, text_listings(listings))


def _split_unusable(
    rows: pl.DataFrame, catalog: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows to clean, (file, row, reason) of those that cannot be): no anchor, positive or
    negative, or, with a catalog, a positive that is none of its titles (its copies could not
    be told from the catalog's listings, nor its replacements mined among them). An output row
    is dropped when any of its positives is unusable, as the audit skips it."""
    reason = (
        pl.when(pl.col(S.ANCHOR).is_null() | pl.col(S.POSITIVE).is_null())
        .then(pl.lit("missing_anchor_or_positive"))
        .when(pl.col(NEGATIVES).list.len() == 0)
        .then(pl.lit("no_negatives"))
    )
    if catalog is not None:
        titles = catalog[S.TITLE].unique().implode()
        reason = reason.when(~pl.col(S.POSITIVE).is_in(titles)).then(
            pl.lit("positive_not_in_catalog")
        )
    flagged = rows.with_columns(reason.alias(S.REASON))
    bad = (
        flagged.filter(pl.col(S.REASON).is_not_null())
        .group_by(L.FILE, L.ROW, maintain_order=True)
        .agg(pl.col(S.REASON).first())
    )
    usable = flagged.join(bad, on=[L.FILE, L.ROW], how="anti").drop(S.REASON)
    return usable.with_row_index(N), bad


def _negative_table(usable: pl.DataFrame, listing_of: pl.DataFrame) -> pl.DataFrame:
    """One row per negative: its row and place, and the columns `verdicts.judge` reads."""
    flat = usable.select(
        N,
        pl.col(S.ANCHOR).alias(S.QUERY),
        S.POSITIVE,
        S.POSITIVE_SCORE,
        pl.col(NEGATIVES).alias("_text"),
        pl.col(S.NEGATIVE_SCORES).alias(S.SCORE),
        pl.int_ranges(pl.col(NEGATIVES).list.len()).alias(SLOT),
    ).explode(["_text", S.SCORE, SLOT])
    ids = listing_of.rename({S.LISTING_ID: "_id"})
    return (
        flat.join(ids, left_on=S.POSITIVE, right_on=S.TITLE, maintain_order="left")
        .rename({"_id": S.POSITIVE_LISTING_ID})
        .join(ids, left_on="_text", right_on=S.TITLE, maintain_order="left")
        .rename({"_id": S.NEGATIVE_LISTING_ID})
    )


def _pool(
    cfg: PairsieveConfig, usable: pl.DataFrame, texts: Texts, out_dir: Path, encoder: Any
) -> tuple[pl.DataFrame, float | None]:
    """(query, positive_listing_id, negative_listing_id) of safe hard negatives, best first,
    mined by the build's mine stage for every (anchor, positive) with twice the row's width and
    one to spare; and the copy density that mining estimated, so the dataset's own negatives
    are judged on the same evidence."""
    width = int(usable[NEGATIVES].list.len().max())
    clicks = usable.join(
        texts.ids, left_on=S.POSITIVE, right_on=S.TITLE, maintain_order="left"
    ).select(pl.col(S.ANCHOR).alias(S.QUERY), S.LISTING_ID)
    deeper = cfg.model_copy(
        update={"mine": cfg.mine.model_copy(update={"num_negatives": 2 * width + 1})}
    )
    inputs = mine.Inputs(clicks, texts.listings.select(S.LISTING_ID, S.TITLE), texts.products)
    result = mine.run(deeper, inputs, out_dir, encoder=encoder)
    pool = pl.read_parquet(out_dir / S.NEGATIVES_FILE).sort(S.QUERY, S.POSITIVE_LISTING_ID, S.RANK)
    density = result.details.get("copy_density", {}).get("value")
    return pool.select(S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID), density


def _product_of_text(texts: Texts) -> dict[str, str]:
    """Each text's product id (a listing no product names is its own product)."""
    joined = texts.ids.join(texts.products, on=S.LISTING_ID, how="left")
    return dict(
        zip(
            joined[S.TITLE].to_list(),
            joined[S.PRODUCT_ID].fill_null(joined[S.LISTING_ID]).to_list(),
            strict=True,
        )
    )


@dataclass(frozen=True)
class _Repaired:
    kept_rows: pl.DataFrame  # _file, _row, negatives, label
    slots: pl.DataFrame  # one row per negative given
    dropped_rows: pl.DataFrame  # _file, _row, reason


_KEPT_SCHEMA = {L.FILE: pl.UInt32, L.ROW: pl.UInt32, NEGATIVES: pl.List(pl.String),
                S.LABEL: pl.List(pl.Int64)}  # fmt: skip
_SLOTS_SCHEMA = {"file": pl.UInt32, "row": pl.UInt32, "slot": pl.Int64, S.ANCHOR: pl.String,
                 S.POSITIVE: pl.String, "negative": pl.String, "action": pl.String,
                 S.REASON: pl.String, "replacement": pl.String}  # fmt: skip
_DROPPED_SCHEMA = {L.FILE: pl.UInt32, L.ROW: pl.UInt32, S.REASON: pl.String}


def _pools(pool: pl.DataFrame, title_of: dict[str, str]) -> dict[tuple[str, str], list[str]]:
    """The pool's texts per (query, positive listing), best first."""
    grouped = pool.group_by(S.QUERY, S.POSITIVE_LISTING_ID, maintain_order=True).agg(
        S.NEGATIVE_LISTING_ID
    )
    return {(q, p): [title_of[n] for n in negatives] for q, p, negatives in grouped.iter_rows()}


def _repair(
    files: list[L.DatasetFile],
    usable: pl.DataFrame,
    judged: pl.DataFrame,
    pools: dict[tuple[str, str], list[str]],
    product_of: dict[str, str],
) -> _Repaired:
    """Every output row repaired (`repair_row`): its slots' reasons are the first unsafe reason
    over its positives, its pool the first positive's without the texts of any positive's
    product."""
    reasons = judged.group_by(N, maintain_order=True).agg(pl.col(S.REASON))
    listing_of = dict(
        zip(judged[S.POSITIVE].to_list(), judged[S.POSITIVE_LISTING_ID].to_list(), strict=True)
    )
    rows = (
        usable.join(reasons, on=N, maintain_order="left")
        .group_by(L.FILE, L.ROW, maintain_order=True)
        .agg(S.ANCHOR, S.POSITIVE, pl.col(NEGATIVES).first(), S.REASON)
    )
    kept, slots, dropped = [], [], []
    for file, row, anchors, positives, negatives, reason_lists in rows.iter_rows():
        unsafe = [next((r for r in slot if r), None) for slot in zip(*reason_lists, strict=True)]
        own = {product_of[p] for p in positives}
        candidates = pools.get((anchors[0], listing_of[positives[0]]), [])
        safe = [t for t in candidates if product_of[t] not in own]
        repaired, done = repair_row(negatives, unsafe, safe)
        for slot, (negative, outcome) in enumerate(zip(negatives, done, strict=True)):
            slots.append((file, row, slot, anchors[0], positives[0], negative, outcome.action,
                          outcome.reason, outcome.replacement))  # fmt: skip
        lost = any(o.action == DROPPED for o in done)
        if (lost and files[file].fixed_width) or not repaired:
            dropped.append((file, row, "no_safe_replacement"))
            continue
        label = [label_int(product_of[t]) for t in (*positives, *repaired)]
        kept.append((file, row, repaired, label))
    return _Repaired(
        pl.DataFrame(kept, schema=_KEPT_SCHEMA, orient="row"),
        pl.DataFrame(slots, schema=_SLOTS_SCHEMA, orient="row"),
        pl.DataFrame(dropped, schema=_DROPPED_SCHEMA, orient="row"),
    )


def _repaired(
    cfg: PairsieveConfig,
    files: list[L.DatasetFile],
    usable: pl.DataFrame,
    texts: Texts,
    out_dir: Path,
    encoder: Any,
) -> _Repaired:
    """The rows judged (on the copy density the pool's mining estimated) and repaired from the
    pool."""
    listings = texts.listings
    pool, density = _pool(cfg, usable, texts, out_dir / POOL, encoder)
    scored = audit.row_scores(cfg, usable, encoder)
    table = _negative_table(scored, texts.ids)
    judging = cfg.mine.model_copy(update={"copy_density": density})
    judged = judge(table, mine.listing_products(listings, texts.products), judging)
    title_of = dict(zip(listings[S.LISTING_ID].to_list(), listings[S.TITLE].to_list(), strict=True))
    pools = _pools(pool, title_of)
    return _repair(files, usable, judged, pools, _product_of_text(texts))


def _named(frame: pl.DataFrame, column: str, names: pl.Series) -> pl.DataFrame:
    """``frame`` with its file numbers in ``column`` replaced by the files' names."""
    return frame.with_columns(names.gather(frame[column]).alias(column))


def _write_dataset(
    files: list[L.DatasetFile], repaired: _Repaired, label_column: bool | None, out: Path
) -> list[Path]:
    """The repaired files under ``out``, each named as its input."""
    written = []
    for number, file in enumerate(files):
        rows = repaired.kept_rows.filter(pl.col(L.FILE) == number)
        add_label = file.fixed_width if label_column is None else label_column
        labels = rows.select(L.ROW, S.LABEL) if add_label else None
        written.append(
            L.write_back(file, rows.select(L.ROW, NEGATIVES), labels, out / file.path.name)
        )
    return written


def _usable_rows(
    files: list[L.DatasetFile],
    catalog: pl.DataFrame | None,
    dataset: Path,
    catalog_path: Path | None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`_split_unusable` of the files' rows.

    Raises:
        PairsieveError: ``empty_input`` naming the dataset when no row can be cleaned.
    """
    usable, unusable = _split_unusable(L.normalised_rows(files), catalog)
    if usable.is_empty():
        where = f" whose positive is a title of the catalog {catalog_path}" if catalog_path else ""
        raise PairsieveError(
            "empty_input",
            f"no row with anchor, positive and a negative{where}",
            file=str(dataset),
            column=S.POSITIVE,
        )
    return usable, unusable


def _write_accounts(
    files: list[L.DatasetFile], repaired: _Repaired, unusable: pl.DataFrame, out_dir: Path
) -> pl.DataFrame:
    """Write what became of every negative and every dropped row, files by name; returns the
    dropped rows."""
    names = pl.Series([f.path.name for f in files], dtype=pl.String)
    io.write_parquet(_named(repaired.slots, "file", names), out_dir / NEGATIVES_FILE)
    dropped_rows = pl.concat([unusable, repaired.dropped_rows]).sort(L.FILE, L.ROW)
    io.write_parquet(
        _named(dropped_rows.rename({L.FILE: "file", L.ROW: "row"}), "file", names),
        out_dir / ROWS_DROPPED_FILE,
    )
    return dropped_rows


def run(cfg: PairsieveConfig, inputs: Inputs, out_dir: Path, *, encoder: Any = None) -> StageResult:
    """Clean the dataset into ``out_dir`` (see the module docstring for what is written).

    Raises:
        PairsieveError: ``missing_file``, ``bad_format``, ``missing_column``, ``empty_input``.
    """
    from pairsieve.vectors.embed import load_encoder

    started = time.perf_counter()
    out_dir = Path(out_dir)
    files = L.read_files(Path(inputs.dataset))
    catalog = audit.catalog_listings(Path(inputs.catalog), cfg) if inputs.catalog else None
    usable, unusable = _usable_rows(files, catalog, inputs.dataset, inputs.catalog)
    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    before = audit.run(
        cfg, audit.Inputs(Path(inputs.dataset), inputs.catalog, inputs.labels), out_dir / BEFORE,
        encoder=encoder,
    )  # fmt: skip
    listings = audit.listings_for(usable, catalog)
    products = pl.read_parquet(out_dir / BEFORE / "cluster" / S.PRODUCTS_FILE)
    repaired = _repaired(cfg, files, usable, Texts.of(listings, products), out_dir, encoder)
    dataset_dir = out_dir / DATASET_DIR
    _write_dataset(files, repaired, inputs.label_column, dataset_dir)
    dropped_rows = _write_accounts(files, repaired, unusable, out_dir)
    after = audit.run(
        cfg, audit.Inputs(dataset_dir, inputs.catalog, inputs.labels), out_dir / AFTER,
        encoder=encoder,
    )  # fmt: skip
    rows_in = sum(f.frame.height for f in files)
    report = clean_report(
        Path(inputs.dataset), before.details, after.details, repaired.slots, dropped_rows, rows_in
    )
    outputs = write_report(report, out_dir)
    dropped_by_reason = dict(dropped_rows[S.REASON].value_counts().iter_rows())
    return StageResult(
        stage="clean",
        rows_in=rows_in,
        rows_out=repaired.kept_rows.height,
        dropped_by_reason=dropped_by_reason,
        timings={"clean_s": round(time.perf_counter() - started, 3)},
        outputs={**outputs, "dataset": DATASET_DIR, "negatives": NEGATIVES_FILE,
                 "rows_dropped": ROWS_DROPPED_FILE},
        details=report["clean"]["figures"],
    )  # fmt: skip
