"""The report's advice: what to change in training, each line naming the figure it rests on.

The thresholds are stated in the text each recommendation prints, so a reader can disagree with
the rule and still use the numbers.
"""

from __future__ import annotations

from typing import Any

from pairsieve.config import PairsieveConfig
from pairsieve.report import sections as R
from pairsieve.report.wording import display_name, value_text

MAX_FN_PER_ANCHOR = 0.01  # above this many same-product candidates per anchor, mask or reorder
MIN_P_CLEAN = 0.95  # below this share of clean random batches, mask or reorder
SAFE_FN_PER_ANCHOR = 0.1  # largest unmasked batch keeps expected false negatives below this


def _batch_recommendations(cfg: PairsieveConfig, batches: dict[str, Any]) -> list[dict[str, str]]:
    """Whether to mask or reorder at the training batch, the largest safe unmasked batch, and
    what exact-text deduplication would catch."""
    from pairsieve.report import impact

    figures = batches["figures"]
    kappa, b0 = figures["kappa_product"], cfg.shards.batch_size
    fn = impact.expected_false_negatives(b0, kappa)
    recs = [
        _masking(b0, fn, figures["p_batch_clean_at_training_batch"]),
        _largest_unmasked_batch(batches["tables"]["product level"]),
    ]
    if kappa > 0:
        recs.append(_text_dedupe(figures["share_missed_by_text_dedupe"]))
    return recs


def _masking(batch_size: int, fn: float, p_clean: float | None) -> dict[str, str]:
    if fn >= MAX_FN_PER_ANCHOR or (p_clean is not None and p_clean < MIN_P_CLEAN):
        return {
            "recommendation": f"Mask or reorder: a random batch of {batch_size} holds {fn:.3f} "
            f"same-product candidates per anchor and is clean with probability "
            f"{value_text('p_batch_clean', p_clean)} (thresholds {MAX_FN_PER_ANCHOR} and "
            f"{value_text('p_batch_clean', MIN_P_CLEAN)}); "
            "train on product-disjoint shards or with the masked loss.",
            "rests_on": "In-batch false negatives: product-level κ table / chart-collisions",
        }
    return {
        "recommendation": f"Masking is optional at batch size {batch_size}: {fn:.4f} "
        f"same-product candidates per anchor (< {MAX_FN_PER_ANCHOR}), P(clean batch) "
        f"{value_text('p_batch_clean', p_clean)} "
        f"(≥ {value_text('p_batch_clean', MIN_P_CLEAN)}).",
        "rests_on": "In-batch false negatives: product-level κ table",
    }


def _largest_unmasked_batch(product_level: list[dict[str, Any]]) -> dict[str, str]:
    safe = [
        r["batch_size"]
        for r in product_level
        if r["false_negatives_per_anchor"] is not None
        and r["false_negatives_per_anchor"] < SAFE_FN_PER_ANCHOR
    ]
    return {
        "recommendation": (
            f"Without product-aware batching keep batches ≤ {max(safe)} (expected false "
            f"negatives per anchor < {SAFE_FN_PER_ANCHOR}); with it, batch size is free."
            if safe
            else f"Every batch size in the table exceeds {SAFE_FN_PER_ANCHOR} expected "
            "false negatives per anchor: product-aware batching is required."
        ),
        "rests_on": "In-batch false negatives: product-level κ table / chart-collisions",
    }


def _text_dedupe(missed: float) -> dict[str, str]:
    return {
        "recommendation": f"Exact-text deduplication (NoDuplicatesBatchSampler) misses "
        f"{missed:.0%} of same-product collisions; it is not enough on this data."
        if missed > 0.5
        else f"Exact-text deduplication already removes {1 - missed:.0%} of "
        "same-product collisions.",
        "rests_on": "In-batch false negatives: κ exact-text vs product level",
    }


def _temperature_recommendation(temperature: dict[str, Any], max_share: float) -> dict[str, str]:
    data = temperature["tables"]["on this data"]
    ok = [r["tau"] for r in data if r["false_negative_gradient_share"] <= max_share]
    worst = min(data, key=lambda r: r["tau"])
    if not data or not worst["rows_with_false_negative"]:
        text = "No same-product candidates were scored; temperature is not limited by duplicates."
    elif ok:
        text = (
            f"If same-product candidates reach the loss, keep τ ≥ {min(ok)}: below it they own "
            f"more than {max_share:.0%} of the push on negatives (at τ={worst['tau']}: "
            f"{worst['false_negative_gradient_share']:.0%}, loss floor "
            f"{worst['mean_loss_floor']:.3f}). With them removed, 0.05–0.1 is the usual range."
        )
    else:
        text = (
            f"At every τ tried, same-product candidates own more than {max_share:.0%} of "
            "the negative gradient: remove them (product-aware mining and batching) before "
            "tuning τ."
        )
    return {
        "recommendation": text,
        "rests_on": "Temperature: table 'on this data' / chart-gradient-share",
    }


def recommendations_section(cfg: PairsieveConfig, report: dict[str, Any]) -> dict[str, Any]:
    """Advice derived from the numbers, each naming the figure it rests on."""
    recs = []
    if report.get("batches"):
        recs += _batch_recommendations(cfg, report["batches"])
    if report.get("temperature"):
        recs.append(
            _temperature_recommendation(report["temperature"], cfg.report.max_gradient_share)
        )
    hard = report.get("hard_negatives")
    share = hard["figures"].get("same_product_share_of_eligible") if hard else None
    if share:
        recs.append(
            {
                "recommendation": f"Mine with product exclusion: {share:.1%} of the candidates a "
                "product-blind miner could keep were the positive's own product.",
                "rests_on": f"Hard negatives: {display_name('same_product_share_of_eligible')}",
            }
        )
    rate = report.get("false_negative_rate")
    if rate is not None:
        recs.append(
            {
                "recommendation": f"{rate:.1%} of this dataset's negatives are its positive's "
                "product"
                + ("; re-mine them with pairsieve (product exclusion)." if rate > 0.01 else "."),
                "rests_on": f"Audit: {display_name('false_negative_rate')}",
            }
        )
    return R.section("Recommendations", tables={"recommendations": recs})
