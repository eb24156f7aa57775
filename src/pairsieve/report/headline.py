"""The report's first block: the answer a reader came for, in plain words, built from the other
sections' own figures so the two can never disagree."""

from __future__ import annotations

from typing import Any

from pairsieve.report.sections import section

# The headline's temperature: 1 / 20, the scale of sentence-transformers' stock in-batch loss.
HEADLINE_TAU = 0.05


def headline_section(report: dict[str, Any]) -> dict[str, Any] | None:
    """The answer a reader came for, in plain words, from the sections' own figures: how many
    same-product negatives a trainer would have met in random batches and among mined
    negatives, that pairsieve removed them, and what they cost at τ = `HEADLINE_TAU`."""
    batches, hard, temp = (report.get(k) for k in ("batches", "hard_negatives", "temperature"))
    lead, figures = [], {}
    if batches:
        size = batches["figures"]["training_batch_size"]
        per_anchor = batches["figures"]["false_negatives_per_anchor_at_training_batch"]
        figures["same_product_negatives_per_anchor"] = per_anchor
        lead.append(
            f"A trainer drawing random batches of {size} from these pairs would have met "
            f"{per_anchor:.2f} same-product negatives per anchor."
        )
    if hard:
        share = hard["figures"]["same_product_share_of_eligible"]
        figures["same_product_share_of_mined"] = share
        lead.append(f"Among mined negatives, {share:.1%} were the positive's own product.")
    if lead:
        lead.append("pairsieve removed both.")
    rows = (temp or {}).get("tables", {}).get("on this data", [])
    at_tau = [r for r in rows if r["tau"] == HEADLINE_TAU]
    if at_tau:
        owned = at_tau[0]["false_negative_gradient_share"]
        figures["gradient_share_at_headline_tau"] = owned
        lead.append(
            f"At τ = {HEADLINE_TAU:g} they would have owned {owned:.0%} of the gradient on "
            "negatives of the rows that met one."
        )
    return section("In short", figures=figures, lead=lead) if lead else None
