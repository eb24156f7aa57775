"""docker-compose.yml cannot run here (no Docker engine), so check what would break it: every
command exists, ports and volumes are consistent, the worker talks to the server it waits for."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from pairsieve.cli import app
from tests.paths import REPO

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_services_and_health_checks(compose):
    services = compose["services"]
    assert {"postgres", "prefect-server", "worker", "dask-scheduler", "dask-worker"} <= set(
        services
    )
    for name in ("postgres", "prefect-server", "dask-scheduler"):
        assert "healthcheck" in services[name], name
    for name, service in services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services, (name, dependency)
            if condition["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], (name, dependency)


def test_every_command_exists_in_the_installed_package(compose):
    pairsieve_commands = set(get_command(app).commands)
    for name, service in compose["services"].items():
        command = service.get("command")
        if not command:
            continue
        executable = command[0]
        assert (BIN / executable).exists() or shutil.which(executable), (name, executable)
        if executable == "pairsieve":
            assert command[1] in pairsieve_commands, (name, command[1])
            result_help = get_command(app).commands[command[1]]
            options = {opt for param in result_help.params for opt in param.opts}
            for word in command[2:]:
                if word.startswith("--"):
                    assert word in options, (name, word)


def test_ports_and_addresses_agree(compose):
    services = compose["services"]
    server_port = services["prefect-server"]["command"][-1]
    assert f"{server_port}:{server_port}" in services["prefect-server"]["ports"]
    api_url = services["worker"]["environment"]["PREFECT_API_URL"]
    assert api_url == f"http://prefect-server:{server_port}/api"
    scheduler_port = services["dask-scheduler"]["command"][5]
    worker_address = f"tcp://dask-scheduler:{scheduler_port}"
    assert worker_address in services["dask-worker"]["command"]
    assert any(worker_address in word for word in services["worker"]["command"])
    dashboard = services["dask-scheduler"]["command"][-1].lstrip(":")
    assert f"{dashboard}:{dashboard}" in services["dask-scheduler"]["ports"]


def test_volumes_are_declared_and_shared_where_work_meets(compose):
    declared = set(compose["volumes"])
    mounts = {}
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source, target = volume.split(":")[:2]
            assert source in declared, (name, source)
            mounts.setdefault(name, {})[source] = target
    # The worker and the Dask workers must see the same runs and cache folders.
    for shared in ("runs", "cache", "input"):
        assert mounts["worker"][shared] == mounts["dask-worker"][shared]
    cache_target = mounts["worker"]["cache"]
    assert any(cache_target in word for word in compose["services"]["worker"]["command"])


def test_prefect_yaml_entrypoints_exist():
    spec = yaml.safe_load((REPO / "flows" / "prefect.yaml").read_text())
    for deployment in spec["deployments"]:
        path, flow_name = deployment["entrypoint"].split(":")
        assert (REPO / path).exists()
        assert "import" in (REPO / path).read_text() and flow_name in (REPO / path).read_text()
