"""A kept run is keyed by the build's rows, not by its config: a knob that moves no row keeps it."""

from __future__ import annotations

import json
from pathlib import Path

from pairsieve.core.layout import RunLayout
from pairsieve.experiment.runner import _fingerprint

MANIFEST = {
    "config_hash": "a" * 64,
    "files": {"train": [{"name": "train-00000.parquet", "sha256": "b" * 64, "rows": 3}]},
    "input_fingerprints": {"inputs": "c" * 64},
}


def _build(root: Path, **changes) -> Path:
    manifest = RunLayout(root).manifest
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({**MANIFEST, **changes}))
    return root


def test_a_config_change_that_moves_no_row_keeps_the_fingerprint(tmp_path):
    same = _build(tmp_path / "a"), _build(tmp_path / "b", config_hash="d" * 64)
    assert _fingerprint(same[0]) == _fingerprint(same[1])


def test_other_rows_or_inputs_change_it(tmp_path):
    base = _fingerprint(_build(tmp_path / "a"))
    files = {"train": [{"name": "train-00000.parquet", "sha256": "e" * 64, "rows": 3}]}
    assert _fingerprint(_build(tmp_path / "b", files=files)) != base
    inputs = {"inputs": "f" * 64}
    assert _fingerprint(_build(tmp_path / "c", input_fingerprints=inputs)) != base
