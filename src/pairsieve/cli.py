"""The `pairsieve` command line. The only module that prints, reads the environment or exits.

Every command turns a `PairsieveError` into one line on stderr and exit code 2, writing nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler

from pairsieve.config import PairsieveConfig, config_reference_markdown, load_config, parse_override
from pairsieve.errors import PairsieveError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Clean contrastive training data: product ids, safe hard negatives, masked shards.",
)
console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a knob, e.g. --set mine.num_negatives=8 (repeatable)."),
]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.")]


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(message)s",
        handlers=[RichHandler(console=console, show_path=False, show_time=False)],
        force=True,
    )
    for noisy in ("httpx", "sentence_transformers", "prefect", "distributed", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command; a PairsieveError becomes one clear line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _setup_logging()
        try:
            return fn(*args, **kwargs)
        except PairsieveError as exc:
            console.print(f"[bold red]error[/] {exc}", highlight=False, markup=True)
            raise typer.Exit(code=2) from None

    return wrapper


def config_from_cli(config: Path | None, overrides: list[str] | None) -> PairsieveConfig:
    """Load --config and apply --set overrides."""
    return load_config(config, dict(parse_override(item) for item in overrides or []))


def print_json(obj: Any) -> None:
    """Print a JSON document on stdout (tables go to stderr via rich)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


@app.command("config-docs")
@handle_errors
def config_docs() -> None:
    """Print the configuration reference (docs/configuration.md) generated from the model."""
    sys.stdout.write(config_reference_markdown())


def _print_build_summary(summary: dict[str, Any], out: Path) -> None:
    from rich.table import Table

    table = Table(title=f"pairsieve build -> {out}")
    for column in ("stage", "rows in", "kept", "dropped", "by reason", "seconds", ""):
        table.add_column(column)
    for stage, result in summary.items():
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(result["dropped_by_reason"].items()))
        table.add_row(
            stage,
            str(result["rows_in"]),
            str(result["rows_out"]),
            str(sum(result["dropped_by_reason"].values())),
            reasons,
            str(result["timings"].get("total_s", "")),
            "skipped (up to date)" if result["skipped"] else "",
        )
    console.print(table)
    console.print(f"shards:  {out / 'shards'}")
    console.print(f"report:  {out / 'report' / 'report.html'}")


def run_build(
    clicks: list[str], catalog: list[str], out: Path, cfg: PairsieveConfig
) -> dict[str, Any]:
    """Run the Prefect `build` flow and print what each stage did."""
    from pairsieve.pipeline import build

    summary = build(
        clicks=clicks, catalog=catalog, out=str(out), config=cfg.model_dump(mode="json")
    )
    _print_build_summary(summary, out)
    return summary


@app.command("build")
@handle_errors
def build_cmd(
    clicks: Annotated[list[str], typer.Option("--clicks", help="Click log: file, glob, folder or URL.")],
    catalog: Annotated[list[str], typer.Option("--catalog", help="Listing catalog: file, glob, folder or URL.")],
    out: OutOpt,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Build a clean training set: ingest, cluster, mine, shards, report (a Prefect flow run)."""
    run_build(clicks, catalog, out, config_from_cli(config, overrides))


def _find_sample() -> Path | None:
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        candidate = base / "data" / "sample"
        if (candidate / "catalog.parquet").exists():
            return candidate
    return None


@app.command("demo")
@handle_errors
def demo(
    out: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("runs/demo"),
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Run the whole build on the bundled sample (generated afresh if the repo's copy is absent)."""
    from pairsieve.schemas import TRUE_PRODUCT_ID

    sample = _find_sample()
    if sample is None:
        from pairsieve.datasets import synth

        sample = out.parent / f"{out.name}-sample"
        console.print(f"bundled sample not found; generating one into {sample}")
        synth.generate(sample, n_products=400, seed=7)
    cfg = config_from_cli(config, [f'ingest.truth_column="{TRUE_PRODUCT_ID}"', *(overrides or [])])
    run_build([str(sample / "clicks.parquet")], [str(sample / "catalog.parquet")], out, cfg)


@app.command("verify")
@handle_errors
def verify_cmd(
    build_dir: Annotated[Path, typer.Argument(help="A published build folder (--out of build).")],
) -> None:
    """Check every shard against manifest.json: exit 1 on a mismatch, missing or extra file."""
    from pairsieve.publish import verify

    problems = verify(build_dir)
    for problem in problems:
        console.print(f"[red]{problem}[/]")
    if problems:
        raise typer.Exit(code=1)
    console.print(f"{build_dir}: all files match manifest.json")


@app.command("serve")
@handle_errors
def serve_cmd(
    clicks: Annotated[str, typer.Option("--clicks", help="Click log the nightly build reads.")],
    catalog: Annotated[str, typer.Option("--catalog", help="Catalog the nightly build reads.")],
    out: OutOpt,
    cron: Annotated[str, typer.Option("--cron", help="Build schedule (cron).")] = "0 3 * * *",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Serve the `build` and `audit` deployments (scheduled build) from this process."""
    from pairsieve.pipeline import serve_deployments

    cfg = config_from_cli(config, overrides)
    serve_deployments(
        {"clicks": clicks, "catalog": catalog, "out": str(out), "config": cfg.model_dump(mode="json")},
        cron=cron,
    )


# --- commands added by stages below this line (keep one block per command) ----------------------
