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


# --- commands added by stages below this line (keep one block per command) ----------------------
