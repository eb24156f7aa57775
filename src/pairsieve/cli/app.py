"""What every command shares: the Typer app, its options, and errors as one line and exit 2."""

from __future__ import annotations

import functools
import json
import os
import sys
import tomllib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from pairsieve import terminal
from pairsieve.cli import homes
from pairsieve.config import PairsieveConfig, load_config
from pairsieve.errors import PairsieveError
from pairsieve.faults import environment_error

# Prefect's ephemeral API starts a local server on first use; on a busy 2-core machine it needs
# longer than the default 20 s, and the CLI never phones home.
for _key, _value in (
    ("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120"),
    ("PREFECT_SERVER_ANALYTICS_ENABLED", "false"),
    ("PREFECT_LOGGING_LEVEL", "WARNING"),
    ("HF_HUB_OFFLINE", "1"),
    ("TOKENIZERS_PARALLELISM", "false"),
    ("HF_HUB_DISABLE_PROGRESS_BARS", "1"),  # the model loads from disk: no download to watch
    ("TRANSFORMERS_VERBOSITY", "error"),
):
    os.environ.setdefault(_key, _value)
_PREFECT_HOME_NOTE = homes.prefect_home()  # before Prefect reads its settings
# A PREFECT_HOME that cannot be made is told by the checks before a build, in one line.
warnings.filterwarnings("ignore", message="Failed to create the Prefect home directory")

app = typer.Typer(add_completion=False, no_args_is_help=True)
console = terminal.console


def parse_override(item: str) -> tuple[str, Any]:
    """Parse a CLI ``--set key=value``; the value is read as TOML (``none`` unsets a knob),
    else kept as a string."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise PairsieveError("bad_config", f"--set takes key=value, got {item!r}", knob=item)
    if raw.strip().lower() in ("none", "null"):
        return key.strip(), None
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.strip(), value


def _print_version(value: bool) -> None:
    if value:
        from pairsieve import __version__

        print(f"pairsieve {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version, exit."
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Show every library's log lines, not only ours."),
    ] = False,
) -> None:
    """Clean contrastive training data: product ids, safe hard negatives, masked shards."""
    terminal.VERBOSITY["verbose"] = verbose


ConfigOpt = Annotated[Path | None, typer.Option("--config", help="TOML config file.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a knob, e.g. --set mine.num_negatives=8 (repeatable)."),
]
OutOpt = Annotated[Path, typer.Option("--out", help="Output folder.")]
ClicksInputsOpt = Annotated[
    list[str], typer.Option("--clicks", help="Click log: file, glob, folder or URL (repeatable).")
]
LabelsOpt = Annotated[
    list[Path] | None,
    typer.Option("--labels", help="Label file with answers (`pairsieve label`, repeatable)."),
]
CatalogInputsOpt = Annotated[
    list[str], typer.Option("--catalog", help="Listing catalog: file, glob, folder or URL.")
]


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command; a PairsieveError, or a fault of the environment (`faults`), becomes one
    clear line and exit code 2. Anything else is a bug and keeps its traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        terminal.setup_logging()
        terminal.stop_on_sigterm()
        if _PREFECT_HOME_NOTE:
            console.print(_PREFECT_HOME_NOTE, highlight=False, soft_wrap=True)
        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            console.print("stopped: a build resumes from its staging folder when run again")
            raise typer.Exit(code=130) from None
        except Exception as exc:
            fault = environment_error(exc)
            if fault is None:
                raise
            if terminal.VERBOSITY["verbose"]:
                console.print_exception()
            notes = (*getattr(exc, "__notes__", ()), *getattr(fault, "__notes__", ()))
            for note in dict.fromkeys(notes):  # what was cleaned up or kept, said once
                console.print(escape(note), highlight=False, soft_wrap=True)
            console.print(
                f"[bold red]error[/] {escape(str(fault))}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(code=2) from None

    return wrapper


def config_from_cli(config: Path | None, overrides: list[str] | None) -> PairsieveConfig:
    """Load --config and apply --set overrides; a default cache folder that cannot be written
    moves to the temporary folder, with a line saying so."""
    cfg = load_config(config, dict(parse_override(item) for item in overrides or []))
    cfg, note = homes.cache_dir(cfg)
    if note:
        console.print(note, highlight=False, soft_wrap=True)
    return cfg


def print_json(obj: Any) -> None:
    """Print a JSON document on stdout (tables go to stderr via rich)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
