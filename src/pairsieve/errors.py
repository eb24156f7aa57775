"""The one exception type that stops a run, carrying what a user needs to fix the input."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)  # not frozen: contextlib sets __traceback__ on re-raise
class PairsieveError(Exception):
    """A run-stopping problem with the input or the configuration.

    The CLI prints it as one line and exits with code 2, writing nothing. ``code`` is a stable
    identifier (``missing_file``, ``missing_column``, ``unreadable_file``, ``bad_config`` ...);
    ``file``, ``row``, ``column``, ``knob`` and ``url`` say where to look and what to change.
    """

    code: str
    message: str
    file: str | None = None
    row: int | None = None
    column: str | None = None
    knob: str | None = None
    url: str | None = None

    def __str__(self) -> str:
        where = [
            f"{label}={value}"
            for label, value in (
                ("file", self.file),
                ("row", self.row),
                ("column", self.column),
                ("config", self.knob),
                ("url", self.url),
            )
            if value is not None
        ]
        suffix = f" ({', '.join(where)})" if where else ""
        return f"[{self.code}] {self.message}{suffix}"
