"""One function per stage that runs it resumably inside a build folder, without Prefect.

Each step knows which upstream stages and which config sections its output depends on, so a
re-run skips a stage exactly when neither changed (`stage.run_stage`). The Prefect tasks in
`pairsieve.orchestration.flows` wrap these functions and nothing else.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pairsieve import schemas as S
from pairsieve.cluster.reuse import PreviousClustering
from pairsieve.config import PairsieveConfig
from pairsieve.core.contract import StageResult, load_result, run_stage, stage_fingerprint
from pairsieve.mine.reuse import PreviousMining
from pairsieve.vectors.embed import Encoder, shared_encoder

# Config sections whose values change a stage's output (plus everything upstream of it).
STAGE_SECTIONS: dict[str, tuple[str, ...]] = {
    "ingest": ("ingest",),
    "cluster": ("embed", "knn", "cluster", "seed"),
    "mine": ("embed", "knn", "mine", "seed"),
    "shards": ("shards", "mine", "seed"),
    "report": ("report", "seed"),
    "audit": ("embed", "knn", "cluster", "report", "seed"),
}
UPSTREAM: dict[str, tuple[str, ...]] = {
    "ingest": (),
    "cluster": ("ingest",),
    "mine": ("ingest", "cluster"),
    "shards": ("ingest", "cluster", "mine"),
    "report": ("ingest", "cluster", "mine", "shards"),
}


def section_hash(cfg: PairsieveConfig, stage: str) -> str:
    """Hash of the config sections a stage depends on (so report knobs never re-run clustering)."""
    dumped = cfg.model_dump(mode="json")
    relevant = {key: dumped[key] for key in STAGE_SECTIONS[stage]}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def _encoder(cfg: PairsieveConfig) -> Encoder:
    """The process-wide encoder of ``cfg`` (loaded once; cluster, mine and audit share it)."""
    return shared_encoder(cfg.embed, cfg.cache_dir)


# Where each stage's main artifact lives in a build folder.
_ARTIFACTS = {
    "clicks": ("ingest", S.CLICKS_FILE),
    "listings": ("ingest", S.LISTINGS_FILE),
    "products": ("cluster", S.PRODUCTS_FILE),
    "negatives": ("mine", S.NEGATIVES_FILE),
}


def _artifacts(run_dir: Path, *names: str) -> list[Path]:
    return [Path(run_dir).joinpath(*_ARTIFACTS[name]) for name in names]


def ingest_step(
    cfg: PairsieveConfig, clicks: list[str], catalog: list[str], run_dir: Path
) -> StageResult:
    """Validate and normalise the inputs into `run_dir/ingest/`."""
    from pairsieve.ingest import stage as ingest

    fingerprint = ingest.input_fingerprint(clicks, catalog)
    return run_stage(
        "ingest",
        run_dir,
        section_hash(cfg, "ingest"),
        fingerprint,
        lambda tmp: ingest.run(cfg, clicks, catalog, tmp),
    )


EMBED_PLAN_DIR = "embed-partitions"  # scratch inside the staging folder, removed once embedded


def embedding_partitions(cfg: PairsieveConfig, run_dir: Path) -> list[str]:
    """Files of the texts that cluster and mine will embed (titles, queries) and the cache lacks.

    Mapping `embed.embed_partition` over these paths on the configured task runner fills the
    shared cache in parallel (threads, or Dask/Ray workers); the stages then find every vector
    cached. The texts stay on disk: only paths go through Prefect.
    """
    import polars as pl

    from pairsieve.vectors.embed import cache_for, plan_partitions, write_partitions

    listings, clicks = _artifacts(run_dir, "listings", "clicks")
    titles = pl.read_parquet(listings, columns=[S.TITLE])
    queries = pl.read_parquet(clicks, columns=[S.QUERY])
    texts = pl.concat([titles[S.TITLE], queries[S.QUERY]])
    partitions = plan_partitions(texts, cache_for(cfg), cfg.embed.partition_size)
    return write_partitions(partitions, Path(run_dir) / EMBED_PLAN_DIR)


def clear_embedding_partitions(run_dir: Path) -> None:
    """Remove the partition files once the cache holds their vectors (they are never published)."""
    import shutil

    shutil.rmtree(Path(run_dir) / EMBED_PLAN_DIR, ignore_errors=True)


def _with_lineage(result: StageResult, tmp: Path, previous: Path | None) -> StageResult:
    """Carry product ids over from the previous build (see `lineage`), recording the changes."""
    import polars as pl

    from pairsieve.cluster import lineage
    from pairsieve.core import io

    products = pl.read_parquet(tmp / S.PRODUCTS_FILE)
    build_number = 0
    if previous is None:
        products, changes = lineage.first_build(products), lineage.empty_changes()
    else:
        before = pl.read_parquet(previous / "cluster" / S.PRODUCTS_FILE)
        if lineage.FIRST_SEEN not in before.columns:
            before = lineage.first_build(before)
        recorded = load_result(previous / "cluster")
        build_number = (recorded.details.get("build_number", 0) if recorded else 0) + 1
        products, changes = lineage.reconcile(products, before, build_number)
    io.write_parquet(products, tmp / S.PRODUCTS_FILE)
    io.write_parquet(changes, tmp / lineage.ID_CHANGES_FILE)
    counts = dict(sorted(changes[lineage.CHANGE].value_counts().iter_rows()))
    details = {**result.details, "build_number": build_number, "id_changes": counts}
    outputs = {**result.outputs, "id_changes": lineage.ID_CHANGES_FILE}
    return replace(result, details=details, outputs=outputs)


def _previous_state(
    load: Callable[[Path, str], Any], cfg: PairsieveConfig, stage: str, previous: Path | None
) -> tuple[Any, str | None]:
    """(the previous build's state of ``stage`` to reuse, None), or (None, why it is not
    reused: the stage then runs in full). ``load`` is `PreviousClustering.load` or
    `PreviousMining.load`."""
    if previous is None:
        return None, None
    loaded = load(Path(previous), section_hash(cfg, stage))
    return (None, loaded) if isinstance(loaded, str) else (loaded, None)


def cluster_step(cfg: PairsieveConfig, run_dir: Path, previous: Path | None = None) -> StageResult:
    """Cluster ingested listings into products under `run_dir/cluster/`.

    With ``previous`` (the folder of the last published build) product ids carry over from it
    and its verified pairs between unchanged titles are reused (`cluster_reuse`).
    """
    from pairsieve.cluster import stage as cluster
    from pairsieve.core.io import sha256_file

    (listings,) = _artifacts(run_dir, "listings")
    fingerprint = stage_fingerprint(run_dir, list(UPSTREAM["cluster"]))
    if previous is not None:
        previous = Path(previous)
        fingerprint += ":" + sha256_file(previous / "cluster" / S.PRODUCTS_FILE)

    def body(tmp: Path) -> StageResult:
        reuse, why_not = _previous_state(PreviousClustering.load, cfg, "cluster", previous)
        result = cluster.run(cfg, listings, tmp, _encoder(cfg), reuse)
        if previous is not None:
            incremental = {"reused": reuse is not None, "why_not": why_not}
            result = replace(result, details={**result.details, "incremental": incremental})
        return _with_lineage(result, tmp, previous)

    return run_stage("cluster", run_dir, section_hash(cfg, "cluster"), fingerprint, body)


def _run_downstream(
    cfg: PairsieveConfig, run_dir: Path, stage: str, body: Callable[[Path], StageResult]
) -> StageResult:
    """Run a stage whose inputs are its upstream stages' outputs in ``run_dir``."""
    fingerprint = stage_fingerprint(run_dir, list(UPSTREAM[stage]))
    return run_stage(stage, run_dir, section_hash(cfg, stage), fingerprint, body)


