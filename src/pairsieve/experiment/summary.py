"""results.json from the runs' per-query scores: means per arm and τ, paired differences, and
how many training negatives were copies of the positive's product."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.experiment import arms as A
from pairsieve.experiment import retrieval
from pairsieve.experiment.compare import paired_difference
from pairsieve.experiment.data import RELEVANT, ExperimentData
from pairsieve.experiment.settings import Settings

RESULTS_VERSION = 1
# Which differences results.json states, (arm, baseline), when both were run.
COMPARISONS = (
    ("pairsieve", "naive"),
    ("pairsieve", "st-best"),
    ("cleaned", "naive"),
    ("cleaned", "st-best"),
    ("pairsieve", "cleaned"),
    ("oracle", "pairsieve"),
    ("pairsieve-queue", "pairsieve"),
    ("pairsieve-guided", "pairsieve"),
    ("pairsieve-guided", "st-best"),
    ("pairsieve-contrast", "pairsieve"),
    ("pairsieve-contrast", "st-best"),
    ("pairsieve-gist", "pairsieve"),
    ("pairsieve-gist", "st-best"),
    ("pairsieve-contrast-guided", "pairsieve-contrast"),
    ("pairsieve-contrast-guided", "st-best"),
    ("shards-stock", "naive"),
    ("pairsieve", "shards-stock"),
    ("st-best", "naive"),
    ("naive", "zero-shot"),
    ("pairsieve", "zero-shot"),
)


def _mined_false_negative_share(mined: pl.DataFrame, data: ExperimentData, k: int) -> float | None:
    """Share of mined negatives whose title is a listing of the positive's product (products
    as `data.relevance` says): what the miner told the model were different."""
    if mined.is_empty():
        return None
    products = data.corpus.group_by(S.TITLE).agg(pl.col(RELEVANT).drop_nulls().alias("products"))
    by_title = dict(products.iter_rows())
    false = total = 0
    for row in mined.select(S.POSITIVE, *A.text_columns(k)[2:]).iter_rows():
        positive = set(by_title.get(row[0], ()))
        for negative in row[1:]:
            false += bool(positive & set(by_title.get(negative, ())))
            total += 1
    return false / total


def _shard_false_negative_share(data: ExperimentData, k: int) -> float:
    """Share of the shards' first k negatives that are listings of the positive's product."""
    product = dict(data.corpus.select(S.LISTING_ID, RELEVANT).iter_rows())
    false = total = 0
    for positive, negatives in data.train.select(
        S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_IDS
    ).iter_rows():
        mine = product.get(positive)
        for negative in negatives[:k]:
            false += mine is not None and product.get(negative) == mine
            total += 1
    return false / max(total, 1)


def _matrix(runs: dict, arm: str, tau, metric: str) -> np.ndarray | None:
    """(seeds, queries) scores of one arm at τ (zero-shot: its one row at any τ)."""
    found = [
        s[metric].to_numpy()
        for (a, t, _), (s, _) in sorted(runs.items(), key=str)
        if a == arm and (t == tau or a == "zero-shot")
    ]
    return np.vstack(found) if found else None


def _run_table(runs: dict) -> list[dict[str, Any]]:
    """One row per run: its mean metrics and training facts."""
    return [
        {
            "arm": arm,
            "tau": tau,
            "seed": seed,
            **{m: round(float(scores[m].mean()), 5) for m in retrieval.METRICS},
            **{k: v for k, v in info.items() if k not in ("arm", "tau", "seed")},
        }
        for (arm, tau, seed), (scores, info) in sorted(runs.items(), key=str)
    ]


def _arm_means(table: list[dict[str, Any]], settings: Settings) -> list[dict[str, Any]]:
    """Mean metrics per (arm, τ) over seeds, and where a learned τ ended."""
    arms = []
    for arm in settings.arms:
        for tau in [None] if arm == "zero-shot" else settings.taus:
            rows = [r for r in table if r["arm"] == arm and r["tau"] == tau]
            if not rows:
                continue
            summary = {"arm": arm, "tau": tau, "seeds": len(rows)}
            summary.update(
                {m: round(float(np.mean([r[m] for r in rows])), 5) for m in retrieval.METRICS}
            )
            if tau == A.LEARNED:
                summary["learned_tau"] = [r["tau_trace"][-1] for r in rows if r["tau_trace"]]
            arms.append(summary)
    return arms


def _comparisons(runs: dict, settings: Settings) -> list[dict[str, Any]]:
    """Paired bootstrap differences for each pair of `COMPARISONS` that both ran at a τ."""
    found = []
    for arm, baseline in COMPARISONS:
        for tau in settings.taus:
            for metric in retrieval.METRICS:
                a, b = _matrix(runs, arm, tau, metric), _matrix(runs, baseline, tau, metric)
                if a is None or b is None or (a.shape[0] != b.shape[0] and b.shape[0] != 1):
                    continue
                difference, (lo, hi) = paired_difference(a, b)
                found.append(
                    {
                        "arm": arm,
                        "baseline": baseline,
                        "tau": tau,
                        "metric": metric,
                        "difference": round(difference, 5),
                        "ci": [round(lo, 5), round(hi, 5)],
                    }
                )
    return found


def summarise(
    runs: dict, settings: Settings, data: ExperimentData, mined: dict[str, Any]
) -> dict[str, Any]:
    """results.json: the settings, each arm's mean metrics per τ, and paired differences."""
    shares = {"pairsieve": _shard_false_negative_share(data, settings.negatives)}
    for arm, frame in mined.items():
        shares[arm] = _mined_false_negative_share(frame, data, settings.negatives)
    table = _run_table(runs)
    return {
        "version": RESULTS_VERSION,
        "relevance": data.relevance,
        "settings": {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(settings).items()
        },
        "corpus_listings": data.corpus.height,
        "queries": data.queries[S.QUERY].n_unique(),
        "train_rows": data.train.height,
        "negatives_of_the_positive_product": {
            arm: None if share is None else round(share, 5) for arm, share in shares.items()
        },
        "arms": _arm_means(table, settings),
        "comparisons": _comparisons(runs, settings),
        "runs": table,
    }
