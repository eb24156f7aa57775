"""A real Prefect server on 127.0.0.1, `pairsieve serve` as the worker, a deployment run end to end.

The same services docker-compose.yml runs (server, worker serving the deployments), started as
local processes because no Docker engine runs here.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.paths import REPO

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise TimeoutError(f"{url} did not answer within {seconds} s")


@pytest.fixture
def prefect_server(tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{tmp_path}/prefect.db",
    }
    env.pop("PREFECT_API_URL", None)
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for(f"http://127.0.0.1:{port}/api/health", 180)
        yield f"http://127.0.0.1:{port}/api", env
    finally:
        server.terminate()
        server.wait(30)
        log.close()


async def _run_and_read(api_url: str):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.deployments import run_deployment

    async with get_client() as client:
        for _ in range(120):
            try:
                await client.read_deployment_by_name("build/pairsieve-build")
                break
            except Exception:  # not registered yet by the serving worker
                await asyncio.sleep(1)
        flow_run = await run_deployment("build/pairsieve-build", timeout=900, poll_interval=2)
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["pairsieve-build"]))
        )
        return flow_run, artifacts


def test_deployment_runs_through_a_serving_worker(prefect_server, tmp_path, session_cache_dir):
    api_url, env = prefect_server
    out = tmp_path / "nightly"
    sample = REPO / "data" / "sample"
    worker_env = {**env, "PREFECT_API_URL": api_url}
    log = open(tmp_path / "worker.log", "w")  # noqa: SIM115
    worker = subprocess.Popen(
        [
            str(BIN / "pairsieve"),
            "serve",
            "--clicks",
            str(sample / "clicks.parquet"),
            "--catalog",
            str(sample / "catalog.parquet"),
            "--out",
            str(out),
            "--set",
            f'cache_dir="{session_cache_dir}"',
        ],
        env=worker_env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        os.environ["PREFECT_API_URL"] = api_url
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings({PREFECT_API_URL: api_url}):
            flow_run, artifacts = asyncio.run(_run_and_read(api_url))
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        worker.terminate()
        worker.wait(30)
        log.close()
    assert flow_run.state.is_completed(), (tmp_path / "worker.log").read_text()[-3000:]
    assert (out / "shards" / "manifest.json").exists()
    assert (out / "report" / "report.html").exists()
    assert artifacts and "false negative" in artifacts[0].data.lower()
