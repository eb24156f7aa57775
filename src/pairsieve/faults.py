"""Faults of the environment (a full disk, a read-only folder, an API or scheduler that does not
answer) told as one `PairsieveError` each, so a nightly build's log ends in a line that says what
to fix instead of a traceback through Prefect, polars or faiss.

The libraries report the same fault in different clothes: Python's `OSError` with an errno,
polars' `ComputeError` and faiss' `RuntimeError` with the OS text inside the message, Prefect's
`RuntimeError` naming the API, distributed's `OSError` naming the scheduler. `environment_error`
looks through an exception and its causes for any of them; what it does not recognise is a bug,
and stays a traceback.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator

from pairsieve.errors import PairsieveError

# code, what to do, the errnos that mean it, and the OS texts libraries embed in their messages
_OS_FAULTS = (
    (
        "disk_full",
        "no space left on the device: free space there or point --out at a larger disk",
        {errno.ENOSPC, errno.EDQUOT},
        # numpy's short write ("125568 requested and 19424 written") carries no errno
        (
            "no space left on device",
            "os error 28",
            "disk quota exceeded",
            r"\d+ requested and \d+ written",
        ),
    ),
    (
        "read_only",
        "the file system is read-only: point --out (or the setting named) at a writable folder",
        {errno.EROFS},
        ("read-only file system", "os error 30"),
    ),
    (
        "permission_denied",
        "permission denied: make the folder writable for this user, or choose another",
        {errno.EACCES, errno.EPERM},
        ("permission denied", "os error 13"),
    ),
    (
        "too_many_open_files",
        "too many open files: raise the limit (`ulimit -n 65536`) or lower runner.workers",
        {errno.EMFILE, errno.ENFILE},
        ("too many open files", "os error 24"),
    ),
)
_API_UNREACHABLE = re.compile(r"Failed to reach API at (\S+?)/?$")
_EPHEMERAL_API = "ephemeral Prefect API server"
_SCHEDULER_UNREACHABLE = re.compile(r"Timed out trying to connect to (\S+)")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and the members of exception groups, each once."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack += [e for e in (current.__cause__, current.__context__) if e is not None]
        stack += list(getattr(current, "exceptions", ()))


def _os_fault(exc: BaseException, where: str | None) -> PairsieveError | None:
    number = exc.errno if isinstance(exc, OSError) else None
    text = str(exc).lower()
    for code, advice, numbers, texts in _OS_FAULTS:
        if number in numbers or any(re.search(t, text) for t in texts):
            path = getattr(exc, "filename", None) or where
            return PairsieveError(code, advice, file=str(path) if path else None)
    return None


def _service_fault(exc: BaseException) -> PairsieveError | None:
    text = str(exc)
    if match := _API_UNREACHABLE.search(text):
        return PairsieveError(
            "prefect_api",
            "the Prefect API does not answer: start the server, or unset PREFECT_API_URL to "
            "run on a local ephemeral API",
            knob="PREFECT_API_URL",
            url=match.group(1),
        )
    if _EPHEMERAL_API in text:
        return PairsieveError(
            "prefect_api",
            "Prefect's local API did not start: set PREFECT_HOME to a writable folder",
            knob="PREFECT_HOME",
        )
    if match := _SCHEDULER_UNREACHABLE.search(text):
        return PairsieveError(
            "scheduler_unreachable",
            "the Dask scheduler does not answer: start it, or unset runner.address to run on "
            "local workers",
            knob="runner.address",
            url=match.group(1),
        )
    return None


def tells_a_fault(message: str) -> bool:
    """Whether a log line (Prefect's "Finished in state Failed(...)") names a fault that
    `environment_error` tells in a line of its own."""
    return "PairsieveError" in message or environment_error(RuntimeError(message)) is not None


def environment_error(exc: BaseException, where: str | None = None) -> PairsieveError | None:
    """The `PairsieveError` that tells the environment fault behind ``exc``, or None when it is
    none (a bug, which keeps its traceback). ``where`` is named when the fault carries no path
    of its own (polars and faiss keep the path inside their text)."""
    for current in _chain(exc):
        if isinstance(current, PairsieveError):
            return current
        fault = _os_fault(current, where) or _service_fault(current)
        if fault is not None:
            return fault
    return None
