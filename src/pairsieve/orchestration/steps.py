"""One function per stage that runs it resumably inside a build folder, without Prefect.

Which upstream stages and which config sections a stage's output depends on comes from its
declaration (`orchestration.stages`), so a re-run skips a stage exactly when neither changed
(`core.contract.run_stage`); the stage reads its config through a view of just those sections.
The Prefect tasks in `pairsieve.orchestration.flows` wrap these functions and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pairsieve import schemas as S
from pairsieve.cluster.reuse import PreviousClustering
from pairsieve.config import PairsieveConfig
from pairsieve.core.contract import (
    StageResult,
    load_result,
    reasons_text,
    run_stage,
    stage_fingerprint,
)
from pairsieve.core.facts import ClusterFacts
from pairsieve.core.layout import RunLayout
from pairsieve.core.partitions import MapSpans, map_here
from pairsieve.errors import PairsieveError
from pairsieve.mine.reuse import PreviousMining
from pairsieve.orchestration.stages import settings_hash, stage_config, upstream
from pairsieve.vectors.embed import Encoder, shared_encoder


def _encoder(cfg: PairsieveConfig) -> Encoder:
    """The process-wide encoder of ``cfg`` (loaded once; cluster, mine and audit share it)."""
    return shared_encoder(cfg.embed, cfg.cache_dir)


def ingest_step(
    cfg: PairsieveConfig, clicks: list[str], catalog: list[str], run_dir: Path
) -> StageResult:
    """Validate and normalise the inputs into `run_dir/ingest/`."""
    from pairsieve.ingest import stage as ingest

    inputs = ingest.Inputs(clicks, catalog)
    return run_stage(
        "ingest",
        run_dir,
        settings_hash(cfg, "ingest"),
        inputs.fingerprint(),
        lambda tmp: ingest.run(stage_config(cfg, "ingest"), inputs, tmp),
    )


def embedding_partitions(cfg: PairsieveConfig, run_dir: Path) -> list[str]:
    """Files of the texts that cluster and mine will embed (titles, queries) and the cache lacks.

    Mapping `embed.embed_partition` over these paths on the configured task runner fills the
    shared cache in parallel (threads, or Dask/Ray workers); the stages then find every vector
    cached. The texts stay on disk: only paths go through Prefect.
    """
    import polars as pl

    from pairsieve.vectors.embed import cache_for, plan_partitions, write_partitions

    layout = RunLayout(run_dir)
    titles = pl.read_parquet(layout.listings, columns=[S.TITLE])
    queries = pl.read_parquet(layout.clicks, columns=[S.QUERY])
    texts = pl.concat([titles[S.TITLE], queries[S.QUERY]])
    partitions = plan_partitions(texts, cache_for(cfg), cfg.embed.partition_size)
    return write_partitions(partitions, layout.embed_partitions)


def partition_sizes(partitions: list[str]) -> list[int]:
    """Texts in each partition file (from the parquet footers, without reading the texts)."""
    import pyarrow.parquet as pq

    return [pq.read_metadata(path).num_rows for path in partitions]


def clear_embedding_partitions(run_dir: Path) -> None:
    """Remove the partition files once the cache holds their vectors (they are never published)."""
    import shutil

    shutil.rmtree(RunLayout(run_dir).embed_partitions, ignore_errors=True)


def require_rows(result: StageResult, run_dir: Path) -> None:
    """Stop the build when ``result`` left the next stage nothing to work on: no valid click or
    listing after ingest, no kept negative after mining, no training row after sharding.

    Raises:
        PairsieveError: ``nothing_to_build``, saying what was dropped and why, and naming the
            file that lists it (the staging folder keeps it for inspection).
    """
    layout = RunLayout(run_dir)
    where = {  # the file that says why a stage kept nothing
        "ingest": layout.quarantine,
        "mine": layout.negatives_dropped,
        "shards": layout.stage_dir("shards") / S.STAGE_JSON,
    }[result.stage]
    if result.stage == "ingest":
        for table, noun in (("catalog", "catalog rows"), ("clicks", "click rows")):
            counts = result.details[table]
            if counts["rows_out"] == 0:
                raise PairsieveError(
                    "nothing_to_build",
                    f"nothing to build: all {counts['rows_in']} {noun} were quarantined, "
                    f"{reasons_text(counts['dropped_by_reason']) or 'none'}; see the quarantine",
                    file=str(where),
                )
    elif result.rows_out == 0:
        what = {"mine": "negatives kept", "shards": "training rows"}[result.stage]
        raise PairsieveError(
            "nothing_to_build",
            f"nothing to build: no {what} from {result.rows_in} {result.stage} rows in, "
            f"{reasons_text(result.dropped_by_reason) or 'none'}",
            file=str(where),
        )


def _previous_state(
    load: Callable[[Path, str], Any], cfg: PairsieveConfig, stage: str, previous: Path | None
) -> tuple[Any, str | None]:
    """(the previous build's state of ``stage`` to reuse, None), or (None, why it is not
    reused: the stage then runs in full). ``load`` is `PreviousClustering.load` or
    `PreviousMining.load`."""
    if previous is None:
        return None, None
    loaded = load(Path(previous), settings_hash(cfg, stage))
    return (None, loaded) if isinstance(loaded, str) else (loaded, None)


def cluster_step(
    cfg: PairsieveConfig,
    run_dir: Path,
    previous: Path | None = None,
    labels: tuple[Path, ...] = (),
    map_spans: MapSpans = map_here,
) -> StageResult:
    """Cluster ingested listings into products under `run_dir/cluster/`.

    With ``previous`` (the folder of the last published build) product ids carry over from it
    and its judged pairs between unchanged titles are reused (`cluster.reuse`). Answered
    ``labels`` files tune the clustering to this catalog (`cluster.labelled`). ``map_spans``
    runs the partitions of the kNN search and of judging (`cluster.neighbours`,
    `cluster.judge`; default: one after the other in this process).
    """
    from pairsieve.cluster import stage as cluster
    from pairsieve.core import io

    layout = RunLayout(run_dir)
    fingerprint = stage_fingerprint(run_dir, upstream("cluster"))
    if previous is not None:
        previous = Path(previous)
        fingerprint += ":" + io.sha256_file(RunLayout(previous).products)
    fingerprint += "".join(f":{io.content_digest(str(p))}" for p in labels)

    def body(tmp: Path) -> StageResult:
        reuse, why_not = _previous_state(PreviousClustering.load, cfg, "cluster", previous)
        result = cluster.run(
            stage_config(cfg, "cluster"),
            replace(cluster.Inputs.of(layout), labels=tuple(labels), previous_build=previous),
            tmp,
            encoder=_encoder(cfg),
            previous=reuse,
            map_spans=map_spans,
        )
        if previous is not None:
            incremental = {"reused": reuse is not None, "why_not": why_not}
            result = replace(result, details={**result.details, "incremental": incremental})
        return result

    return run_stage("cluster", run_dir, settings_hash(cfg, "cluster"), fingerprint, body)


def _run_downstream(
    cfg: PairsieveConfig, run_dir: Path, stage: str, body: Callable[[Path], StageResult]
) -> StageResult:
    """Run a stage whose inputs are its upstream stages' outputs in ``run_dir``."""
    fingerprint = stage_fingerprint(run_dir, upstream(stage))
    return run_stage(stage, run_dir, settings_hash(cfg, stage), fingerprint, body)


