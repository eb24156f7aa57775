"""The report's words for a reader: what each figure and column is called, with its unit, how its
value is written, and the sentence under each chart that says what to read from it.

report.json keeps the raw keys (``kappa_text``, ``p_batch_clean``) for programs; the page shows
`DISPLAY_NAMES` instead and writes each value by its kind: a count with thousands separators, a
share as a percentage, a score or a loss to three decimals. Every chart spec carries its sentence
from `READINGS`. A test walks a build's and an audit's report and fails on any key shown without
a display name here, and on any chart without a sentence.
"""

from __future__ import annotations

import html
import math
from typing import Any, Literal

Kind = Literal["count", "share", "score", "nats", "number", "text", "flag"]

DISPLAY_NAMES: dict[str, tuple[str, Kind]] = {
    # stages and rows
    "stage": ("stage", "text"),
    "reason": ("reason", "text"),
    "rows": ("rows", "count"),
    "rows_in": ("rows in", "count"),
    "rows_out": ("rows kept", "count"),
    "dropped": ("rows dropped", "count"),
    "balanced": ("in = kept + dropped", "flag"),
    "rows_read": ("rows read", "count"),
    "rows_audited": ("rows audited", "count"),
    "missing_anchor_or_positive": ("rows without anchor or positive", "count"),
    "no_negatives": ("rows without a negative", "count"),
    "texts": ("distinct texts", "count"),
    # duplicates and clustering
    "listings": ("listings", "count"),
    "products": ("products", "count"),
    "size": ("listings per product", "count"),
    "product_id": ("product id", "text"),
    "sample titles": ("sample titles", "text"),
    "pairs": ("candidate pairs", "count"),
    "candidate_pairs": ("candidate pairs judged", "count"),
    "accepted_pairs": ("pairs judged the same product", "count"),
    "vetoed_pairs": ("pairs kept apart by a veto", "count"),
    "largest_cluster": ("listings in the largest product", "count"),
    "listings_with_duplicate": ("listings with a copy", "count"),
    "share_with_duplicate": ("listings with a copy (%)", "share"),
    "clusters": ("products found", "count"),
    "predicted_pairs": ("same-product pairs found", "count"),
    "true_pairs": ("same-product pairs in the truth", "count"),
    "pairwise_precision": ("pairwise precision", "share"),
    "pairwise_recall": ("pairwise recall", "share"),
    "pairwise_f1": ("pairwise F1", "share"),
    "bcubed_precision": ("B-cubed precision", "share"),
    "bcubed_recall": ("B-cubed recall", "share"),
    "bcubed_f1": ("B-cubed F1", "share"),
    # in-batch collisions
    "training_rows": ("training rows", "count"),
    "training_batch_size": ("training batch size (rows)", "count"),
    "batch_size": ("batch size (rows)", "count"),
    "kappa": ("κ, chance two rows collide (%)", "share"),
    "kappa_text": ("chance two rows share an exact text, κ (%)", "share"),
    "kappa_product": ("chance two rows share a product, κ (%)", "share"),
    "share_missed_by_text_dedupe": ("collisions exact-text dedupe misses (%)", "share"),
    "false_negatives_per_anchor": ("same-product negatives per anchor", "number"),
    "false_negatives_per_anchor_at_training_batch": (
        "same-product negatives per anchor, at the training batch size",
        "number",
    ),
    "hard_negative_false_negatives_per_anchor": (
        "same-product mined negatives per anchor",
        "number",
    ),
    "colliding_pairs_per_batch": ("same-product pairs per batch", "number"),
    "colliding_pairs": ("same-product pairs", "count"),
    "p_batch_clean": ("batches with no same-product pair (%)", "share"),
    "p_batch_clean_at_training_batch": (
        "batches with no same-product pair, at the training batch size (%)",
        "share",
    ),
    "batches": ("batches", "count"),
    "dirty_batches": ("batches with a same-product pair", "count"),
    "order": ("row order", "text"),
    # hard negatives
    "candidates": ("candidate negatives", "count"),
    "candidates_dropped": ("candidate negatives dropped", "count"),
    "negatives_kept": ("negatives kept", "count"),
    "same_product_dropped": ("dropped as the positive's product", "count"),
    "same_product_share_of_eligible": (
        "candidates that were the positive's product (%)",
        "share",
    ),
    "copy_density": ("candidates inside the margin the product ids know as copies (%)", "share"),
    "kept_above_margin": ("hard negatives kept above the margin, judged another product", "count"),
    "kept_above_margin_share": ("negatives kept above the margin (%)", "share"),
    "estimated_copies_among_kept_above_margin": (
        "estimated copies of the positive's product among them (mean probability, %)",
        "share",
    ),
    "estimated_copies_among_kept_above_margin_ci": ("95% interval of that share", "share"),
    "estimated_copies_labels_used": ("answered labels on these pairs", "count"),
    "dropped_inside_margin_judged_copy": ("dropped inside the margin, judged a copy", "count"),
    "dropped_inside_margin_query_cannot_tell": (
        "dropped inside the margin, another product the query does not tell apart",
        "count",
    ),
    "dropped_inside_margin_undecided": ("dropped inside the margin, undecided", "count"),
    "list": ("list", "text"),
    "n": ("scores", "count"),
    "mean": ("mean cosine", "score"),
    "median": ("median cosine", "score"),
    # the headline
    "same_product_negatives_per_anchor": ("same-product negatives per anchor", "number"),
    "same_product_share_of_mined": ("mined negatives that were the positive's product", "share"),
    "gradient_share_at_headline_tau": ("their share of the gradient", "share"),
    # temperature
    "tau": ("temperature τ", "number"),
    "rows_scored": ("rows scored", "count"),
    "rows_with_same_product_candidate": ("rows with a same-product candidate", "count"),
    "rows_with_false_negative": ("rows with a same-product candidate", "count"),
    "floor_one_exact_copy": ("loss floor, one exact copy (nats)", "nats"),
    "floor_two_exact_copies": ("loss floor, two exact copies (nats)", "nats"),
    "mean_gap": ("mean cosine gap, positive minus nearest copy", "score"),
    "mean_loss_floor": ("mean loss floor (nats)", "nats"),
    "false_negative_gradient_share": ("gradient share of same-product candidates", "share"),
    "row1_loss": ("row 1 loss (nats)", "nats"),
    "row2_loss": ("row 2 loss (nats)", "nats"),
    "row2_with_duplicate_loss": ("row 2 with a copy of its positive (nats)", "nats"),
    "mean_loss": ("mean loss (nats)", "nats"),
    # recommendations
    "recommendation": ("recommendation", "text"),
    "rests_on": ("rests on", "text"),
    # the audit
    "dataset": ("dataset", "text"),
    "negatives": ("negatives", "count"),
    "false_negatives": ("negatives clustered into the positive's product", "count"),
    "false_negative_rate": ("negatives of the positive's product, estimated (%)", "share"),
    "false_negative_rate_ci": ("95% interval of that estimate", "share"),
    "false_negative_rate_by_cluster": (
        "negatives clustered into the positive's product (%)",
        "share",
    ),
    "expected_false_negatives": ("negatives of the positive's product, estimated", "number"),
    "mean_p_same_accepted": ("mean p_same of the merged candidate pairs", "share"),
    "mean_p_same_rejected": ("mean p_same of the candidate pairs kept apart", "share"),
    "false_negative_rate_model_only": ("the same from p_same alone, before the labels", "share"),
    "labels_used": ("answered labels used", "count"),
    "pair_model": ("pair model the labels chose (shipped, or refit to them)", "text"),
    "lifted_vetoes": ("attribute vetoes the labels lifted", "text"),
    "merged_pair_precision": ("merged candidate pairs that are one product (%)", "share"),
    "merged_pair_precision_ci": ("95% interval of that share", "share"),
    "candidate_recall": ("true candidate pairs that were merged (%)", "share"),
    "candidate_recall_ci": ("95% interval of that share", "share"),
    "labels_not_in_this_build": ("answered labels about other pairs (not used)", "count"),
    "labels_not_in_this_audit": ("answered labels about other pairs (not used)", "count"),
    "calibration_error": ("calibration error of p_same, worst held-out catalog", "share"),
    # the clean
    "false_negative_rate_before": (
        "before: negatives of the positive's product, estimated (%)",
        "share",
    ),
    "false_negative_rate_ci_before": ("before: 95% interval of that estimate", "share"),
    "false_negative_rate_by_cluster_before": (
        "before: negatives clustered into the positive's product (%)",
        "share",
    ),
    "false_negative_rate_after": (
        "after: negatives of the positive's product, estimated (%)",
        "share",
    ),
    "false_negative_rate_ci_after": ("after: 95% interval of that estimate", "share"),
    "false_negative_rate_by_cluster_after": (
        "after: negatives clustered into the positive's product (%)",
        "share",
    ),
    "labels_used_before": ("before: answered labels used", "count"),
    "labels_used_after": ("after: answered labels used", "count"),
    "rows_written": ("rows written", "count"),
    "rows_dropped": ("rows dropped", "count"),
    "no_safe_replacement": ("rows with a negative no safe one could replace", "count"),
    "positive_not_in_catalog": ("rows whose positive is no title of the catalog", "count"),
    "negatives_replaced": ("negatives replaced", "count"),
    "negatives_dropped": ("negatives dropped", "count"),
    "replaced": ("replaced", "count"),
    "negative": ("negative given", "text"),
    "replacement": ("its replacement", "text"),
    "exact_copy_negatives": ("negatives that copy the positive's text", "count"),
    "exact_copy_rate": ("negatives that copy the positive's text (%)", "share"),
    "share_of_rows_with_false_negative": ("rows with a same-product negative (%)", "share"),
    "anchor": ("anchor", "text"),
    "positive": ("positive", "text"),
    "negative (same product)": ("negative (same product)", "text"),
    "score": ("cosine", "score"),
    # a day-2 build
    "build_number": ("build number", "count"),
    "products_new": ("product ids born", "count"),
    "products_merged": ("product ids merged", "count"),
    "products_split": ("product ids split", "count"),
    "products_removed": ("product ids removed", "count"),
    "titles_unchanged": ("titles unchanged", "count"),
    "pairs_reused": ("judged pairs reused", "count"),
    "queries_reused": ("queries whose negatives were reused", "count"),
    "queries_mined": ("queries mined again", "count"),
    "change": ("change", "text"),
    "other_product_id": ("other product id", "text"),
    # a training experiment
    "arm": ("arm", "text"),
    "seeds": ("seeds", "count"),
    "recall@10": ("recall@10 (%)", "share"),
    "ndcg@10": ("nDCG@10 (%)", "share"),
    "mrr@10": ("MRR@10 (%)", "share"),
    "baseline": ("against", "text"),
    "metric": ("metric", "text"),
    "difference": ("difference (points of %)", "share"),
    "ci": ("95% paired bootstrap interval", "share"),
    "learned_tau": ("τ where the learned temperature ended, per seed", "text"),
    "negatives_share": ("training negatives of the positive's product (%)", "share"),
}


