"""The long steps' progress as Prefect progress artifacts, so the flow run's page in the Prefect UI
shows each step's share done, the same counts a terminal shows as bars.

Each step gets one artifact, created inside the task that runs it (so the UI files it under that
task run) and updated at most every ``every_s`` seconds and when the step ends. Progress is for
people: when the API refuses an update the build goes on, and the first refusal is logged.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from pairsieve.core.progress import Progress, progress_text

log = logging.getLogger(__name__)


def artifact_key(name: str) -> str:
    """The artifact key of a step: Prefect allows lowercase letters, digits and dashes."""
    return "pairsieve-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


class ProgressArtifacts:
    """A `pairsieve.core.progress.Display` that writes Prefect progress artifacts."""

    def __init__(self, every_s: float = 2.0) -> None:
        self.every_s = every_s
        self.working = True

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.working:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - progress must never stop a build
            self.working = False
            log.warning("progress is not shown in Prefect (%s: %s)", type(exc).__name__, exc)
            return None

    def opened(self, step: Progress) -> list[Any] | None:
        created = self._call(
            create_progress_artifact,
            0.0,
            key=artifact_key(step.name),
            description=progress_text(step),
        )
        return None if created is None else [created, time.monotonic()]

    def _update(self, handle: list[Any], step: Progress) -> None:
        handle[1] = time.monotonic()
        share = 100.0 * step.done / step.total
        self._call(update_progress_artifact, handle[0], share, description=progress_text(step))

    def moved(self, handle: list[Any] | None, step: Progress) -> None:
        if handle is not None and time.monotonic() - handle[1] >= self.every_s:
            self._update(handle, step)

    def closed(self, handle: list[Any] | None, step: Progress) -> None:
        if handle is not None:
            self._update(handle, step)