def mine_step(
    cfg: PairsieveConfig,
    run_dir: Path,
    previous: Path | None = None,
    map_spans: MapSpans = map_here,
) -> StageResult:
    """Mine hard negatives that never share the positive's product into `run_dir/mine/`.

    With ``previous`` (the last published build) unchanged queries keep its negatives
    (`mine.reuse`). ``map_spans`` runs the partitions of the queries (`mine.partitions`;
    default: one after the other here).
    """
    from pairsieve.core.io import sha256_file
    from pairsieve.mine import stage as mine

    layout = RunLayout(run_dir)
    fingerprint = stage_fingerprint(run_dir, upstream("mine"))
    before = RunLayout(previous).negatives if previous is not None else None
    if before is not None and before.exists():
        fingerprint += ":" + sha256_file(before)

    def body(tmp: Path) -> StageResult:
        state, why_not = _previous_state(PreviousMining.load, cfg, "mine", previous)
        reuse = None
        if state is not None:
            reuse = (state, ClusterFacts.of(load_result(layout.stage_dir("cluster"))).build_number)
        result = mine.run(
            stage_config(cfg, "mine"),
            mine.Inputs.of(layout),
            tmp,
            encoder=_encoder(cfg),
            previous=reuse,
            map_spans=map_spans,
        )
        if why_not is not None:
            result = replace(
                result, details={**result.details, "incremental": {"why_not": why_not}}
            )
        return result

    return run_stage("mine", run_dir, settings_hash(cfg, "mine"), fingerprint, body)