READINGS: dict[str, str] = {
    "accounting": "Every stage accounts for its rows: kept plus dropped equals rows in; mining "
    "drops most of its candidates by design, keeping the few best negatives per query.",
    "changes": "Product ids born, merged, split and removed since the previous build: merges and "
    "splits are where a trainer's labels moved.",
    "cluster-sizes": "Every product right of 1 has copies, and each copy can land in a batch as "
    "a negative for its own product.",
    "vetoes": "Candidate pairs kept apart because an attribute differs (capacity, generation, "
    "model code): the real variants a looser dedupe would merge.",
    "collisions": "Same-product negatives an anchor meets per batch as the batch grows: random "
    "batches (expected) against the order pairsieve wrote (realised); the gap between the "
    "exact-text and product bars is what exact-text dedupe misses.",
    "dropped-reasons": "Why retrieved candidates were not kept as negatives; 'same_product' is "
    "the positive's own product under another listing, which a text-only miner would keep.",
    "scores": "Where positives and negatives score against the query: same-product candidates "
    "score like positives, which makes them the hardest negatives and the wrong ones.",
    "quality": "Precision, recall and F1 of the product ids against the catalog's ground truth, "
    "counted over pairs of listings and per listing (B-cubed).",
    "loss-floor": "The loss a row cannot go below while a copy of its positive sits among its "
    "negatives: it grows as the temperature falls.",
    "gradient-share": "The share of the push on negatives that goes to same-product candidates: "
    "at low temperature a few of them take most of it.",
    "worked-example": "The two-row example: a copy of row 2's positive among its negatives lifts "
    "its loss, and the lift grows as the temperature falls.",
    "calibration": "Where the bars of a catalog stand at the height of the first series, "
    "p_same meant what it said there; the gap is the calibration error of that catalog.",
    "clean-before-after": "The same audit on the dataset as given and as repaired: what is left "
    "after is what the judgement could not tell from another product.",
    "false-negative-rate": "Exact copies are what a text-level check finds; same-product "
    "negatives are what the trainer actually meets, counted by clusters and estimated from "
    "each pair's probability.",
    "experiment-recall@10": "Held-out recall@10 of each arm at each temperature, mean over "
    "seeds: the share of a query's product listings found in its top 10.",
    "experiment-ndcg@10": "Held-out nDCG@10 of each arm at each temperature: like recall, but a "
    "relevant listing counts more the higher it ranks.",
    "experiment-mrr@10": "Held-out MRR@10 of each arm at each temperature: how high the first "
    "listing of the query's product ranks.",
}


def display_name(key: str) -> str:
    """The reader's name of ``key`` (the key itself for one no label names)."""
    return DISPLAY_NAMES.get(key, (key, "text"))[0]


def _number(value: float) -> str:
    """Three significant digits, never in exponent notation."""
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:,.{digits}f}"


def value_text(key: str, value: Any) -> str:
    """``value`` written for the reader by the kind of ``key``, HTML-escaped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    kind = DISPLAY_NAMES.get(key, (key, "text"))[1]
    if isinstance(value, bool) or kind == "flag":
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)) and len(value) == 2:  # an interval (lo, hi)
        return f"{value_text(key, value[0])} – {value_text(key, value[1])}"
    if isinstance(value, (int, float)):
        if kind == "share":
            return f"{_number(100 * value)}%"
        if kind in ("score", "nats"):
            return f"{value:.3f}"
        if kind == "count" or isinstance(value, int):
            return f"{round(value):,}"
        return _number(value)
    return html.escape(str(value))
