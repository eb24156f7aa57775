"""Faults of the environment, as the libraries raise them, told as one PairsieveError each; a
bug is not mistaken for one."""

from __future__ import annotations

import errno
import os

import polars as pl
import pytest

from pairsieve.errors import PairsieveError
from pairsieve.faults import environment_error, tells_a_fault


def os_error(number: int, path: str = "/data/out/x.parquet") -> OSError:
    return OSError(number, os.strerror(number), path)


@pytest.mark.parametrize(
    ("number", "code"),
    [
        (errno.ENOSPC, "disk_full"),
        (errno.EDQUOT, "disk_full"),
        (errno.EROFS, "read_only"),
        (errno.EACCES, "permission_denied"),
        (errno.EMFILE, "too_many_open_files"),
    ],
)
def test_an_os_error_is_told_by_its_errno_and_names_its_file(number, code):
    fault = environment_error(os_error(number))
    assert fault.code == code
    assert fault.file == "/data/out/x.parquet"


def test_a_polars_write_error_is_told_by_its_text_and_names_the_build(tmp_path):
    error = pl.exceptions.ComputeError(
        "parquet: failed to write: No space left on device (os error 28)"
    )
    fault = environment_error(error, where=str(tmp_path))
    assert (fault.code, fault.file) == ("disk_full", str(tmp_path))


def test_numpys_short_write_is_a_full_disk():
    assert environment_error(OSError("125568 requested and 19424 written")).code == "disk_full"


def test_a_fault_behind_a_wrapping_error_is_found():
    try:
        try:
            raise os_error(errno.ENOSPC)
        except OSError as inner:
            raise RuntimeError("task failed") from inner
    except RuntimeError as outer:
        assert environment_error(outer).code == "disk_full"
    group = ExceptionGroup("two tasks", [ValueError("x"), os_error(errno.EROFS)])
    assert environment_error(group).code == "read_only"


@pytest.mark.parametrize(
    ("exc", "code", "url", "knob"),
    [
        (
            RuntimeError("Failed to reach API at http://127.0.0.1:9/api/"),
            "prefect_api",
            "http://127.0.0.1:9/api",
            "PREFECT_API_URL",
        ),
        (
            OSError("Timed out trying to connect to tcp://10.0.0.5:8786 after 30 s"),
            "scheduler_unreachable",
            "tcp://10.0.0.5:8786",
            "runner.address",
        ),
        (
            RuntimeError("Timed out while attempting to connect to ephemeral Prefect API server."),
            "prefect_api",
            None,
            "PREFECT_HOME",
        ),
    ],
)
def test_services_that_do_not_answer_are_named_by_url_and_setting(exc, code, url, knob):
    fault = environment_error(exc)
    assert (fault.code, fault.url, fault.knob) == (code, url, knob)


def test_a_bug_is_not_a_fault():
    assert environment_error(ValueError("shapes (3,) and (4,) not aligned")) is None
    assert environment_error(KeyError("listing_id")) is None
    assert environment_error(os_error(errno.ENOENT)) is None
    assert not tells_a_fault(
        "Finished in state Failed('Task run encountered an exception ValueError')"
    )


def test_a_pairsieve_error_is_itself_and_is_told():
    error = PairsieveError("locked", "busy", file="/x")
    assert environment_error(RuntimeError("wrapped")) is None
    assert environment_error(error) is error
    assert tells_a_fault("Task run encountered an exception PairsieveError: [locked] busy")
    assert str(PairsieveError("prefect_api", "down", url="http://h/api")).endswith(
        "(url=http://h/api)"
    )
