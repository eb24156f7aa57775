"""Atomic artifact writing and content fingerprints.

Every artifact is written under a temporary name and renamed into place, so a reader (or a
resumed run) never sees a half-written file. Whole stage folders are published the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

# Parquet settings fixed here so that the same frame always gives the same bytes.
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 3, "statistics": True}


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling path; rename it onto ``path`` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(final)
    try:
        yield tmp
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def write_parquet(frame: pl.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` atomically with the project's fixed parquet settings."""
    with atomic_path(path) as tmp:
        frame.write_parquet(tmp, **PARQUET_OPTIONS)
    return Path(path)


def write_json(obj: Any, path: str | Path) -> Path:
    """Write ``obj`` as sorted, indented JSON atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    return Path(path)


def write_text(text: str, path: str | Path) -> Path:
    """Write a text file atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


@contextlib.contextmanager
def staged_dir(final: str | Path) -> Iterator[Path]:
    """Yield an empty temporary folder that replaces ``final`` only when the block succeeds.

    A stage writes all its files into the yielded folder; a crash leaves ``final`` as it was
    (the previous complete output, or nothing) and the temporary folder is removed.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:12]}")
    tmp.mkdir()
    try:
        yield tmp
        old = None
        if final.exists():
            old = final.with_name(f".{final.name}.old-{uuid.uuid4().hex[:12]}")
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_text(text: str) -> str:
    """sha256 hex digest of a string."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def fingerprint(paths: list[str | Path]) -> str:
    """One sha256 over the names and bytes of local files (order-independent)."""
    digest = hashlib.sha256()
    for path in sorted(str(p) for p in paths):
        digest.update(Path(path).name.encode())
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()