def mine_step(cfg: PairsieveConfig, run_dir: Path, previous: Path | None = None) -> StageResult:
    """Mine hard negatives that never share the positive's product into `run_dir/mine/`.

    With ``previous`` (the last published build) unchanged queries keep its negatives
    (`mine_reuse`).
    """
    from pairsieve.core.io import sha256_file
    from pairsieve.mine import stage as mine

    inputs = _artifacts(run_dir, "clicks", "listings", "products")
    fingerprint = stage_fingerprint(run_dir, list(UPSTREAM["mine"]))
    if previous is not None and (Path(previous) / "mine" / S.NEGATIVES_FILE).exists():
        fingerprint += ":" + sha256_file(Path(previous) / "mine" / S.NEGATIVES_FILE)

    def body(tmp: Path) -> StageResult:
        state, why_not = _previous_state(PreviousMining.load, cfg, "mine", previous)
        reuse = None
        if state is not None:
            reuse = (state, load_result(Path(run_dir) / "cluster").details["build_number"])
        result = mine.run(cfg, *inputs, tmp, _encoder(cfg), reuse)
        if why_not is not None:
            result = replace(
                result, details={**result.details, "incremental": {"why_not": why_not}}
            )
        return result

    return run_stage("mine", run_dir, section_hash(cfg, "mine"), fingerprint, body)


def shards_step(cfg: PairsieveConfig, run_dir: Path) -> StageResult:
    """Write product-disjoint, labelled training shards into `run_dir/shards/`."""
    from pairsieve.shards import stage as shards

    inputs = _artifacts(run_dir, "clicks", "listings", "products", "negatives")
    fingerprints = {"inputs": stage_fingerprint(run_dir, list(UPSTREAM["shards"]))}
    return _run_downstream(
        cfg, run_dir, "shards", lambda tmp: shards.run(cfg, *inputs, tmp, fingerprints)
    )


def report_step(cfg: PairsieveConfig, run_dir: Path) -> StageResult:
    """Write the duplicate-impact report into `run_dir/report/`."""
    from pairsieve.report import stage as report

    return _run_downstream(cfg, run_dir, "report", lambda tmp: report.run(cfg, Path(run_dir), tmp))


def audit_step(cfg: PairsieveConfig, dataset: Path, catalog: Path | None, out: Path) -> StageResult:
    """Audit a dataset built elsewhere into the folder ``out`` (published atomically)."""
    from pairsieve.audit import stage as audit
    from pairsieve.core import io

    inputs = [dataset] + ([catalog] if catalog else [])
    digests = sorted(f"{p}:{io.content_digest(p)}" for p in io.resolve_inputs(inputs))
    out = Path(out)
    return run_stage(
        out.name,
        out.parent,
        section_hash(cfg, "audit"),
        io.sha256_text("|".join(digests)),
        lambda tmp: audit.run(
            cfg, Path(dataset), Path(catalog) if catalog else None, tmp, _encoder(cfg)
        ),
    )
