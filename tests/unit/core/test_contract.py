from __future__ import annotations

import json

import pytest

from pairsieve.core import io
from pairsieve.core.contract import StageResult, code_version, load_result, run_stage


def _body(calls):
    def body(tmp):
        calls.append(tmp)
        io.write_text("hello", tmp / "out.txt")
        return StageResult("x", rows_in=3, rows_out=2, dropped_by_reason={"bad": 1})

    return body


def test_run_stage_publishes_and_skips_when_up_to_date(tmp_path):
    calls = []
    first = run_stage("x", tmp_path, "cfg1", "fp1", _body(calls))
    assert first.balanced() and not first.skipped
    assert (tmp_path / "x" / "out.txt").read_text() == "hello"
    saved = json.loads((tmp_path / "x" / "stage.json").read_text())
    assert saved["rows_in"] == 3 and saved["config_hash"] == "cfg1"
    again = run_stage("x", tmp_path, "cfg1", "fp1", _body(calls))
    assert again.skipped and len(calls) == 1
    run_stage("x", tmp_path, "cfg2", "fp1", _body(calls))
    assert len(calls) == 2


def test_a_stage_that_other_code_ran_is_run_again(tmp_path):
    """An upgrade re-runs a stage whose inputs and config did not change: its outputs may."""
    calls = []
    first = run_stage("x", tmp_path, "cfg1", "fp1", _body(calls))
    assert first.code_version == code_version() and len(code_version()) == 16
    saved = tmp_path / "x" / "stage.json"
    for recorded in ("0123456789abcdef", None):  # another version; a file from before the field
        data = json.loads(saved.read_text())
        if recorded is None:
            data.pop("code_version")
        else:
            data["code_version"] = recorded
        saved.write_text(json.dumps(data))
        again = run_stage("x", tmp_path, "cfg1", "fp1", _body(calls))
        assert not again.skipped
    assert len(calls) == 3
    assert run_stage("x", tmp_path, "cfg1", "fp1", _body(calls)).skipped


def test_failed_stage_leaves_previous_output_and_no_temp_files(tmp_path):
    run_stage("x", tmp_path, "cfg1", "fp1", _body([]))

    def broken(tmp):
        io.write_text("half", tmp / "out.txt")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        run_stage("x", tmp_path, "cfg2", "fp1", broken)
    assert (tmp_path / "x" / "out.txt").read_text() == "hello"
    assert load_result(tmp_path / "x").config_hash == "cfg1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]


def test_unbalanced_result_is_detected():
    assert not StageResult("x", rows_in=3, rows_out=1, dropped_by_reason={"a": 1}).balanced()
