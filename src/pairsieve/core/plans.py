"""A mapped step's plan: what every span of it reads, as one file per field in a folder.

The process that maps a step writes the plan once and holds it (`partitions.hold`): its own
spans use the objects as they are. A span on a worker reads the plan back from the folder. A
step declares its plan as a frozen dataclass deriving from `Plan`; how each field is written
and read follows from its value and its annotation, so no plan writes its own files:

- an array: ``NAME.npy``, memory-mapped when read (a span reads its own rows);
- a table: ``NAME.parquet`` (a lazy frame is streamed to it); read as a scan when the field's
  annotation names ``LazyFrame``, else whole; a series (its name kept) is read whole;
- a number, string, flag or plain dict: an entry of ``settings.json``;
- an object with a ``write(path)`` method (an index in slices, a plan within the plan, a
  file of vectors): written by itself at ``NAME`` in the folder, and read back by the reader
  the plan names for the field in ``readers``;
- anything else: ``NAME.pickle``;
- None: no file, and None when read.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import polars as pl

from pairsieve.core import io, partitions

P = TypeVar("P", bound="Plan")
_SETTINGS = "settings.json"
_SCALARS = (bool, int, float, str, dict)


@dataclass(frozen=True)
class Plan:
    """The base of a step's plan (see the module docstring for how its fields are stored)."""

    # the reader of each field written by its own `write`, given the field's path
    readers: ClassVar[dict[str, Callable[[Path], Any]]] = {}

    def write(self, folder: Path) -> Path:
        """Write every field into ``folder`` and hold the plan in this process."""
        folder.mkdir(parents=True, exist_ok=True)
        settings = {}
        for field in fields(self):
            value, path = getattr(self, field.name), folder / field.name
            if value is None:
                continue
            if isinstance(value, np.ndarray):
                np.save(path.with_suffix(".npy"), value)
            elif isinstance(value, pl.Series):
                io.write_parquet(value.to_frame(), path.with_suffix(".parquet"))
            elif isinstance(value, pl.DataFrame | pl.LazyFrame):
                io.write_parquet(value, path.with_suffix(".parquet"))
            elif isinstance(value, _SCALARS):
                settings[field.name] = value
            elif hasattr(value, "write"):
                value.write(path)
            else:
                with open(path.with_suffix(".pickle"), "wb") as out:
                    pickle.dump(value, out, protocol=pickle.HIGHEST_PROTOCOL)
        io.write_json(settings, folder / _SETTINGS)
        partitions.hold(folder, self)
        return folder

    @classmethod
    def read(cls: type[P], folder: Path) -> P:
        """The plan written into ``folder``, as a span on another process reads it."""
        folder = Path(folder)
        settings = json.loads((folder / _SETTINGS).read_text())
        return cls(**{f.name: _read_field(cls, f.name, str(f.type), folder, settings)
                      for f in fields(cls)})  # fmt: skip


def _read_field(plan: type[Plan], name: str, annotation: str, folder: Path, settings: dict) -> Any:
    """One field of a plan from ``folder`` (see the module docstring); None when not written."""
    path = folder / name
    if name in plan.readers:
        return plan.readers[name](path)
    if name in settings:
        return settings[name]
    if path.with_suffix(".npy").exists():
        return np.load(path.with_suffix(".npy"), mmap_mode="r")
    if path.with_suffix(".parquet").exists():
        table = path.with_suffix(".parquet")
        if "Series" in annotation:
            return pl.read_parquet(table).to_series()
        return pl.scan_parquet(table) if "LazyFrame" in annotation else pl.read_parquet(table)
    if path.with_suffix(".pickle").exists():
        with open(path.with_suffix(".pickle"), "rb") as source:
            return pickle.load(source)
    if path.exists():
        raise TypeError(f"{plan.__name__}.{name} wrote itself, and the plan names no reader for it")
    return None
