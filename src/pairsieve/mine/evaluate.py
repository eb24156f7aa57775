"""How many mined "hard negatives" are really the positive's product, with and without pairsieve.

On a catalog with ground-truth product ids and a click log, one index is mined four ways:

* (a) ``naive``: exact-text exclusion only, what today's miners do (sentence-transformers'
  `mine_hard_negatives` deduplicates the corpus by text and masks the query's positives);
* (b) ``margin``: (a) plus the margin filter of ``cfg.mine``, or NV-Retriever's TopK-PercPos
  (relative margin 0.05) when the config sets none;
* (c) ``product``: product exclusion with pairsieve's cluster ids (plus the duplicate guard,
  `mine.duplicate_guard_jaccard`, when set), no margin;
* (d) ``both``: product exclusion and the margin of (b);
* ``c0``: (c) without the guard, to show what cluster ids alone achieve;
* ``truth``: (d) with ground-truth product ids, an upper bound for the clusterer.

Exact-text exclusion is expressed as "a product is a distinct title", so every variant runs the
same `deepen.mine_pairs` and differs only in its product map and margin knobs (a variant that
leaves pairs short searches deeper, as the stage does). The
false-negative rate is the share of kept negatives whose true product equals the positive's.
"""

from __future__ import annotations

import logging
from typing import Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.mine import deepen
from pairsieve.mine import stage as mine
from pairsieve.mine.retrieval import build_retrieval, embed_inputs, positive_table
from pairsieve.vectors.embed import Encoder, shared_cache

log = logging.getLogger(__name__)

# NV-Retriever TopK-PercPos (arXiv 2407.15831): negatives must score below 95% of the positive.
NV_RETRIEVER_MARGIN = 0.05

# name -> (product map, margin filter on?); (c)-(e) also run the duplicate guard when configured.
VARIANTS: dict[str, tuple[str, bool]] = {
    "a_naive": ("exact_text", False),
    "b_margin": ("exact_text", True),
    "c_product": ("clusters", False),
    "d_both": ("clusters", True),
    "c0_clusters_without_guard": ("clusters_only", False),
    "e_truth_upper_bound": ("truth", True),
}
# What mining with product ids must deliver against naive mining, on a labelled catalog:
TARGET_FN_RATE = 0.01  # (d) under 1% of mined negatives
TARGET_FN_REDUCTION = 5.0  # ... and at least 5x lower than (a)
TARGET_KEPT_SHARE = 0.90  # ... keeping at least 90% of (a)'s negatives per query


def product_maps(
    listings: pl.DataFrame, clusters: pl.DataFrame | None, truth_column: str
) -> dict[str, pl.DataFrame]:
    """(listing_id, product_id[, title_norm]) frames: exact title, pairsieve clusters (with and
    without titles for the duplicate guard), ground truth."""
    truth = listings.select(S.LISTING_ID, pl.col(truth_column).alias(S.PRODUCT_ID))
    maps = {
        "exact_text": listings.select(S.LISTING_ID, pl.col(S.TITLE).alias(S.PRODUCT_ID)),
        "truth": mine.listing_products(listings, truth),
    }
    if clusters is not None:
        maps["clusters"] = mine.listing_products(listings, clusters)
        maps["clusters_only"] = maps["clusters"].drop(S.TITLE_NORM)
    return maps


def variant_metrics(
    kept: pl.DataFrame, positives: pl.DataFrame, truth: pl.DataFrame, num_negatives: int
) -> dict[str, Any]:
    """False negatives among ``kept`` and negatives per query/pair for one variant.

    ``truth`` is (listing_id, product_id) with ground-truth ids.
    """
    truth_of = truth.select(S.LISTING_ID, pl.col(S.PRODUCT_ID).alias("_t"))
    judged = kept.join(
        truth_of.rename({S.LISTING_ID: S.NEGATIVE_LISTING_ID, "_t": "_neg"}),
        on=S.NEGATIVE_LISTING_ID,
        how="left",
    ).join(
        truth_of.rename({S.LISTING_ID: S.POSITIVE_LISTING_ID, "_t": "_pos"}),
        on=S.POSITIVE_LISTING_ID,
        how="left",
    )
    false_negatives = int((judged["_neg"] == judged["_pos"]).sum())
    per_query = (
        positives.select(S.QUERY)
        .unique()
        .join(kept.group_by(S.QUERY).len("_n"), on=S.QUERY, how="left")
        .with_columns(pl.col("_n").fill_null(0))
    )
    per_pair = (
        positives.select(S.QUERY, S.POSITIVE_LISTING_ID)
        .join(
            kept.group_by(S.QUERY, S.POSITIVE_LISTING_ID).len("_n"),
            on=[S.QUERY, S.POSITIVE_LISTING_ID],
            how="left",
        )
        .with_columns(pl.col("_n").fill_null(0))
    )
    return {
        "negatives": kept.height,
        "false_negatives": false_negatives,
        "false_negative_rate": false_negatives / kept.height if kept.height else 0.0,
        "negatives_per_query": float(per_query["_n"].mean() or 0.0),
        "negatives_per_pair": float(per_pair["_n"].mean() or 0.0),
        "pairs_short": int((per_pair["_n"] < num_negatives).sum()),
        "_per_query": per_query,
    }


