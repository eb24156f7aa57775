"""pairsieve from Python, in the trainer's idiom: `build`, `audit` and `clean` take paths, polars
frames or `datasets.Dataset`s and return typed results, running the same Prefect flows as the CLI
and writing the same folders.

    import pairsieve
    result = pairsieve.audit(train_dataset, out="audit", catalog=catalog_frame)
    result.false_negative_rate, result.interval   # the share of negatives that are copies
    cleaned = pairsieve.clean(train_dataset, catalog_frame)  # a datasets.Dataset, `label` added
    build = pairsieve.build(clicks="logs/", catalog="catalog.parquet", out="runs/today")
    build.train_dataset()                         # a datasets.Dataset with product-id labels
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve.config import load_config
from pairsieve.core.layout import RunLayout
from pairsieve.errors import PairsieveError

Table = str | Path | pl.DataFrame | Any  # a path, a polars frame or a datasets.Dataset


@dataclass(frozen=True)
class BuildResult:
    """A published build: its folder, each stage's accounting, and its outputs as frames."""

    out: Path
    stages: dict[str, Any]

    @property
    def report(self) -> dict[str, Any]:
        return json.loads((RunLayout(self.out).report / "report.json").read_text())

    def products(self) -> pl.DataFrame:
        """Every listing's product id (cluster/products.parquet)."""
        return pl.read_parquet(self.out / "cluster" / "products.parquet")

    def train_dataset(self):
        """The training shards as one `datasets.Dataset` (anchor, positive, negative_1..k, label):
        ready for `SentenceTransformerTrainer` with `ProductDisjointBatchSampler` and
        `MaskedMultipleNegativesRankingLoss`."""
        from datasets import Dataset

        files = sorted((self.out / "shards").glob("train-*.parquet"))
        return Dataset(pl.concat([pl.read_parquet(f) for f in files]).to_arrow())

    def to_html(self) -> str:
        return (RunLayout(self.out).report / "report.html").read_text(encoding="utf-8")


@dataclass(frozen=True)
class AuditResult:
    """What an audit found: the share of negatives that are their positive's product, its 95%
    interval (the calibrated `p_same`'s, or the labels' when label files were given; None when
    there is none), and the whole report."""

    out: Path
    false_negative_rate: float
    interval: tuple[float, float] | None
    report: dict[str, Any]

    def to_html(self) -> str:
        return (self.out / "report.html").read_text(encoding="utf-8")


def _as_path(table: Table, name: str, scratch: Path) -> str:
    """A path for ``table``: paths as they are, frames and Datasets written to ``scratch``."""
    if isinstance(table, str | Path):
        return str(table)
    if isinstance(table, pl.DataFrame):
        frame = table
    elif hasattr(table, "data") and hasattr(table.data, "table"):  # a datasets.Dataset
        frame = pl.from_arrow(table.data.table)
    else:
        raise PairsieveError(
            "bad_argument", f"{name} must be a path, a polars DataFrame or a datasets.Dataset"
        )
    path = scratch / f"{name}.parquet"
    frame.write_parquet(path)
    return str(path)


def _dataset_paths(dataset: Table, catalog: Table | None, scratch: Path) -> tuple[str, str | None]:
    """(dataset, catalog) as paths (`_as_path`; no catalog stays None)."""
    catalog_path = _as_path(catalog, "catalog", scratch) if catalog is not None else None
    return _as_path(dataset, "dataset", scratch), catalog_path


def build(
    clicks: Table,
    catalog: Table,
    out: str | Path,
    config: str | Path | None = None,
    **settings: Any,
) -> BuildResult:
    """`pairsieve build` from Python; ``settings`` are dotted keys as in ``--set``
    (``build(..., **{"mine.num_negatives": 4})``)."""
    from pairsieve.orchestration import preflight
    from pairsieve.orchestration.flows import build as build_flow

    cfg = load_config(Path(config) if config else None, settings)
    with tempfile.TemporaryDirectory(prefix="pairsieve-inputs-") as scratch:
        inputs = [
            _as_path(t, n, Path(scratch)) for t, n in ((clicks, "clicks"), (catalog, "catalog"))
        ]
        preflight.check(cfg, Path(out), inputs)
        stages = build_flow(inputs[0], inputs[1], str(out), config=cfg.model_dump(mode="json"))
    return BuildResult(Path(out), stages)


def audit(
    dataset: Table,
    out: str | Path,
    catalog: Table | None = None,
    labels: list[str | Path] | None = None,
    config: str | Path | None = None,
    **settings: Any,
) -> AuditResult:
    """`pairsieve audit` from Python: the false negatives of a dataset mined elsewhere (its
    sentence-transformers columns or FlagEmbedding's), against ``catalog`` when given."""
    from pairsieve.orchestration.flows import audit as audit_flow
    from pairsieve.orchestration.flows import run_checked

    cfg = load_config(Path(config) if config else None, settings)
    with tempfile.TemporaryDirectory(prefix="pairsieve-inputs-") as scratch:
        data_path, catalog_path = _dataset_paths(dataset, catalog, Path(scratch))
        run_checked(audit_flow, cfg, data_path, out, catalog_path, labels)
    report = json.loads((Path(out) / "report.json").read_text())
    interval = report["audit"]["figures"].get("false_negative_rate_ci")
    return AuditResult(
        Path(out),
        float(report["false_negative_rate"]),
        tuple(interval) if interval else None,
        report,
    )


def clean(
    dataset: Table,
    catalog: Table | None = None,
    out: str | Path | None = None,
    labels: list[str | Path] | None = None,
    config: str | Path | None = None,
    **settings: Any,
):
    """`pairsieve clean` from Python: ``dataset`` with each negative that is its positive's
    product replaced by a safe hard negative from ``catalog``, as a `datasets.Dataset` with the
    product ids in `label` (for a sentence-transformers layout), ready for
    `SentenceTransformerTrainer` with `MaskedMultipleNegativesRankingLoss` and
    `ProductDisjointBatchSampler`. With ``out``, the folder keeps the repaired files and the
    report (the audit before and after); without it they are written to a temporary folder."""
    from datasets import Dataset

    from pairsieve.audits.dataset import dataset_files, read_file
    from pairsieve.orchestration.flows import clean as clean_flow
    from pairsieve.orchestration.flows import run_checked

    cfg = load_config(Path(config) if config else None, settings)
    with tempfile.TemporaryDirectory(prefix="pairsieve-inputs-") as scratch:
        data_path, catalog_path = _dataset_paths(dataset, catalog, Path(scratch))
        folder = Path(out) if out is not None else Path(scratch) / "clean"
        run_checked(clean_flow, cfg, data_path, folder, catalog_path, labels)
        frames = [read_file(f) for f in dataset_files(folder / "dataset")]
        return Dataset(pl.concat(frames, how="diagonal_relaxed").to_arrow())
