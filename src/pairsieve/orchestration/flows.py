"""Prefect flows `build`, `audit` and `clean`: tasks that call the stage steps, nothing else.

Flows take JSON-serialisable parameters (paths and a config dict) so the same functions run from
the CLI, from `flows/` deployments on a schedule, and from a worker talking to a Prefect server.
Without `PREFECT_API_URL` Prefect starts its ephemeral local API on SQLite.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, task, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.types.entrypoint import EntrypointType

from pairsieve.config import PairsieveConfig, RunnerConfig, build_config
from pairsieve.core import memory, progress
from pairsieve.core.contract import StageResult, code_version
from pairsieve.core.layout import RunLayout
from pairsieve.core.memory import watch
from pairsieve.core.partitions import Span
from pairsieve.errors import PairsieveError
from pairsieve.faults import environment_error
from pairsieve.orchestration import publish, steps
from pairsieve.orchestration.progress import ProgressArtifacts
from pairsieve.vectors.embed import EmbedStats, embed_partition


def _transient(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a failed task unless it failed on the input, the config or a disk that is full,
    read-only or forbidden: those fail the same again."""
    try:
        state.result()
    except PairsieveError:
        return False
    except Exception as exc:  # noqa: BLE001 - any other failure may be transient (a lost worker)
        fault = environment_error(exc)
        return fault is None or fault.code not in _LASTING
    return True


_LASTING = ("disk_full", "read_only", "permission_denied")


# Stages are idempotent (skipped when up to date), so a retry after a transient failure is safe.
_TASK_OPTIONS: dict[str, Any] = {
    "cache_policy": NO_CACHE,
    "retries": 1,
    "retry_delay_seconds": 5,
    "retry_condition_fn": _transient,
}


# The code this process loaded: hashed (and kept, `code_version` is cached) when it first
# imports the flows, which a worker does to run its first task. A Dask or Ray worker outlives
# upgrades: one started before the package changed runs the old code on the new plans, which
# fails in ways that do not say why.
_LOADED_CODE = code_version()


def _same_code(code: str) -> None:
    """Stop a task whose process loaded other code than the flow that mapped it.

    Raises:
        PairsieveError: ``code_mismatch``, naming both versions (never retried: it fails the
            same on this worker again).
    """
    if code != _LOADED_CODE:
        raise PairsieveError(
            "code_mismatch",
            f"this worker loaded pairsieve code {_LOADED_CODE}, the build runs {code}: restart "
            "the workers so that they load the build's code",
            knob="runner.address",
        )


@task(name="ingest", **_TASK_OPTIONS)
def ingest_task(cfg: PairsieveConfig, clicks: list[str], catalog: list[str], run_dir: Path):
    return steps.ingest_step(cfg, clicks, catalog, run_dir)


@task(name="plan-embedding", **_TASK_OPTIONS)
def plan_embedding_task(cfg: PairsieveConfig, run_dir: Path) -> list[str]:
    return steps.embedding_partitions(cfg, run_dir)


@task(name="embed-partition", **_TASK_OPTIONS)
def embed_partition_task(path: str, cfg: PairsieveConfig, code: str) -> EmbedStats:
    _same_code(code)
    return embed_partition(path, cfg)


@task(name="cluster", **_TASK_OPTIONS)
def cluster_task(
    cfg: PairsieveConfig, run_dir: Path, previous: str | None, labels: list[str]
) -> StageResult:
    return steps.cluster_step(
        cfg,
        run_dir,
        Path(previous) if previous else None,
        tuple(Path(p) for p in labels),
        map_spans=map_on_runner,
    )


@task(name="mine", **_TASK_OPTIONS)
def mine_task(cfg: PairsieveConfig, run_dir: Path, previous: str | None) -> StageResult:
    previous_build = Path(previous) if previous else None
    return steps.mine_step(cfg, run_dir, previous_build, map_spans=map_on_runner)


@task(name="partition", **_TASK_OPTIONS)
def partition_task(
    fn: Callable[[str, Span, Any], Any], plan: str, span: Span, cfg: Any, code: str
) -> Any:
    """One span of a mapped step; the worker's freed heap goes back to the system after it
    (`memory.trim`), so the next span, or the stage's own work on threads, starts lean."""
    _same_code(code)
    try:
        return fn(plan, span, cfg)
    finally:
        memory.trim()


@task(name="shards", **_TASK_OPTIONS)
def shards_task(cfg: PairsieveConfig, run_dir: Path) -> StageResult:
    return steps.shards_step(cfg, run_dir, map_spans=map_on_runner)


@task(name="report", **_TASK_OPTIONS)
def report_task(cfg: PairsieveConfig, run_dir: Path, labels: list[str]) -> StageResult:
    return steps.report_step(cfg, run_dir, tuple(Path(p) for p in labels))


@task(name="audit", **_TASK_OPTIONS)
def audit_task(
    cfg: PairsieveConfig, dataset: str, catalog: str | None, out: str, labels: list[str]
) -> StageResult:
    return steps.audit_step(
        cfg,
        Path(dataset),
        Path(catalog) if catalog else None,
        Path(out),
        tuple(Path(p) for p in labels),
    )


