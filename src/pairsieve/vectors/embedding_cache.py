"""The on-disk cache of embeddings that every stage and run shares, one model key a folder.

Embedding is the pipeline's slowest step, so a text is embedded at most once per model: its
vector is kept under the model's key and the text's hash. The cache must survive what a
scheduled build meets: runs writing side by side, a run killed mid-write, a corrupt file.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
import uuid
import zipfile
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
_UNREADABLE = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)


class EmbeddingCache:
    """Vectors on disk under ``root/<model_key>/part-*.npz``, one immutable file per write.

    Each write is a new file renamed into place, so concurrent runs never clobber each other and
    an interrupted write leaves only a ``.part-*.tmp`` file, which readers never look at. A part
    that cannot be read whole (truncated or corrupt: the npz members carry CRC-32 checks) is
    skipped with a warning, never half-read. Readers merge all parts; `compact` folds many small
    parts into one under an exclusive lock, writing the merged part before deleting its sources,
    so a concurrent reader always finds every key in one file or the other.
    """

    dtype: type = np.float32  # what `store` writes and lookups return

    def __init__(self, root: str | Path, model_key: str) -> None:
        self.folder = Path(root).expanduser() / model_key
        # Only the keys are held: a sorted key index says which part file and row hold each
        # vector, and a lookup reads the parts it needs one at a time. Holding every part read
        # kept the whole cache resident (1.7 GB at 10^6 listings) for the rest of the process.
        self._files: list[Path] = []  # the parts indexed
        self._keys = np.empty(0, dtype=np.uint64)  # (m,) sorted, distinct
        self._part_of = np.empty(0, dtype=np.int32)  # (m,) index into _files per key
        self._row_of = np.empty(0, dtype=np.int64)  # (m,) row in that part
        self._dim = 0
        self._seen_parts: set[str] = set()
        self._damaged: set[str] = set()  # parts a lookup could not read: never indexed again
        self._lock = threading.Lock()  # partition tasks on the thread runner share one view

    def _read_part(self, part: Path) -> tuple[np.ndarray, np.ndarray] | None:
        """(keys, vectors) of one part, or None if it vanished (compacted) or is damaged."""
        try:
            with np.load(part) as data:
                keys, vectors = data["keys"], data["vectors"]
        except FileNotFoundError:
            return None
        except _UNREADABLE as exc:
            log.warning("skipping unreadable embedding cache part %s: %s", part, exc)
            return None
        if keys.ndim != 1 or vectors.ndim != 2 or len(keys) != len(vectors):
            log.warning("skipping malformed embedding cache part %s", part)
            return None
        return keys.astype(np.uint64, copy=False), vectors.astype(self.dtype, copy=False)

    def _read_keys(self, part: Path) -> np.ndarray | None:
        """The keys of one part, its vectors' shape checked from their header alone; None if
        it vanished (compacted) or is damaged."""
        try:
            with np.load(part) as data:
                keys = data["keys"]
                with data.zip.open("vectors.npy") as member:
                    version = np.lib.format.read_magic(member)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape = read_header(member)[0]
        except FileNotFoundError:
            return None
        except _UNREADABLE as exc:
            log.warning("skipping unreadable embedding cache part %s: %s", part, exc)
            return None
        if keys.ndim != 1 or len(shape) != 2 or len(keys) != shape[0]:
            log.warning("skipping malformed embedding cache part %s", part)
            return None
        self._dim = shape[1]
        return keys.astype(np.uint64, copy=False)

    def _refresh(self) -> None:
        """Index parts written since the last look (by this or any other process)."""
        keys, parts, rows = [self._keys], [self._part_of], [self._row_of]
        for _ in range(3):  # a part deleted by a compaction was merged into one listed next time
            listed = sorted(
                p
                for p in self.folder.glob("part-*.npz")
                if p.name not in self._seen_parts and p.name not in self._damaged
            )
            vanished = False
            for part in listed:
                loaded = self._read_keys(part)
                vanished |= loaded is None and not part.exists()
                if loaded is not None:
                    keys.append(loaded)
                    parts.append(np.full(len(loaded), len(self._files), dtype=np.int32))
                    rows.append(np.arange(len(loaded), dtype=np.int64))
                    self._files.append(part)
                if loaded is not None or part.exists():
                    self._seen_parts.add(part.name)
            if not vanished:
                break
        if len(keys) == 1:
            return
        # Sorted and distinct; a key in two parts (a compaction's merge) has equal vectors.
        self._keys, first = np.unique(np.concatenate(keys), return_index=True)
        self._part_of = np.concatenate(parts)[first]
        self._row_of = np.concatenate(rows)[first]

    def _forget(self) -> None:
        """Drop the index: the next look reads every part's keys again."""
        self._files, self._seen_parts = [], set()
        self._keys = np.empty(0, dtype=np.uint64)
        self._part_of = np.empty(0, dtype=np.int32)
        self._row_of = np.empty(0, dtype=np.int64)

    @property
    def size(self) -> int:
        """Number of distinct cached texts (after reading every part on disk)."""
        with self._lock:
            self._refresh()
            return len(self._keys)

    def contains(self, keys: np.ndarray) -> np.ndarray:
        """(n,) bool: which of ``keys`` (n,) uint64 are cached (no vectors read)."""
        with self._lock:
            self._refresh()
            known = self._keys
        if len(known) == 0:
            return np.zeros(len(keys), dtype=bool)
        return known[np.searchsorted(known, keys).clip(max=len(known) - 1)] == keys

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(found mask (n,) bool, vectors of the found keys (m, d)) for ``keys`` (n,) uint64.

        The parts holding them are read one at a time. A part compacted away since it was
        indexed, or found damaged now, makes the lookup index the folder again and retry;
        the damaged part's texts are then simply not found.
        """
        for _ in range(3):
            with self._lock:
                self._refresh()
                known, part_of, row_of = self._keys, self._part_of, self._row_of
                files, dim = list(self._files), self._dim
            if len(known) == 0:
                return np.zeros(len(keys), dtype=bool), None
            pos = np.searchsorted(known, keys).clip(max=len(known) - 1)
            found = known[pos] == keys
            part, row = part_of[pos[found]], row_of[pos[found]]
            vectors = np.empty((len(part), dim), dtype=self.dtype)
            for index in np.unique(part).tolist():
                loaded = self._read_part(files[index])
                if loaded is None:
                    break
                here = part == index
                vectors[here] = loaded[1][row[here]]
            else:
                return found, vectors
            with self._lock:
                if files[index].exists():
                    self._damaged.add(files[index].name)
                self._forget()
        raise OSError(f"the embedding cache in {self.folder} kept changing while it was read")

    def store(self, keys: np.ndarray, vectors: np.ndarray) -> Path | None:
        """Persist ``vectors`` (n, d) under ``keys`` (n,) uint64 as one new part file."""
        if len(keys) == 0:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"part-{uuid.uuid4().hex}.npz"
        tmp = self.folder / f".{final.name}.tmp"
        try:
            with open(tmp, "wb") as handle:
                np.savez(handle, keys=keys.astype(np.uint64), vectors=vectors.astype(self.dtype))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)
        return final

    def compact(self, min_parts: int = 2, stale_tmp_seconds: float = 3600) -> int:
        """Merge all parts into one (if at least ``min_parts``); returns the parts removed.

        Holds an exclusive ``flock`` so two compactions never run at once (a second caller
        returns 0 at once); writers need no lock. Also deletes ``.tmp`` files older than
        ``stale_tmp_seconds``, left by killed writers.
        """
        if not self.folder.exists():
            return 0
        with open(self.folder / ".compact.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0
            now = time.time()
            for tmp in self.folder.glob(".part-*.tmp"):
                if now - tmp.stat().st_mtime > stale_tmp_seconds:
                    tmp.unlink(missing_ok=True)
            parts = sorted(self.folder.glob("part-*.npz"))
            if len(parts) < min_parts:
                return 0
            loaded = [(part, self._read_part(part)) for part in parts]
            merged = [data for _, data in loaded if data is not None]
            if len(merged) < min_parts:
                return 0
            keys = np.concatenate([k for k, _ in merged])
            distinct, first = np.unique(keys, return_index=True)
            self.store(distinct, np.concatenate([v for _, v in merged])[first])
            for part, data in loaded:
                if data is not None:  # a damaged part is left for a human to look at
                    part.unlink(missing_ok=True)
            log.info(
                "compacted %d cache parts (%d vectors) in %s",
                len(merged),
                len(distinct),
                self.folder,
            )
            return len(merged)
