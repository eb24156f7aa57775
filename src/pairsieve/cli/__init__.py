"""The `pairsieve` command line. The only module that prints, reads the environment or exits.

Every command turns a `PairsieveError` into one line on stderr and exit code 2, writing nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from pairsieve import terminal
from pairsieve.cli.app import (
    CatalogInputsOpt,
    ClicksInputsOpt,
    ConfigOpt,
    LabelsOpt,
    OutOpt,
    SetOpt,
    app,
    config_from_cli,
    console,
    handle_errors,
    print_json,
)
from pairsieve.config import PairsieveConfig
from pairsieve.config_docs import config_reference_markdown
from pairsieve.errors import PairsieveError


@app.command("init")
@handle_errors
def init_command(
    path: Annotated[Path, typer.Argument(help="Where to write it.")] = Path("pairsieve.toml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a pairsieve.toml with every knob at its default, each explained in a comment."""
    from pairsieve.config_docs import config_template_toml

    if path.exists() and not force:
        raise PairsieveError("file_exists", "not overwriting it (use --force)", file=str(path))
    path.write_text(config_template_toml(), encoding="utf-8")
    console.print(f"wrote {path}: edit it, then `pairsieve build --config {path} ...`")


@app.command("config-docs")
@handle_errors
def config_docs() -> None:
    """Print the configuration reference (docs/configuration.md) generated from the model."""
    sys.stdout.write(config_reference_markdown())


def _print_build_summary(summary: dict[str, Any], out: Path) -> None:
    table, lines = terminal.build_summary(summary, out)
    console.print(table)
    for line in lines:
        console.print(line, highlight=False)


def run_build(
    clicks: list[str],
    catalog: list[str],
    out: Path,
    cfg: PairsieveConfig,
    previous: Path | None = None,
    labels: list[Path] | None = None,
) -> dict[str, Any]:
    """Check the environment, run the Prefect `build` flow and print what each stage did."""
    from pairsieve.orchestration import preflight
    from pairsieve.orchestration.flows import build
    from pairsieve.vectors.embed import exporting_beside

    preflight.check(cfg, out, [*clicks, *catalog])

    with terminal.showing_progress(cfg.runner.progress_every_s), exporting_beside(cfg):
        summary = build(
            clicks=clicks,
            catalog=catalog,
            out=str(out),
            config=cfg.model_dump(mode="json"),
            previous=str(previous) if previous else None,
            labels=[str(p) for p in labels or []],
        )
    _print_build_summary(summary, out)
    return summary


@app.command("build")
@handle_errors
def build_cmd(  # noqa: PLR0913 - one parameter per CLI option
    clicks: ClicksInputsOpt,
    catalog: CatalogInputsOpt,
    out: OutOpt,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    previous: Annotated[
        Path | None,
        typer.Option(
            "--previous",
            help="Last published build: its product ids carry over, and its judged pairs "
            "and unchanged queries' negatives are reused.",
        ),
    ] = None,
    labels: LabelsOpt = None,
) -> None:
    """Build a clean training set: ingest, cluster, mine, shards, report (a Prefect flow run)."""
    run_build(clicks, catalog, out, config_from_cli(config, overrides), previous, labels)


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
    from pairsieve.orchestration.publish import verify

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
    """Serve the `build`, `audit` and `clean` deployments (scheduled build) from this process."""
    from pairsieve.orchestration.flows import serve_deployments

    cfg = config_from_cli(config, overrides)
    parameters = {"clicks": clicks, "catalog": catalog, "out": str(out)}
    serve_deployments({**parameters, "config": cfg.model_dump(mode="json")}, cron=cron)


# --- commands added by stages below this line (keep one block per command) ----------------------


