"""docker-compose.yml cannot run here (no Docker engine), so check what would break it: every
command exists, ports and volumes are consistent, the worker talks to the server it waits for,
and the stack is locked by default (loopback ports, credentials only from `.env`, API auth)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from pairsieve.cli import app
from tests.paths import REPO

BIN = Path(sys.executable).parent
COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text()
# Compose's interpolation: `$$` is a literal `$`; `${VAR}`, `${VAR:-default}`, `${VAR:?error}`.
VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}")


def _interpolate(text: str, env: dict[str, str]) -> str:
    """The file as compose reads it with `env` as `.env`; a missing required value raises, as
    compose refuses to start."""

    def substitute(match: re.Match) -> str:
        name, operator, argument = match.groups()
        if name is None:
            return "$"
        value = env.get(name, "")
        if not value and operator in (":?", "?"):
            raise KeyError(f"{name}: {argument}")
        return value or (argument if operator in (":-", "-") else "")

    return VARIABLE.sub(substitute, text)


def _env_example() -> tuple[dict[str, str], set[str]]:
    """The variables `.env.example` sets, and those it only shows commented out."""
    values, commented = {}, set()
    for line in (REPO / ".env.example").read_text().splitlines():
        match = re.fullmatch(r"(#\s*)?(\w+)=(.*)", line.strip())
        if match and match[1]:
            commented.add(match[2])
        elif match:
            values[match[2]] = match[3]
    return values, commented


def _variables(operators: tuple[str | None, ...] = (None, ":-", "-", ":?", "?")) -> set[str]:
    """The variables the compose file reads through any of these operators (None: bare)."""
    return {
        match[1]
        for match in VARIABLE.finditer(COMPOSE_TEXT)
        if match[1] is not None and match[2] in operators
    }


@pytest.fixture(scope="module")
def raw() -> dict:
    """The file before interpolation, to see which values are variable references."""
    return yaml.safe_load(COMPOSE_TEXT)


@pytest.fixture(scope="module")
def compose() -> dict:
    """The stack as compose would run it from a `.env` copied from `.env.example`."""
    return yaml.safe_load(_interpolate(COMPOSE_TEXT, _env_example()[0]))


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
    assert [f"127.0.0.1:{server_port}:{server_port}"] == services["prefect-server"]["ports"]
    api_url = services["worker"]["environment"]["PREFECT_API_URL"]
    assert api_url == f"http://prefect-server:{server_port}/api"
    scheduler_port = services["dask-scheduler"]["command"][5]
    worker_address = f"tcp://dask-scheduler:{scheduler_port}"
    assert worker_address in services["dask-worker"]["command"]
    assert any(worker_address in word for word in services["worker"]["command"])
    dashboard = services["dask-scheduler"]["command"][-1].lstrip(":")
    assert {scheduler_port, dashboard} == set(services["dask-scheduler"]["expose"])


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


def test_published_ports_bind_loopback_unless_the_user_opens_them(compose):
    """A port without a host address (`4200:4200`) is published on every interface."""
    published = {name: s["ports"] for name, s in compose["services"].items() if "ports" in s}
    assert set(published) == {"prefect-server"}  # Postgres and Dask (no auth) stay inside
    for name, ports in published.items():
        for port in ports:
            host_ip, _, _ = port.split(":")
            assert host_ip == "127.0.0.1", (name, port)
    opened = yaml.safe_load(
        _interpolate(COMPOSE_TEXT, {**_env_example()[0], "PAIRSIEVE_BIND": "0.0.0.0"})
    )
    assert opened["services"]["prefect-server"]["ports"] == ["0.0.0.0:4200:4200"]


def test_no_credential_is_written_in_the_file(raw):
    secret = re.compile(r"PASSWORD|AUTH|SECRET|TOKEN|USER")
    required_reference = re.compile(r"\$\{\w+(:\?[^}]*)?\}")
    for name, service in raw["services"].items():
        for key, value in service.get("environment", {}).items():
            if secret.search(key):
                assert required_reference.fullmatch(str(value)), (name, key, value)
    assert not re.search(r"://[^\s/]*@", COMPOSE_TEXT), "a URL carries user:password@"


def test_the_api_demands_auth_and_the_worker_sends_it(raw):
    services = raw["services"]
    server_auth = services["prefect-server"]["environment"]["PREFECT_SERVER_API_AUTH_STRING"]
    worker_auth = services["worker"]["environment"]["PREFECT_API_AUTH_STRING"]
    variable = VARIABLE.fullmatch(server_auth)[1]
    assert variable == VARIABLE.fullmatch(worker_auth)[1]
    assert variable in _variables((":?",))
    # GET /api/health stays open under auth (tests/system/test_deployment.py), so the probe
    # needs no credentials.
    assert "/api/health" in " ".join(services["prefect-server"]["healthcheck"]["test"])


def test_env_example_defines_what_compose_requires_and_env_is_ignored():
    values, commented = _env_example()
    required = _variables((":?", "?"))
    assert required and all(values.get(name) for name in required), required - set(values)
    assert _variables() <= set(values) | commented
    # Prefect reads `.env` from its working folder: these names must not configure it.
    assert not [name for name in set(values) | commented if name.startswith("PREFECT_")]
    for name in required:
        with pytest.raises(KeyError, match=name):
            _interpolate(COMPOSE_TEXT, {k: v for k, v in values.items() if k != name})
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert ".env" in ignored or "/.env" in ignored
