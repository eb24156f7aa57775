"""Shared fixtures: the real bundled encoder (loaded once), a Prefect harness, benchmark paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.paths import SHARED_DATA

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Prefect's API refuses flow-run parameters over this many bytes (512 KB by default). Lowered for
# the whole session, so any flow that passes data instead of paths fails here, not at a user's.
os.environ["PREFECT_SERVER_API_MAX_PARAMETER_SIZE"] = "4096"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only public benchmarks beside the repo; tests needing them skip without them."""
    if not SHARED_DATA.exists():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def encoder():
    """The real bundled MiniLM, loaded once per session (~10 s)."""
    from pairsieve.config import EmbedConfig
    from pairsieve.vectors.embed import load_encoder

    return load_encoder(EmbedConfig())


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory) -> Path:
    """One embedding cache for the whole test session, so each text is embedded once."""
    return tmp_path_factory.mktemp("embedding-cache")


@pytest.fixture(scope="session")
def prefect_harness():
    """One ephemeral Prefect API (SQLite) for every flow test in the session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def pytest_collection_modifyitems(items):
    """Everything under tests/system/ is a system test (whole builds, subprocesses, servers):
    `pytest -m "not system"` runs the fast unit layer alone; CI runs both."""
    system = Path(__file__).parent / "system"
    for item in items:
        if system in Path(item.fspath).parents:
            item.add_marker(pytest.mark.system)
