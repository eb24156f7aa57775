"""Prefect flows `build` and `audit`: tasks that call the stage steps, nothing else.

Flows take JSON-serialisable parameters (paths and a config dict) so the same functions run from
the CLI, from `flows/` deployments on a schedule, and from a worker talking to a Prefect server.
Without `PREFECT_API_URL` Prefect starts its ephemeral local API on SQLite.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from pairsieve import publish, steps
from pairsieve.config import PairsieveConfig, build_config
from pairsieve.stage import StageResult

# Stages are idempotent (skipped when up to date), so a retry after a transient failure is safe.
_TASK_OPTIONS: dict[str, Any] = {"cache_policy": NO_CACHE, "retries": 1, "retry_delay_seconds": 5}


@task(name="ingest", **_TASK_OPTIONS)
def ingest_task(cfg: PairsieveConfig, clicks: list[str], catalog: list[str], run_dir: Path):
    return steps.ingest_step(cfg, clicks, catalog, run_dir)


@task(name="cluster", **_TASK_OPTIONS)
def cluster_task(cfg: PairsieveConfig, run_dir: Path) -> StageResult:
    return steps.cluster_step(cfg, run_dir)


@task(name="mine", **_TASK_OPTIONS)
def mine_task(cfg: PairsieveConfig, run_dir: Path) -> StageResult:
    return steps.mine_step(cfg, run_dir)


@task(name="shards", **_TASK_OPTIONS)
def shards_task(cfg: PairsieveConfig, run_dir: Path) -> StageResult:
    return steps.shards_step(cfg, run_dir)


@task(name="report", **_TASK_OPTIONS)
def report_task(cfg: PairsieveConfig, run_dir: Path) -> StageResult:
    return steps.report_step(cfg, run_dir)


@task(name="publish-artifacts", cache_policy=NO_CACHE)
def artifacts_task(report_dir: Path, key: str) -> None:
    from pairsieve.report import load_report, report_artifacts

    markdown, table = report_artifacts(load_report(report_dir))
    create_markdown_artifact(markdown=markdown, key=key, description="pairsieve duplicate impact")
    create_table_artifact(table=table, key=f"{key}-table", description="pairsieve figures")


@task(name="prepare-staging", cache_policy=NO_CACHE)
def staging_task(out: str) -> Path:
    return publish.prepare_staging(out)


@task(name="publish", cache_policy=NO_CACHE)
def publish_task(out: str) -> Path:
    return publish.publish(out)


def _as_list(paths: str | list[str]) -> list[str]:
    return [paths] if isinstance(paths, str) else list(paths)


@flow(name="build", log_prints=False)
def build(
    clicks: str | list[str],
    catalog: str | list[str],
    out: str,
    config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Ingest, cluster, mine, shard and report, then publish the build folder ``out`` atomically.

    One build at a time writes ``out`` (a lock beside it); work happens in a staging folder that
    a crashed run resumes from, and readers see the new build only once it is complete.
    """
    cfg = build_config(config or {})
    with publish.build_lock(out):
        run_dir = staging_task(out)
        results = [ingest_task(cfg, _as_list(clicks), _as_list(catalog), run_dir)]
        results.append(cluster_task(cfg, run_dir))
        results.append(mine_task(cfg, run_dir))
        results.append(shards_task(cfg, run_dir))
        results.append(report_task(cfg, run_dir))
        publish_task(out)
    artifacts_task(Path(out) / "report", key="pairsieve-build")
    return {r.stage: r.to_json() | {"skipped": r.skipped} for r in results}


BUILD_SCHEDULE = "0 3 * * *"  # nightly, after the day's click logs have landed


def build_deployment(parameters: dict[str, Any], cron: str = BUILD_SCHEDULE):
    """The scheduled `build` deployment with its parameters (used by flows/ and `serve`)."""
    return build.to_deployment(name="pairsieve-build", cron=cron, parameters=parameters)


def serve_deployments(build_parameters: dict[str, Any], cron: str = BUILD_SCHEDULE) -> None:
    """Serve the deployments from this process; runs report to PREFECT_API_URL when set."""
    from prefect import serve

    serve(build_deployment(build_parameters, cron))
