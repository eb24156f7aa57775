"""Cheap checks before a build starts, so that a fault of the environment ends the run in seconds
with one line naming what to fix, not an hour later inside a stage.

Each check costs at most a probe file, a `statvfs`, a file lookup or one connection with a short
timeout: the output folder is writable and has room, the model folder holds a model, the Prefect
API and the task runner's scheduler answer.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
from pathlib import Path
from urllib.parse import urlsplit

from pairsieve.config import PairsieveConfig, RunnerConfig
from pairsieve.core import io
from pairsieve.errors import PairsieveError
from pairsieve.faults import environment_error
from pairsieve.vectors.embed import model_folder

# A published build holds 7x to 30x its inputs' bytes (the bundled sample 7x, PriceRunner 14x,
# Altosight 30x): a low estimate, so the check refuses only a disk that cannot be enough.
OUTPUT_PER_INPUT_BYTE = 10
ANSWER_TIMEOUT_S = 5.0


def check(cfg: PairsieveConfig, out: Path, inputs: list[str]) -> None:
    """Stop before any work when the build cannot finish in this environment.

    Raises:
        PairsieveError: ``read_only``, ``permission_denied``, ``disk_full``, ``missing_file``,
            ``prefect_api`` or ``scheduler_unreachable``, naming the path, URL or setting.
    """
    writable_folder(out.parent, "--out")
    enough_space(out, inputs)
    model_folder(cfg.embed)
    prefect_api_answers()
    scheduler_answers(cfg.runner)


def writable_folder(folder: Path, named: str, knob: str | None = None) -> None:
    """``folder`` (``named`` so in the error, with the setting ``knob`` that chooses it) exists,
    made if need be, and takes a new file."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        io.probe_write(folder)
    except OSError as exc:
        fault = environment_error(exc, where=str(folder))
        if fault is None:
            raise
        fault.message = f"{named} cannot be written: {fault.message}"
        fault.file, fault.knob = str(folder), knob
        raise fault from None


def _local_bytes(inputs: list[str]) -> int:
    """Bytes of the inputs that are local files or folders (URLs are not counted)."""
    total = 0
    for item in inputs:
        path = Path(item)
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += io.folder_bytes(path)
        else:
            total += sum(os.path.getsize(p) for p in glob.glob(item) if os.path.isfile(p))
    return total


def enough_space(out: Path, inputs: list[str]) -> None:
    """The disk under ``out`` has room for the expected output."""
    expected = OUTPUT_PER_INPUT_BYTE * _local_bytes(inputs)
    free = shutil.disk_usage(out.parent).free
    if free < expected:
        raise PairsieveError(
            "disk_full",
            f"about {expected / 1e6:,.1f} MB are needed for this build and {free / 1e6:,.1f} MB "
            "are free: free space there or point --out at a larger disk",
            file=str(out.parent),
        )


def _host_port(address: str) -> tuple[str, int] | None:
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    return (parts.hostname, parts.port) if parts.hostname and parts.port else None


def prefect_api_answers() -> None:
    """The Prefect server named by ``PREFECT_API_URL`` answers its health check; without one,
    Prefect's own ephemeral API will start, and its home (its SQLite database) can be written."""
    url = os.environ.get("PREFECT_API_URL")
    if not url:
        home = os.environ.get("PREFECT_HOME") or str(Path.home() / ".prefect")
        writable_folder(Path(home).expanduser(), "Prefect's home", knob="PREFECT_HOME")
        return
    import httpx

    try:
        httpx.get(f"{url.rstrip('/')}/health", timeout=ANSWER_TIMEOUT_S).raise_for_status()
    except httpx.HTTPError:
        raise PairsieveError(
            "prefect_api",
            f"the Prefect API does not answer within {ANSWER_TIMEOUT_S:.0f} s: start the server, "
            "or unset PREFECT_API_URL to run on a local ephemeral API",
            knob="PREFECT_API_URL",
            url=url,
        ) from None


def scheduler_answers(runner: RunnerConfig) -> None:
    """The Dask scheduler or Ray head named by ``runner.address`` takes a connection."""
    if runner.task_runner == "threads" or not runner.address:
        return
    target = _host_port(runner.address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=ANSWER_TIMEOUT_S):
            pass
    except OSError:
        raise PairsieveError(
            "scheduler_unreachable",
            f"the {runner.task_runner} scheduler does not answer within "
            f"{ANSWER_TIMEOUT_S:.0f} s: start it, or unset runner.address to run on local workers",
            knob="runner.address",
            url=runner.address,
        ) from None
