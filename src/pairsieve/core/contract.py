"""Stage results, row accounting and resumable execution.

A stage is a plain function that writes its files into a folder and returns a `StageResult`.
Every stage has the same signature, ``run(cfg, inputs, out_dir, *, options)``: ``inputs`` is the
stage's own ``Inputs`` (its tables, each a `Source`; ``Inputs.of(layout)`` names them in a build
folder), and the keyword-only options are what a build adds (the shared encoder, the previous
build's state).
`run_stage` gives every stage the same guarantees: its folder appears complete or not at all
(`io.staged_dir`), its `stage.json` records accounting, timings, config hash, input
fingerprints and the code version, and a re-run with unchanged inputs, config and code is
skipped.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import polars as pl

from pairsieve.core import io, memory
from pairsieve.errors import PairsieveError
from pairsieve.schemas import SCHEMA_VERSION, STAGE_JSON

log = logging.getLogger(__name__)

Source = pl.DataFrame | Path | str  # a stage's input table: in memory, or its parquet file


def read_source(frame: Source, name: str, required: tuple[str, ...]) -> pl.DataFrame:
    """A stage's input table (`Source`), read and checked for the columns the stage needs.

    Raises:
        PairsieveError: ``missing_file`` / ``missing_column``, naming ``name`` or the file.
    """
    source = name
    if not isinstance(frame, pl.DataFrame):
        source = str(frame)
        if not Path(frame).exists():
            raise PairsieveError("missing_file", f"{name} not found", file=source)
        frame = pl.read_parquet(frame)
    for column in required:
        if column not in frame.columns:
            raise PairsieveError(
                "missing_column", f"{name} lacks a required column", file=source, column=column
            )
    return frame


@dataclass(frozen=True)
class StageResult:
    """What a stage did: rows in and out, rows dropped per reason, timings and output files.

    The identity ``rows_in == rows_out + sum(dropped_by_reason.values())`` must hold; quarantined
    rows count as dropped under their reason code. ``details`` holds stage-specific figures
    (per-input accounting, per-filter counts) that the report shows.
    """

    stage: str
    rows_in: int
    rows_out: int
    dropped_by_reason: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    config_hash: str = ""
    input_fingerprint: str = ""
    code_version: str = ""  # `code_version()` of the package that ran it
    skipped: bool = False

    @property
    def dropped(self) -> int:
        return sum(self.dropped_by_reason.values())

    def balanced(self) -> bool:
        """True when every input row is accounted for."""
        return self.rows_in == self.rows_out + self.dropped

    def summary(self) -> str:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.dropped_by_reason.items()))
        state = " (skipped: up to date)" if self.skipped else ""
        return (
            f"{self.stage}: {self.rows_in} in, {self.rows_out} kept, {self.dropped} dropped"
            f"{f' [{reasons}]' if reasons else ''}{state}"
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("skipped")
        data["schema_version"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StageResult:
        data = {k: v for k, v in data.items() if k != "schema_version"}
        return cls(**data)


def reasons_text(dropped_by_reason: dict[str, int]) -> str:
    """The reasons that dropped rows, as ``reason=count`` by name with thousands separators;
    reasons that dropped nothing are left out (a stage.json lists every reason it knows)."""
    counts = sorted((k, v) for k, v in dropped_by_reason.items() if v)
    return ", ".join(f"{reason}={count:,}" for reason, count in counts)


def load_result(stage_dir: str | Path) -> StageResult | None:
    """The recorded result of a completed stage folder, or None."""
    path = Path(stage_dir) / STAGE_JSON
    if not path.exists():
        return None
    return StageResult.from_json(json.loads(path.read_text()))


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of the package's sources and data files: a stage that other code ran is not up to
    date, even when its inputs and config are (its outputs may differ)."""
    root = Path(__file__).parents[1]  # the package, not this module's folder
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.suffix in {".py", ".json"}:
            digest.update(f"{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _up_to_date(previous: StageResult | None, config_hash: str, fingerprint: str) -> bool:
    return (
        previous is not None
        and previous.config_hash == config_hash
        and previous.input_fingerprint == fingerprint
        and previous.code_version == code_version()
    )


def run_stage(
    name: str,
    run_dir: str | Path,
    config_hash: str,
    input_fingerprint: str,
    body: Callable[[Path], StageResult],
) -> StageResult:
    """Run ``body(tmp_folder)`` unless ``run_dir/name`` is already complete for these inputs,
    config and code.

    ``body`` writes its files into the folder it is given and returns its result; outputs in the
    result are recorded relative to the stage folder. The folder is published atomically with its
    ``stage.json`` last, so a killed run resumes from the last completed stage.
    """
    final = Path(run_dir) / name
    previous = load_result(final)
    if _up_to_date(previous, config_hash, input_fingerprint):
        log.info("%s", replace(previous, skipped=True).summary())
        return replace(previous, skipped=True)
    started = time.perf_counter()
    with io.staged_dir(final) as tmp:
        result = body(tmp)
        timings = {**result.timings, "total_s": round(time.perf_counter() - started, 3)}
        result = replace(
            result,
            stage=name,
            timings=timings,
            config_hash=config_hash,
            input_fingerprint=input_fingerprint,
            code_version=code_version(),
        )
        io.write_json(result.to_json(), tmp / STAGE_JSON)
    log.info("%s", result.summary())
    # The stage's working set is garbage now; its pages go back before the next stage
    # allocates (at 10^6 listings ~1 GiB that mining would otherwise add on top).
    memory.release()
    return result


def stage_fingerprint(run_dir: str | Path, upstream: list[str]) -> str:
    """Fingerprint of a stage's inputs: the input fingerprints + config hashes upstream recorded.

    Chaining recorded fingerprints (rather than re-hashing big parquet files) is enough because
    a stage's outputs are a deterministic function of its inputs and config.
    """
    parts = []
    for name in upstream:
        result = load_result(Path(run_dir) / name)
        parts.append(f"{name}:{result.input_fingerprint if result else 'missing'}")
        parts.append(f"{name}:{result.config_hash if result else 'missing'}")
    return io.sha256_text("|".join(parts))
