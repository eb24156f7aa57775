"""pairsieve's clustering against ground truth, beside the baselines a team would try first
(exact titles, connected components of the MinHash or embedding candidates), all scored by
`datasets.scoring`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.scoring import Scores, score
from pairsieve.errors import PairsieveError

if TYPE_CHECKING:
    from pairsieve.vectors.embed import Encoder


BASELINES = {
    "exact_title": None,
    "minhash_components": "minhash",
    "embedding_components": "embedding",
}


def compare(
    cfg: PairsieveConfig,
    catalog: pl.DataFrame,
    truth_column: str,
    encoder: Encoder | None = None,
    source_column: str | None = None,
    labels: tuple[Path, ...] = (),
) -> dict[str, Scores]:
    """Scores of pairsieve and of the baselines on one catalog, all from the same candidates;
    with ``source_column`` (the shop of each listing) pairwise figures count cross-shop pairs,
    and with ``labels`` pairsieve's clustering is tuned to their answers (`cluster.labelled`).

    Baselines: exact normalised title; connected components over MinHash LSH
    candidates; connected components over embedding kNN candidates. The clusterer never sees
    ``truth_column``: it is dropped before clustering.

    Raises:
        PairsieveError: ``missing_column`` when the truth or source column is absent.
    """
    from pairsieve.cluster.neighbours import scratch_mapper
    from pairsieve.cluster.stage import Extras, cluster_listings

    for column, knob in ((truth_column, "--truth-column"), (source_column, "--source-column")):
        if column is not None and column not in catalog.columns:
            raise PairsieveError(
                "missing_column", f"{knob} names no catalog column", column=column, knob=knob
            )
    ids = catalog[S.LISTING_ID].cast(pl.String).to_list()
    truth_by_id = dict(zip(ids, catalog[truth_column].cast(pl.String).to_list(), strict=True))
    with scratch_mapper() as mapper:
        hidden = catalog.drop(truth_column)
        extras = Extras(encoder=encoder, label_files=labels)
        result = cluster_listings(cfg, hidden, mapper, extras)
    order = result.frame[S.LISTING_ID].to_list()
    truth = [truth_by_id[x] for x in order]
    source = None
    if source_column is not None:
        source_by_id = dict(zip(ids, catalog[source_column].cast(pl.String).to_list(), strict=True))
        source = [source_by_id[x] for x in order]
    scores = {"pairsieve": score(result.listing_labels(), truth, source)}
    for name, signal in BASELINES.items():
        if signal == "embedding" and not cfg.cluster.use_embeddings:
            continue
        scores[name] = score(result.components(signal), truth, source)
    return scores