# --- ingest ---------------------------------------------------------------------------------------
@app.command("ingest")
@handle_errors
def ingest_command(
    clicks: ClicksInputsOpt,
    catalog: CatalogInputsOpt,
    out: OutOpt,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Validate the click log and catalog into OUT/ingest/ (clicks, listings, quarantine).

    The same step `pairsieve build` runs first, so a build into the same OUT skips it."""
    from pairsieve.core.layout import RunLayout
    from pairsieve.core.memory import watch
    from pairsieve.orchestration.steps import ingest_step

    cfg = config_from_cli(config, overrides)
    created = not out.exists()
    try:
        with watch(cfg.runner.memory_budget_mb, "ingest"):  # over budget: exit 2 (memory_budget)
            result = ingest_step(cfg, clicks, catalog, out)  # a later build into OUT skips it
    except PairsieveError:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # a failed run leaves nothing behind, not even the folder
        raise
    print_json({"stage_dir": str(RunLayout(out).stage_dir("ingest")), **result.to_json()})


# --- audit ----------------------------------------------------------------------------------------
@app.command("audit")
@handle_errors
def audit_command(
    dataset: Annotated[
        Path,
        typer.Option(
            "--dataset",
            help="Contrastive dataset: parquet/JSONL file or folder (anchor/positive/negative_* "
            "as sentence-transformers writes it, or FlagEmbedding query/pos/neg).",
        ),
    ],
    out: OutOpt,
    catalog: Annotated[
        Path | None, typer.Option("--catalog", help="Catalog (listing_id, title) to cluster with.")
    ] = None,
    labels: LabelsOpt = None,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Report a dataset's false-negative rate and in-batch collisions into OUT/report.html|json."""
    from pairsieve.orchestration.flows import audit, run_checked

    cfg = config_from_cli(config, overrides)
    with terminal.showing_progress(cfg.runner.progress_every_s):
        result = run_checked(audit, cfg, str(dataset), out, str(catalog) if catalog else None,
                             labels)  # fmt: skip
    print_json({"report": str(out / "report.html"), **result})


# --- clean ----------------------------------------------------------------------------------------
@app.command("clean")
@handle_errors
def clean_command(  # noqa: PLR0913 - one parameter per CLI option
    dataset: Annotated[
        Path,
        typer.Option(
            "--dataset",
            help="Contrastive dataset to repair, as `audit` reads it: parquet/JSONL file or "
            "folder, sentence-transformers or FlagEmbedding columns.",
        ),
    ],
    out: OutOpt,
    catalog: Annotated[
        Path | None,
        typer.Option("--catalog", help="Catalog (listing_id, title) replacements come from."),
    ] = None,
    label_column: Annotated[
        bool | None,
        typer.Option(
            "--label-column/--no-label-column",
            help="Add product ids as a `label` column [default: on for sentence-transformers "
            "layouts, off for FlagEmbedding].",
            show_default=False,
        ),
    ] = None,
    labels: LabelsOpt = None,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Replace the negatives that are their positive's product: OUT/dataset/ in the input's
    layout, OUT/report.html|json with the audit before and after."""
    from pairsieve.orchestration.flows import clean, run_checked

    cfg = config_from_cli(config, overrides)
    with terminal.showing_progress(cfg.runner.progress_every_s):
        result = run_checked(clean, cfg, str(dataset), out, str(catalog) if catalog else None,
                             labels, label_column=label_column)  # fmt: skip
    print_json({"dataset": str(out / "dataset"), "report": str(out / "report.html"), **result})


# --- synth ----------------------------------------------------------------------------------------
@app.command("synth")
@handle_errors
def synth_command(
    out: OutOpt,
    products: Annotated[
        int, typer.Option("--products", help="Products to generate (~4.3 listings each).")
    ] = 500,
    seed: Annotated[int, typer.Option("--seed", help="Same seed -> byte-identical files.")] = 0,
    formats: Annotated[
        list[str] | None,
        typer.Option("--format", help="parquet (default), csv or jsonl; repeatable."),
    ] = None,
    queries_per_product: Annotated[
        float, typer.Option("--queries-per-product", help="Mean search sessions per product.")
    ] = 4.0,
    chunk_size: Annotated[
        int, typer.Option("--chunk-size", help="Products per streamed chunk (bounds memory).")
    ] = 50_000,
) -> None:
    """Generate a synthetic marketplace: OUT/catalog.* and OUT/clicks.* with true_product_id."""
    import dataclasses

    from pairsieve.datasets.synth import SynthOptions, generate

    options = SynthOptions(tuple(formats or ["parquet"]), queries_per_product)
    summary = generate(out, products, seed, chunk_size, options)
    print_json(dataclasses.asdict(summary))


# --- cluster / eval -------------------------------------------------------------------------------
CatalogOpt = Annotated[
    Path | None, typer.Option("--catalog", help="Catalog file (parquet, CSV or JSONL).")
]


@app.command("cluster")
@handle_errors
def cluster_command(
    catalog: Annotated[Path, typer.Option("--catalog", help="Catalog file (parquet, CSV, JSONL).")],
    out: OutOpt,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    labels: LabelsOpt = None,
) -> None:
    """Cluster listings into products: OUT/products.parquet and OUT/pairs.parquet; with
    --labels, tuned to the answers (which vetoes hold, and the thresholds)."""
    from pairsieve.cluster import stage as cluster
    from pairsieve.ingest.catalog import read_catalog

    cfg = config_from_cli(config, overrides)
    listings = read_catalog(str(catalog), cfg.ingest)
    inputs = cluster.Inputs(listings, labels=tuple(labels or ()))
    with terminal.showing_progress(cfg.runner.progress_every_s):
        result = cluster.run(cfg, inputs, out)
    console.print(result.summary())
    print_json(result.to_json())


DataRootOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-root",
        envvar="PAIRSIEVE_DATA_ROOT",
        help="Folder holding the public benchmark data sets (needed with --dataset).",
    ),
]


@app.command("eval")
@handle_errors
def eval_command(  # noqa: PLR0913 - one parameter per CLI option
    catalog: CatalogOpt = None,
    truth_column: Annotated[
        str, typer.Option("--truth-column", help="Catalog column with true product ids.")
    ] = "true_product_id",
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="pricerunner, abt-buy, walmart-amazon, altosight or alaska-cameras (read from "
            "--data-root); two-shop catalogs are scored on cross-shop pairs.",
        ),
    ] = None,
    source_column: Annotated[
        str | None,
        typer.Option(
            "--source-column",
            help="Catalog column naming each listing's shop: pairwise figures count only pairs "
            "across shops (for a truth that links listings across shops only).",
        ),
    ] = None,
    data_root: DataRootOpt = None,
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    labels: LabelsOpt = None,
) -> None:
    """Pairwise and B-cubed P/R/F1 of pairsieve and the baselines against a truth column (with
    --labels, pairsieve's clustering tuned to the answers)."""
    from pairsieve.cli.evaluation import load_eval_catalog, scores_table
    from pairsieve.cluster import evaluate
    from pairsieve.datasets.benchmarks import benchmark
    from pairsieve.schemas import SELLER_ID

    cfg = config_from_cli(config, overrides)
    frame = load_eval_catalog(cfg, catalog, dataset, data_root)
    if dataset is not None and source_column is None and benchmark(dataset).cross_source:
        source_column = SELLER_ID
    scores = evaluate.compare(
        cfg, frame, truth_column, source_column=source_column, labels=tuple(labels or ())
    )
    pairs = f", cross-{source_column} pairs" if source_column else ""
    title = f"clustering vs {truth_column} ({len(frame)} listings{pairs})"
    Console(stderr=True, width=max(console.width, 110)).print(scores_table(scores, title))
    print_json({method: s.to_dict() for method, s in scores.items()})


@app.command("mine-eval")
@handle_errors
def mine_eval_command(  # noqa: PLR0913 - one parameter per CLI option
    out: OutOpt,
    catalog: CatalogOpt = None,
    dataset: Annotated[
        str | None,
        typer.Option("--dataset", help="A benchmark catalog by name (see eval; from --data-root)."),
    ] = None,
    data_root: DataRootOpt = None,
    truth_column: Annotated[
        str, typer.Option("--truth-column", help="Catalog column with true product ids.")
    ] = "true_product_id",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """False-negative rate of mined negatives: naive vs margin vs product exclusion vs both."""
    from pairsieve.cli.evaluation import load_eval_catalog, mine_eval
    from pairsieve.mine.evaluate import format_table

    cfg = config_from_cli(config, overrides)
    frame = load_eval_catalog(cfg, catalog, dataset, data_root)
    result = mine_eval(cfg, frame, out, truth_column=truth_column)
    sys.stdout.write(format_table(result) + "\n")
    console.print(f"targets: {result['targets']}  (JSON: {out / 'mine_eval.json'})")


label_app = typer.Typer(no_args_is_help=True, help="Label pairs of your catalog.")
app.add_typer(label_app, name="label")


@label_app.command("sample")
@handle_errors
def label_sample(
    out: Annotated[Path, typer.Option("--out", help="Label file to write (JSONL).")],
    run: Annotated[Path | None, typer.Option("--run", help="A build folder.")] = None,
    audit_dir: Annotated[Path | None, typer.Option("--audit", help="An audit's --out.")] = None,
    n: Annotated[int, typer.Option("--n", min=1, help="Pairs to draw from each source.")] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Same seed, same pairs.")] = 0,
) -> None:
    """Draw pairs to label, stratified by p_same: a build's candidates and the negatives it kept
    above the margin, and/or an audit's pairs."""
    from pairsieve.labels.pairs import write_sample

    print_json({"labels": str(out), "pairs": write_sample(run, audit_dir, n, seed, out)})


@label_app.command("serve")
@handle_errors
def label_serve(
    path: Annotated[Path, typer.Argument(help="The label file to answer.")],
    port: Annotated[int, typer.Option("--port", help="Port on 127.0.0.1.")] = 8765,
) -> None:
    """Serve the labelling page (y same, n different, s skip, u undo) until Ctrl-C."""
    from pairsieve.labels.serve import server

    httpd = server(path, port)
    console.print(f"labelling {path} at http://127.0.0.1:{httpd.server_address[1]}/")
    httpd.serve_forever()


# Commands that live in modules of their own register on `app` when imported.
from pairsieve.cli import experiment as _experiment  # noqa: E402, F401
