"""What `pairsieve eval` and `pairsieve mine-eval` put together from the stages: the catalog to
measure, read as ingest reads it or loaded by benchmark name, its scores as a table, and the
mining comparison run on pairsieve's own clustering of that catalog (`mine.evaluate`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.datasets.scoring import Scores
from pairsieve.errors import PairsieveError

if TYPE_CHECKING:
    from rich.table import Table

    from pairsieve.vectors.embed import Encoder

_SCORE_COLUMNS = {
    "pairwise_precision": "pair P",
    "pairwise_recall": "pair R",
    "pairwise_f1": "pair F1",
    "bcubed_precision": "B3 P",
    "bcubed_recall": "B3 R",
    "bcubed_f1": "B3 F1",
    "clusters": "clusters",
    "largest_cluster": "largest",
}


def load_eval_catalog(
    cfg: PairsieveConfig, catalog: Path | None, dataset: str | None, data_root: Path | None
) -> pl.DataFrame:
    """The catalog to evaluate: a file (``--catalog``) or a named benchmark (``--dataset``).

    Raises:
        PairsieveError: ``bad_argument`` unless exactly one of the two is given or the data set
            name is unknown; file errors from the readers.
    """
    if (catalog is None) == (dataset is None):
        raise PairsieveError("bad_argument", "give exactly one of --catalog or --dataset")
    if catalog is not None:
        from pairsieve.ingest.catalog import read_catalog

        return read_catalog(str(catalog), cfg.ingest)
    if data_root is None:
        raise PairsieveError(
            "bad_argument", f"--dataset {dataset} needs --data-root (or PAIRSIEVE_DATA_ROOT)"
        )
    from pairsieve.datasets.benchmarks import benchmark

    return benchmark(dataset).load(data_root)


def scores_table(scores: dict[str, Scores], title: str) -> Table:
    """One row per method (pairsieve, then the baselines), one column per figure."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("method", no_wrap=True)
    for header in _SCORE_COLUMNS.values():
        table.add_column(header, justify="right", no_wrap=True)
    for method, figures in scores.items():
        table.add_row(method, *(str(getattr(figures, f)) for f in _SCORE_COLUMNS))
    return table


def mine_eval(
    cfg: PairsieveConfig,
    catalog: pl.DataFrame,
    out_dir: Path,
    encoder: Encoder | None = None,
    truth_column: str = S.TRUE_PRODUCT_ID,
) -> dict[str, Any]:
    """Derive a click log from the labelled catalog (`datasets.clicklog.derive_clicks`, seeded
    by ``cfg.seed``), cluster the catalog (titles only; truth hidden), compare the mining
    variants (`mine.evaluate`), and write ``out_dir/mine_eval.json`` (plus the clusters under
    ``out_dir/cluster/``).

    Raises:
        PairsieveError: ``missing_column`` when the catalog lacks ``truth_column``.
    """
    from pairsieve.cluster import stage as cluster
    from pairsieve.datasets.clicklog import derive_clicks
    from pairsieve.mine import evaluate
    from pairsieve.vectors.embed import load_encoder

    if truth_column not in catalog.columns:
        raise PairsieveError(
            "missing_column",
            "catalog has no ground-truth column",
            column=truth_column,
            knob="--truth-column",
        )
    encoder = encoder or load_encoder(cfg.embed, cfg.cache_dir)
    clicks = derive_clicks(catalog, truth_column, seed=cfg.seed)
    listings = cluster.Inputs(catalog.select(S.LISTING_ID, S.TITLE))
    cluster.run(cfg, listings, Path(out_dir) / "cluster", encoder=encoder)
    clusters = pl.read_parquet(Path(out_dir) / "cluster" / S.PRODUCTS_FILE)
    truth = catalog.select(S.LISTING_ID, S.TITLE, pl.col(truth_column).alias(S.TRUE_PRODUCT_ID))
    result = evaluate.evaluate(cfg, truth, clicks, clusters, encoder)
    result["click_log"] = {"rows": clicks.height, "seed": cfg.seed}
    io.write_json(result, Path(out_dir) / "mine_eval.json")
    return result