@task(name="clean", **_TASK_OPTIONS)
def clean_task(cfg: PairsieveConfig, inputs: Any, out: str) -> StageResult:
    return steps.clean_step(cfg, inputs, Path(out))


@task(name="publish-artifacts", cache_policy=NO_CACHE)
def artifacts_task(report_dir: Path, key: str) -> None:
    from pairsieve.report.stage import load_report, report_artifacts

    markdown, table = report_artifacts(load_report(report_dir))
    create_markdown_artifact(markdown=markdown, key=key, description="pairsieve duplicate impact")
    create_table_artifact(table=table, key=f"{key}-table", description="pairsieve figures")


@task(name="publish", cache_policy=NO_CACHE)
def publish_task(out: str) -> Path:
    return publish.publish(out)


def task_runner_for(runner: RunnerConfig):
    """The Prefect task runner the config asks for; mapped per-partition tasks run on it.

    Raises:
        PairsieveError: ``missing_dependency`` when the Ray integration is not installed.
    """
    if runner.task_runner == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=runner.workers)
    if runner.task_runner == "dask":
        from prefect_dask import DaskTaskRunner

        if runner.address:
            return DaskTaskRunner(address=runner.address)
        return DaskTaskRunner(
            cluster_kwargs={"n_workers": runner.workers, "threads_per_worker": 1, "processes": True}
        )
    try:
        from prefect_ray import RayTaskRunner
    except ImportError:
        raise PairsieveError(
            "missing_dependency",
            "runner.task_runner = 'ray' needs `pip install prefect-ray`",
            knob="runner.task_runner",
        ) from None
    return RayTaskRunner(address=runner.address) if runner.address else RayTaskRunner()


@flow(name="embed-partitions")
def embed_partitions(partitions: list[str], cfg: PairsieveConfig) -> list[EmbedStats]:
    """Fill the shared embedding cache, one mapped task per partition file (a subflow, so that it
    runs on the task runner the config names while `build` itself stays importable by module
    path). Its parameters are paths: Prefect's API refuses flow-run parameters over 512 KB.
    Progress counts texts as each partition finishes, in whatever order they do."""
    sizes = steps.partition_sizes(partitions)
    futures = embed_partition_task.map(partitions, unmapped(cfg), unmapped(_LOADED_CODE))
    return _counting(futures, sizes, "embedding texts", "texts")


def _counting(futures: Any, sizes: list[int], name: str, unit: str) -> list[Any]:
    """The mapped tasks' results, the step ``name`` advanced by each task's size as it ends."""
    from prefect.futures import as_completed

    with progress.step(name, sum(sizes), unit) as counter:
        size_of = {f.task_run_id: size for f, size in zip(futures, sizes, strict=True)}
        for future in as_completed(futures):
            future.result()
            counter.advance(size_of[future.task_run_id])
    return futures.result()


@flow(name="partitions")
def map_partitions(
    fn: Callable[[str, Span, Any], Any], plan: str, spans: list[Span], cfg: Any, step: str
) -> list[Any]:
    """``fn(plan, span, cfg)`` for every span, one mapped task each (a subflow, so that it runs
    on the configured task runner; the tasks are named by ``step`` in the UI); progress counts
    partitions as they end."""
    tasks = partition_task.with_options(name=step, task_run_name=f"{step} {{span}}")
    futures = tasks.map(unmapped(fn), unmapped(plan), spans, unmapped(cfg), unmapped(_LOADED_CODE))
    return _counting(futures, [1] * len(spans), step, "partitions")


def map_on_runner(
    fn: Callable[[str, Span, Any], Any], plan: str, spans: list[Span], cfg: Any, step: str
) -> list[Any]:
    """`core.partitions.MapSpans` on the task runner ``cfg.runner`` names."""
    runner = task_runner_for(cfg.runner)
    return map_partitions.with_options(task_runner=runner)(fn, plan, spans, cfg, step)


def _as_list(paths: str | list[str]) -> list[str]:
    return [paths] if isinstance(paths, str) else list(paths)


