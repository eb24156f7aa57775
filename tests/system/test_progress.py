"""Progress of a build's long steps: bars on a terminal (a pseudo-terminal here), plain lines in a
log, and progress artifacts in Prefect, all with the same counts."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time

import pytest

from tests.system.test_crash import build_command, make_fixture

# Long steps a build on a cold cache goes through, each with its unit.
STEPS = {
    "embedding texts": "texts",
    "computing MinHash signatures": "partitions",
    "banding MinHash signatures": "partitions",
    "pairing LSH buckets": "partitions",
    "finding nearest titles": "partitions",
    "judging candidate pairs": "partitions",
    "linking accepted pairs": "partitions",
    "mining hard negatives": "partitions",
    "writing train shards": "rows",
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture(scope="module")
def build_env(prefect_harness) -> dict:
    """Builds talk to the session's Prefect API, where the test reads their artifacts."""
    from prefect.settings import PREFECT_API_URL

    return {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value())}


def run_in_terminal(args: list[str], env: dict, timeout: float = 600) -> tuple[int, str]:
    """Run ``args`` with stdin, stdout and stderr on a pseudo-terminal; (exit code, output)."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(args, env=env, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the other end closed: the build ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(controller)
    return proc.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def test_progress_on_a_terminal_in_a_log_and_in_prefect(build_env, tmp_path):
    inputs = make_fixture(tmp_path / "in")
    cache = tmp_path / "cache"  # cold: the embedding and signature steps have work to show
    env = {**build_env, "TERM": "xterm-256color", "COLUMNS": "120"}
    code, shown = run_in_terminal(build_command(inputs, tmp_path / "tty", cache), env)
    assert code == 0, shown[-3000:]
    plain = ANSI.sub("", shown)
    for name, unit in STEPS.items():
        # rich draws the bar (━) beside the step, its done/total, and the rate in the step's unit
        pattern = rf"{name} [━╸╺ ]+ *\d+% +([\d,]+)/([\d,]+) +[\d,]+ {unit}/s"
        drawn = [(m.group(1), m.group(2)) for m in re.finditer(pattern, plain)]
        assert drawn, f"no bar for {name!r} in:\n{plain[-3000:]}"
        assert drawn[-1][0] == drawn[-1][1], f"{name} ends unfinished: {drawn}"

    def logged(out: str, every_s: str) -> str:
        """What a build writes to a log (stderr, no terminal) with ``every_s`` between lines."""
        command = build_command(inputs, tmp_path / out, cache)
        command += ["--set", f"runner.progress_every_s={every_s}"]
        done = subprocess.run(command, env=build_env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stderr

    quiet = logged("log", "0")
    assert not re.search(rf"({'|'.join(STEPS)}) +[━╸╺]", quiet)  # no bar off a terminal
    assert not re.search(r" of [\d,]+ \w+ \(", quiet)  # progress_every_s=0: no lines
    every = logged("log2", "1e-9")
    cold_only = ("embedding texts", "computing MinHash signatures")  # the cache is warm now
    for name, unit in STEPS.items():
        if name not in cold_only:
            assert re.search(rf"{name}: ([\d,]+) of \1 {unit} \(100%\)", every), name
    _check_prefect_artifacts(STEPS)


def _check_prefect_artifacts(steps: dict[str, str]) -> None:
    """Every step's latest progress artifact in the session's API stands at 100%, described
    with the same counts as the terminal's."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    from pairsieve.orchestration.progress import artifact_key

    keys = {artifact_key(name): name for name in steps}
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=list(keys))),
            sort=ArtifactSort.CREATED_DESC,
        )
    latest = {}
    for artifact in artifacts:
        latest.setdefault(artifact.key, artifact)
    assert set(latest) == set(keys)
    for key, artifact in latest.items():
        assert artifact.type == "progress" and float(artifact.data) == 100.0, key
        assert artifact.description.startswith(f"{keys[key]}: "), artifact.description
        assert artifact.task_run_id is not None or artifact.flow_run_id is not None