def shards_step(cfg: PairsieveConfig, run_dir: Path, map_spans: MapSpans = map_here) -> StageResult:
    """Write product-disjoint, labelled training shards into `run_dir/shards/`; ``map_spans``
    runs the placement's partitions of the rows (`shards.placement`; default in this
    process)."""
    from pairsieve.shards import stage as shards

    inputs = shards.Inputs.of(RunLayout(run_dir))
    fingerprints = {"inputs": stage_fingerprint(run_dir, upstream("shards"))}
    return _run_downstream(
        cfg,
        run_dir,
        "shards",
        lambda tmp: shards.run(
            stage_config(cfg, "shards"), inputs, tmp, fingerprints=fingerprints, map_spans=map_spans
        ),
    )


def report_step(cfg: PairsieveConfig, run_dir: Path, labels: tuple[Path, ...] = ()) -> StageResult:
    """Write the duplicate-impact report into `run_dir/report/`, with the estimates the
    answered ``labels`` files correct."""
    from pairsieve.core import io
    from pairsieve.report import stage as report

    layout = RunLayout(run_dir)
    fingerprint = stage_fingerprint(run_dir, upstream("report"))
    fingerprint += "".join(f":{io.content_digest(str(p))}" for p in labels)
    return run_stage(
        "report",
        run_dir,
        settings_hash(cfg, "report"),
        fingerprint,
        lambda tmp: report.run(stage_config(cfg, "report"), layout, tmp, labels=tuple(labels)),
    )


def _inputs_digest(files: list[Path]) -> str:
    """One digest of the contents of ``files`` (folders and globs resolved): what a standalone
    stage's output depends on besides its settings."""
    from pairsieve.core import io

    digests = sorted(f"{p}:{io.content_digest(p)}" for p in io.resolve_inputs(files))
    return io.sha256_text("|".join(digests))


def audit_step(
    cfg: PairsieveConfig,
    dataset: Path,
    catalog: Path | None,
    out: Path,
    labels: tuple[Path, ...] = (),
) -> StageResult:
    """Audit a dataset built elsewhere into the folder ``out`` (published atomically), its
    estimate corrected by the answered ``labels`` files when given."""
    from pairsieve.audits import stage as audit

    inputs = audit.Inputs(Path(dataset), Path(catalog) if catalog else None, tuple(labels))
    out = Path(out)
    return run_stage(
        out.name,
        out.parent,
        settings_hash(cfg, "audit"),
        _inputs_digest([dataset, *([catalog] if catalog else []), *labels]),
        lambda tmp: audit.run(stage_config(cfg, "audit"), inputs, tmp, encoder=_encoder(cfg)),
    )


def clean_step(cfg: PairsieveConfig, inputs: Any, out: Path) -> StageResult:
    """Clean a dataset built elsewhere (`cleaning.stage.Inputs`) into the folder ``out``,
    published atomically."""
    from pairsieve.cleaning import stage as clean

    files = [inputs.dataset, *([inputs.catalog] if inputs.catalog else []), *inputs.labels]
    out = Path(out)
    return run_stage(
        out.name,
        out.parent,
        settings_hash(cfg, "clean") + f"|label_column={inputs.label_column}",
        _inputs_digest(files),
        lambda tmp: clean.run(stage_config(cfg, "clean"), inputs, tmp, encoder=_encoder(cfg)),
    )
