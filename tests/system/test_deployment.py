"""A real Prefect server on 127.0.0.1, `pairsieve serve` as the worker, a deployment run end to end.

The same services docker-compose.yml runs (server, worker serving the deployments), started as
local processes because no Docker engine runs here, and locked the same way: the server demands
basic auth (PREFECT_SERVER_API_AUTH_STRING), the worker and this test's client send it
(PREFECT_API_AUTH_STRING).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
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


def _post(url: str, auth: str | None = None) -> tuple[int, object]:
    """POST an empty JSON body, with basic auth when given; the status and the decoded answer."""
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


@pytest.fixture
def prefect_server(tmp_path):
    port = _free_port()
    auth = f"pairsieve:{secrets.token_urlsafe(16)}"
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
        env={**env, "PREFECT_SERVER_API_AUTH_STRING": auth},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # /api/health answers without credentials, as docker-compose.yml's healthcheck needs.
        _wait_for(f"http://127.0.0.1:{port}/api/health", 180)
        yield f"http://127.0.0.1:{port}/api", {**env, "PREFECT_API_AUTH_STRING": auth}, auth
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
    api_url, env, auth = prefect_server
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
        os.environ["PREFECT_API_AUTH_STRING"] = auth
        from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

        with temporary_settings({PREFECT_API_URL: api_url, PREFECT_API_AUTH_STRING: auth}):
            flow_run, artifacts = asyncio.run(_run_and_read(api_url))
        anonymous = _post(f"{api_url}/flow_runs/filter")
        wrong = _post(f"{api_url}/flow_runs/filter", auth="pairsieve:wrong")
        status, runs = _post(f"{api_url}/flow_runs/filter", auth=auth)
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        os.environ.pop("PREFECT_API_AUTH_STRING", None)
        worker.terminate()
        worker.wait(30)
        log.close()
    assert flow_run.state.is_completed(), (tmp_path / "worker.log").read_text()[-3000:]
    assert (out / "shards" / "manifest.json").exists()
    assert (out / "report" / "report.html").exists()
    assert artifacts and "false negative" in artifacts[0].data.lower()
    assert anonymous[0] == 401 and wrong[0] == 401
    assert status == 200 and str(flow_run.id) in {run["id"] for run in runs}
