"""Sentence embeddings: offline encoder loading, batching, and the cache in front of them.

Embedding is the pipeline's slowest step (MiniLM embeds ~190 titles/s on 2 cores), so every text
is embedded at most once per model: texts are deduplicated, and vectors are cached on disk keyed
by (model key, text hash), shared by all stages and runs (`vectors.embedding_cache`). Encoding
streams over partitions of ``EmbedConfig.partition_size`` distinct texts, each stored as soon as
it is done, so memory stays bounded and an interrupted run resumes where it stopped;
`plan_partitions`, `write_partitions` and `embed_partition` let a Prefect flow map the
partitions, as files, as tasks. The ONNX Runtime backends live in `pairsieve.vectors.onnx`;
their speed and quality are in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl

from pairsieve.config import EmbedConfig, PairsieveConfig
from pairsieve.core import progress
from pairsieve.core.hashing import text_keys
from pairsieve.core.io import write_parquet
from pairsieve.errors import PairsieveError
from pairsieve.faults import environment_error
from pairsieve.vectors.embedding_cache import EmbeddingCache
from pairsieve.vectors.model_identity import bundled_model_path, weights_identity

log = logging.getLogger(__name__)

PARTITION_TEXT = "text"  # the one column of a partition file


class Encoder(Protocol):
    """Anything that turns texts into L2-normalised float32 vectors."""

    model_key: str

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n,) texts -> (n, d) float32, unit norm."""
        ...


def model_folder(cfg: EmbedConfig) -> str:
    """The model folder to load: ``cfg.model_path``, else the bundled one.

    Checked before anything loads or exports it, so a wrong path ends in one error that names
    the setting, not in a model hub's complaint about repository names, and leaves no export
    lock behind.

    Raises:
        PairsieveError: ``missing_file`` when the folder holds no ``config.json``.
    """
    path = cfg.model_path or bundled_model_path()
    if not (Path(path) / "config.json").is_file():
        raise PairsieveError(
            "missing_file",
            "no model here: a sentence-transformers folder (config.json and weights) is needed",
            file=path,
            knob="embed.model_path",
        )
    return path


class SentenceTransformerEncoder:
    """The real encoder: a local sentence-transformers model, never downloaded."""

    def __init__(self, cfg: EmbedConfig) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        path = model_folder(cfg)
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
    """Cache namespace: which weights (`model_identity.weights_identity`), backend, sequence
    limit."""
    ident = "|".join([*weights_identity(path), cfg.backend, str(cfg.max_seq_length)])
    if cfg.backend != "torch":  # torch keys predate the ONNX export; keep them stable
        from pairsieve.vectors.onnx import EXPORT_VERSION

        ident += f"|export-v{EXPORT_VERSION}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def load_encoder(cfg: EmbedConfig, cache_dir: str | Path | None = None) -> Encoder:
    """Load the configured encoder (a setup step: ~10 s of imports and weights).

    ONNX backends export the bundled weights once into ``<cache_dir>/onnx/`` (``cache_dir``
    defaults to `PairsieveConfig.cache_dir`'s default; pass ``cfg.cache_dir``).
    """
    path = model_folder(cfg)
    try:
        if cfg.backend == "torch":
            return SentenceTransformerEncoder(cfg)
        from pairsieve.vectors.onnx import OnnxEncoder, ensure_onnx_model

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        onnx_file = ensure_onnx_model(path, _export_root(cache_dir), cfg.backend)
        return OnnxEncoder(onnx_file, path, cfg, _model_key(path, cfg))
    except (OSError, ValueError, RuntimeError) as exc:
        if environment_error(exc) is not None:
            raise  # a full disk or read-only cache, told as such
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise PairsieveError(
            "bad_model",
            f"the model folder does not load: {first_line}",
            file=path,
            knob="embed.model_path",
        ) from exc


@contextlib.contextmanager
def exporting_beside(cfg: PairsieveConfig) -> Iterator[None]:
    """While the block runs, a thread of its own makes the ONNX export the embedding stage
    will load, if it is missing: a build's first seconds (Prefect's start, ingest) then overlap
    the one-time export (~10 s) instead of preceding it. `ensure_onnx_model` makes the stage
    wait for a thread still exporting. A failure here is left to the stage, which exports again
    and says what went wrong. The block's end waits for the thread."""
    worker = None
    if cfg.embed.backend != "torch":
        worker = threading.Thread(target=_export_quietly, args=(cfg,), daemon=True)
        worker.start()
    try:
        yield
    finally:
        if worker is not None:
            worker.join()


def _export_quietly(cfg: PairsieveConfig) -> None:
    from pairsieve.vectors.onnx import ensure_onnx_model

    try:
        ensure_onnx_model(model_folder(cfg.embed), _export_root(cfg.cache_dir), cfg.embed.backend)
    except Exception:  # noqa: BLE001 - the embedding stage exports again and reports
        log.debug("the ONNX export beside the build failed; the stage retries", exc_info=True)


def _export_root(cache_dir: str | Path | None) -> Path:
    """Where ONNX exports live: ``<cache_dir>/onnx/``."""
    default = PairsieveConfig.model_fields["cache_dir"].default
    return Path(cache_dir or default).expanduser() / "onnx"


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
    return shared_cache(cfg.cache_dir, _model_key(model_folder(cfg.embed), cfg.embed))
