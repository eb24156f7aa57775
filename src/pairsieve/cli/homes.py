"""Homes that fall back when HOME is read-only, as in many containers: Prefect's home and the
embedding cache move to the temporary folder, and the run says so in one line, instead of
failing an hour in (the cache) or after 51 tracebacks of a local API that could not start
(Prefect). A folder the user named and cannot be written is an error naming its setting.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.errors import PairsieveError


def writable(folder: Path) -> bool:
    """A file can be made in ``folder``, or in the nearest folder above it that exists."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        io.probe_write(existing)
    except OSError:
        return False
    return True


def _fallback(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"pairsieve-{name}-{os.getuid()}"


def prefect_home() -> str | None:
    """Point ``PREFECT_HOME`` at the temporary folder when it is unset and HOME's default cannot
    be written; the line to show, or None. Call it before Prefect reads its settings."""
    if os.environ.get("PREFECT_HOME") or writable(Path.home() / ".prefect"):
        return None
    os.environ["PREFECT_HOME"] = str(_fallback("prefect"))
    return (
        f"note: {Path.home()} is not writable; Prefect's home is {os.environ['PREFECT_HOME']} "
        "(set PREFECT_HOME to choose)"
    )


def cache_dir(cfg: PairsieveConfig) -> tuple[PairsieveConfig, str | None]:
    """``cfg`` with a cache folder that can be written, and the line to show when it moved.

    Raises:
        PairsieveError: ``read_only`` when a cache folder set by the user cannot be written.
    """
    folder = Path(cfg.cache_dir).expanduser()
    if writable(folder):
        return cfg, None
    if cfg.cache_dir != PairsieveConfig.model_fields["cache_dir"].default:
        raise PairsieveError(
            "read_only", "the cache folder cannot be written", file=str(folder), knob="cache_dir"
        )
    moved = _fallback("cache")
    note = (
        f"note: {folder} is not writable; the embedding cache is {moved} (set cache_dir to keep it)"
    )
    return cfg.model_copy(update={"cache_dir": str(moved)}), note