@flow(name="build", log_prints=False)
def build(
    clicks: str | list[str],
    catalog: str | list[str],
    out: str,
    config: dict[str, Any] | None = None,
    previous: str | None = None,
    labels: list[str] | None = None,
) -> dict[str, Any]:
    """Ingest, cluster, mine, shard and report, then publish the build folder ``out`` atomically.

    One build at a time writes ``out`` (a lock beside it); work happens in a staging folder that
    a crashed run resumes from, and readers see the new build only once it is complete. With
    ``previous`` (the last published build folder) product ids carry over from it and its
    clustering and mining are reused where their inputs did not change. ``labels`` (label
    files with answers) tune the clustering to this catalog and add estimates with intervals to
    the report.
    """
    cfg = build_config(config or {})
    # The watchdog stops the process (exit 2, `memory_budget`) once it is over the budget.
    with (
        progress.shown_by(ProgressArtifacts()),
        publish.building(out) as run_dir,
        watch(cfg.runner.memory_budget_mb, "ingest") as mem,
    ):
        results = [ingest_task(cfg, _as_list(clicks), _as_list(catalog), run_dir)]
        steps.require_rows(results[-1], run_dir)
        mem.stage = "embed"
        partitions = plan_embedding_task(cfg, run_dir)
        embed_partitions.with_options(task_runner=task_runner_for(cfg.runner))(partitions, cfg)
        steps.clear_embedding_partitions(run_dir)
        mem.stage = "cluster"
        results.append(cluster_task(cfg, run_dir, previous, list(labels or [])))
        mem.stage = "mine"
        results.append(mine_task(cfg, run_dir, previous))
        steps.require_rows(results[-1], run_dir)
        mem.stage = "shards"
        results.append(shards_task(cfg, run_dir))
        steps.require_rows(results[-1], run_dir)
        mem.stage = "report"
        results.append(report_task(cfg, run_dir, list(labels or [])))
        mem.stage = "publish"
        publish_task(out)
    artifacts_task(RunLayout(out).report, key="pairsieve-build")
    return {r.stage: r.to_json() | {"skipped": r.skipped} for r in results}


def _reported(out: str, key: str, run: Callable[[], StageResult]) -> dict[str, Any]:
    """A standalone stage's task run with its progress shown as artifacts, then its report
    published as artifacts under ``key``; its result as JSON."""
    with progress.shown_by(ProgressArtifacts()):
        result = run()
    artifacts_task(Path(out), key=key)
    return result.to_json() | {"skipped": result.skipped}


def run_checked(
    which: Any,
    cfg: PairsieveConfig,
    dataset: str,
    out: str | Path,
    catalog: str | None = None,
    labels: list[str | Path] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """The `audit` or `clean` flow (``which``) on a dataset, after the checks its command runs
    first (`preflight.check`: the output folder and its disk, the model, the services)."""
    from pairsieve.orchestration import preflight

    preflight.check(cfg, Path(out), [dataset, *([catalog] if catalog else [])])
    return which(
        dataset=dataset,
        out=str(out),
        catalog=catalog,
        config=cfg.model_dump(mode="json"),
        labels=[str(p) for p in labels or []],
        **options,
    )


@flow(name="audit", log_prints=False)
def audit(
    dataset: str,
    out: str,
    catalog: str | None = None,
    config: dict[str, Any] | None = None,
    labels: list[str] | None = None,
) -> dict[str, Any]:
    """Measure the false negatives of a contrastive dataset built elsewhere (report in
    ``out``); ``labels`` are label files whose answers correct the estimate."""
    cfg = build_config(config or {})
    return _reported(
        out, "pairsieve-audit", lambda: audit_task(cfg, dataset, catalog, out, list(labels or []))
    )


@flow(name="clean", log_prints=False)
def clean(
    dataset: str,
    out: str,
    catalog: str | None = None,
    config: dict[str, Any] | None = None,
    labels: list[str] | None = None,
    label_column: bool | None = None,
) -> dict[str, Any]:
    """Repair a contrastive dataset built elsewhere (`cleaning.stage`) into ``out``: its unsafe
    negatives replaced, its layout kept, a report of the audit before and after."""
    from pairsieve.cleaning.stage import Inputs

    cfg = build_config(config or {})
    inputs = Inputs(
        Path(dataset),
        Path(catalog) if catalog else None,
        tuple(Path(p) for p in labels or []),
        label_column,
    )
    return _reported(out, "pairsieve-clean", lambda: clean_task(cfg, inputs, out))


BUILD_SCHEDULE = "0 3 * * *"  # nightly, after the day's click logs have landed


def build_deployment(parameters: dict[str, Any], cron: str = BUILD_SCHEDULE):
    """The scheduled `build` deployment with its parameters (used by flows/ and `serve`)."""
    return build.to_deployment(
        name="pairsieve-build",
        cron=cron,
        parameters=parameters,
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


AUDIT_SCHEDULE = "0 5 * * 1"  # weekly, Monday morning


def on_demand_deployment(
    which: Any, parameters: dict[str, Any] | None = None, cron: str | None = None
):
    """The deployment of the `audit` or `clean` flow (``which``): on demand (parameters given
    per run) or on a schedule."""
    return which.to_deployment(
        name=f"pairsieve-{which.name}",
        cron=cron,
        parameters=parameters or {},
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def serve_deployments(build_parameters: dict[str, Any], cron: str = BUILD_SCHEDULE) -> None:
    """Serve `build` (scheduled), `audit` and `clean` (on demand) from this process, which acts
    as the worker; runs report to PREFECT_API_URL when it is set, else to the ephemeral API."""
    from prefect import serve

    serve(
        build_deployment(build_parameters, cron),
        on_demand_deployment(audit),
        on_demand_deployment(clean),
    )