def _compare_to_naive(variants: dict[str, dict[str, Any]]) -> None:
    """Add each variant's false-negative reduction and negatives-kept share relative to (a)."""
    naive = variants["a_naive"]
    for metrics in variants.values():
        rate = metrics["false_negative_rate"]
        metrics["fn_reduction_vs_a"] = naive["false_negative_rate"] / rate if rate else None
        metrics["kept_share_vs_a"] = (
            metrics["negatives_per_query"] / naive["negatives_per_query"]
            if naive["negatives_per_query"]
            else None
        )
        ratio = (
            metrics["_per_query"]
            .join(naive["_per_query"].rename({"_n": "_a"}), on=S.QUERY)
            .filter(pl.col("_a") > 0)
        )
        metrics["mean_per_query_kept_share_vs_a"] = float((ratio["_n"] / ratio["_a"]).mean() or 0.0)
    for metrics in variants.values():
        metrics.pop("_per_query")


def targets(variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Whether variant (d) meets the targets above, and why not when it does not."""
    both, naive = variants.get("d_both"), variants["a_naive"]
    if both is None:
        return {"met": False, "why": "no pairsieve clusters given"}
    fn_ok = both["false_negative_rate"] < TARGET_FN_RATE
    reduction_ok = both["false_negative_rate"] * TARGET_FN_REDUCTION <= naive["false_negative_rate"]
    kept_ok = (both["kept_share_vs_a"] or 0.0) >= TARGET_KEPT_SHARE
    return {
        "d_false_negative_rate_below_1pct": fn_ok,
        "d_at_least_5x_lower_than_a": reduction_ok,
        "d_keeps_90pct_of_a_per_query": kept_ok,
        "met": fn_ok and reduction_ok and kept_ok,
    }


def evaluate(
    cfg: PairsieveConfig,
    listings: pl.DataFrame,
    clicks: pl.DataFrame,
    clusters: pl.DataFrame | None,
    encoder: Encoder,
) -> dict[str, Any]:
    """Mine with every variant over one index; return the comparison as a JSON-able dict.

    ``listings`` needs listing_id, title and true_product_id; ``clicks`` query and listing_id;
    ``clusters`` (listing_id, product_id), the cluster stage's products (None skips (c), (d)).
    """
    pairs = clicks.select(S.QUERY, S.LISTING_ID).unique()
    cache = shared_cache(cfg.cache_dir, encoder.model_key)
    embedded = embed_inputs(pairs[S.QUERY].to_list(), listings, encoder, cache)
    retrieval = build_retrieval(embedded, cfg)
    positives = positive_table(pairs, embedded)
    maps = product_maps(listings, clusters, S.TRUE_PRODUCT_ID)
    no_margin = cfg.mine.model_copy(update={"absolute_margin": None, "relative_margin": None})
    with_margin = cfg.mine
    if cfg.mine.absolute_margin is None and cfg.mine.relative_margin is None:
        with_margin = cfg.mine.model_copy(update={"relative_margin": NV_RETRIEVER_MARGIN})
    variants: dict[str, dict[str, Any]] = {}
    for name, (product_map, use_margin) in VARIANTS.items():
        if product_map not in maps:
            continue
        mine_cfg = with_margin if use_margin else no_margin
        mined = deepen.mine_pairs(retrieval, positives, maps[product_map], mine_cfg, cfg.seed)
        summary = mine.summarise(mined.counts, positives, mined.kept, mined.reasons, mine_cfg)
        variants[name] = {
            "products": product_map,
            "margin": use_margin,
            **variant_metrics(mined.kept, positives, maps["truth"], cfg.mine.num_negatives),
            "dropped_by_reason": summary["dropped_by_reason"],
            "retrieval_rounds": mined.rounds,
        }
        log.info(
            "%s: %d negatives, false-negative rate %.4f",
            name,
            variants[name]["negatives"],
            variants[name]["false_negative_rate"],
        )
    _compare_to_naive(variants)
    return {
        "listings": listings.height,
        "queries": len(embedded.queries),
        "pairs": positives.height,
        "mine_config": cfg.mine.model_dump(mode="json"),
        "retrieval": {**retrieval.info, "embedding": embedded.stats},
        "variants": variants,
        "targets": targets(variants),
    }


def format_table(result: dict[str, Any]) -> str:
    """A plain-text (markdown) table of the variants."""
    lines = [
        "| variant | products | margin | negatives | neg/query | false neg. | FN rate "
        "| FN ÷ vs (a) | kept vs (a) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in result["variants"].items():
        reduction = f"{m['fn_reduction_vs_a']:.1f}x" if m["fn_reduction_vs_a"] else "-"
        lines.append(
            f"| {name} | {m['products']} | {'yes' if m['margin'] else 'no'} | {m['negatives']} "
            f"| {m['negatives_per_query']:.3f} | {m['false_negatives']} "
            f"| {100 * m['false_negative_rate']:.2f}% | {reduction} "
            f"| {100 * m['kept_share_vs_a']:.1f}% |"
        )
    return "\n".join(lines)
