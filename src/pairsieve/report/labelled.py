"""What a user's labels say about a build's product ids: the precision of the candidate pairs
pairsieve merged and the share of true candidate pairs it merged, each with a 95% interval.

Without labels these would be the model's own guesses (mean ``p_same``); with a few hundred
answers drawn by `pairsieve label sample --run`, the difference estimators of
`pairsieve.labels.estimate` correct them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from pairsieve.core.contract import load_result
from pairsieve.core.facts import ClusterFacts
from pairsieve.core.layout import RunLayout
from pairsieve.labels.estimate import Estimate, labelled_ratio, share_from_labels
from pairsieve.labels.pairs import GROUP, LINKED, candidate_pairs
from pairsieve.labels.store import answered

NOTE = (
    "Estimated from the answered labels: the model's p_same corrected by the labelled residuals "
    "in each p_same stratum. Candidate recall counts the true pairs among the judged candidate "
    "pairs; true pairs that no signal proposed are not in it."
)


def estimates(population: pl.DataFrame, answers: pl.DataFrame) -> tuple[Estimate, Estimate, int]:
    """(merged-pair precision, candidate recall, answers matched) of a build's judged candidate
    pairs (`labels.pairs.candidate_pairs`) from answered labels (``pair_id``, ``label``); the
    sample was split by `sample.build_groups`, so both estimators are too."""
    precision, _ = share_from_labels(population.filter(population[LINKED]), answers, by=GROUP)
    hit = population.join(answers.select("pair_id", "label"), on="pair_id", how="inner")
    recall = labelled_ratio(
        population["p_same"].to_numpy(),
        population[LINKED].to_numpy(),
        hit["p_same"].to_numpy(),
        hit[LINKED].to_numpy(),
        hit["label"].to_numpy(),
        (population[GROUP].to_numpy(), hit[GROUP].to_numpy()),
    )
    return precision, recall, hit.height


def _tuning(run_dir: Path) -> dict[str, Any]:
    """What the labels chose for the clustering (the cluster stage's record): the pair model
    that judged ("refit" when refitted to the labels) and the vetoes they lifted."""
    cluster = load_result(RunLayout(run_dir).stage_dir("cluster"))
    chosen = {} if cluster is None else ClusterFacts.of(cluster).labels_chosen
    if not chosen:
        return {}
    lifted = ", ".join(chosen["lifted_vetoes"]) or "none"
    return {"pair_model": chosen["pair_model"], "lifted_vetoes": lifted}


def label_figures(run_dir: Path, files: tuple[Path, ...]) -> dict[str, Any]:
    """Figures for the report's duplicates section from the answered labels in ``files``."""
    answers = answered(list(files))
    precision, recall, used = estimates(candidate_pairs(run_dir), answers)
    return {
        **_tuning(run_dir),
        "merged_pair_precision": precision.value,
        "merged_pair_precision_ci": list(precision.interval),
        "candidate_recall": recall.value,
        "candidate_recall_ci": list(recall.interval),
        "labels_used": used,
        "labels_not_in_this_build": answers.height - used,
    }
