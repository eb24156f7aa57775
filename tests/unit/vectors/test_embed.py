"""Embedding cache, partitioned encoding and the ONNX backends, with the real bundled MiniLM."""

from __future__ import annotations

import fcntl
import socket
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from pairsieve.config import EmbedConfig, PairsieveConfig
from pairsieve.core.hashing import text_keys
from pairsieve.errors import PairsieveError
from pairsieve.vectors.embed import (
    _model_key,
    bundled_model_path,
    embed_partition,
    embed_texts,
    load_encoder,
    plan_partitions,
    read_cached,
    read_partition,
    shared_cache,
    write_partitions,
)
from pairsieve.vectors.embedding_cache import EmbeddingCache
from pairsieve.vectors.onnx import model_fingerprint

TITLES = [
    "Apple iPhone 8 Plus 64GB Silver",
    "Apple iPhone 8 Plus 256GB Silver",
    "Samsung Galaxy S8 64GB Midnight Black",
    "Bosch SMS25AW00G Freestanding Dishwasher",
    "Canon EOS 5D Mark IV Body",
    "Nikon D750 24.3MP DSLR body only",
    "Smeg FAB28RPB3 Fridge Freezer pastel blue",
    "AMD Ryzen 7 2700X 3.7GHz Socket AM4 Box",
    "Intel Core i7-8700K 3.7GHz LGA1151 Box",
    "Sony WH-1000XM2 wireless noise cancelling headphones black",
]


class CountingEncoder:
    """Deterministic fake for pure cache logic: a vector per text from its hash."""

    model_key = "fake"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        seeds = text_keys(texts)
        vectors = np.stack([np.random.default_rng(int(s)).normal(size=8) for s in seeds])
        return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def torch_encoder():
    """The fp32 sentence-transformers reference, whatever the default backend is."""
    return load_encoder(EmbedConfig(backend="torch"))


@pytest.fixture(scope="session")
def onnx_cache_root(tmp_path_factory) -> Path:
    """A cache root holding all three ONNX exports of the bundled model (exported once, on the
    thread a build exports on while Prefect starts)."""
    from pairsieve.vectors.embed import exporting_beside

    root = tmp_path_factory.mktemp("onnx-cache")
    with exporting_beside(PairsieveConfig(cache_dir=str(root))):
        pass  # the block's end waits for the export
    return root


def test_the_export_made_beside_a_build_is_the_file_the_stage_loads(onnx_cache_root):
    from pairsieve.vectors.onnx import ensure_onnx_model

    folder = onnx_cache_root / "onnx" / model_fingerprint(bundled_model_path())
    made = {path.name: path.stat().st_mtime_ns for path in folder.glob("*.onnx")}
    assert set(made) == {"model.onnx", "model_optimized.onnx", "model_int8.onnx"}
    loaded = ensure_onnx_model(bundled_model_path(), onnx_cache_root / "onnx", "onnx-int8")
    assert loaded == folder / "model_int8.onnx"
    assert {path.name: path.stat().st_mtime_ns for path in folder.glob("*.onnx")} == made


def test_cache_counts_hits_and_misses(encoder, tmp_path):
    cache = EmbeddingCache(tmp_path, encoder.model_key)
    first, stats = embed_texts([TITLES[0], TITLES[1], TITLES[0], TITLES[2]], encoder, cache)
    assert (stats.texts, stats.distinct, stats.cache_hits, stats.encoded) == (4, 3, 0, 3)
    assert first.shape == (4, 384) and first.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(first[0], first[2])

    again, stats = embed_texts([TITLES[2], TITLES[3], TITLES[0]], encoder, cache)
    assert (stats.distinct, stats.cache_hits, stats.encoded) == (3, 2, 1)
    np.testing.assert_array_equal(again[0], first[3])
    np.testing.assert_array_equal(again[2], first[0])
    # a new reader (another run) sees everything as a hit
    _, stats = embed_texts(TITLES[:4], encoder, EmbeddingCache(tmp_path, encoder.model_key))
    assert (stats.cache_hits, stats.encoded) == (4, 0)


def test_each_partition_is_stored_as_soon_as_it_is_encoded(tmp_path):
    encoder, cache = CountingEncoder(), EmbeddingCache(tmp_path, "fake")
    vectors, stats = embed_texts(TITLES[:5] + TITLES[:2], encoder, cache, partition_size=2)
    assert stats.encoded == 5 and [len(c) for c in encoder.calls] == [2, 2, 1]
    assert len(list(cache.folder.glob("part-*.npz"))) == 3
    np.testing.assert_array_equal(vectors[5:], vectors[:2])


def test_shared_cache_is_one_view_per_folder_that_sees_every_writer(tmp_path):
    """Stages share one view (one index of the keys, not one per stage); partition tasks
    storing from threads, and writers elsewhere, all show up in it."""
    view = shared_cache(str(tmp_path), "fake")
    assert shared_cache(str(tmp_path), "fake") is view
    assert shared_cache(str(tmp_path / "other"), "fake") is not view
    assert not view.lookup(text_keys(TITLES))[0].any()  # read while the folder is empty
    chunks = [TITLES[i : i + 2] for i in range(0, len(TITLES), 2)]
    with ThreadPoolExecutor(4) as pool:  # tasks of the thread runner, each storing a part
        list(pool.map(lambda chunk: embed_texts(chunk, CountingEncoder(), view), chunks))
    found, vectors = view.lookup(text_keys(TITLES))
    assert found.all() and view.size == len(set(TITLES))
    mixed = text_keys([*TITLES[:3], "never embedded"])
    assert view.contains(mixed).tolist() == view.lookup(mixed)[0].tolist() == [True] * 3 + [False]
    np.testing.assert_array_equal(vectors, CountingEncoder().encode(TITLES))
    late = "a title another process embedded later"
    EmbeddingCache(tmp_path, "fake").store(text_keys([late]), CountingEncoder().encode([late]))
    assert view.lookup(text_keys([late]))[0].all()


def test_leftover_tmp_file_and_truncated_part_are_never_read(tmp_path, caplog):
    encoder, cache = CountingEncoder(), EmbeddingCache(tmp_path, "fake")
    good = encoder.encode(TITLES[:3])
    cache.store(text_keys(TITLES[:3]), good)
    # a writer killed mid-way: its tmp file, and a part cut short by a copy that failed
    (cache.folder / ".part-dead.npz.tmp").write_bytes(b"PK\x03\x04 half a zip")
    whole = EmbeddingCache(tmp_path / "other", "fake").store(
        text_keys(TITLES[3:6]), encoder.encode(TITLES[3:6])
    )
    data = whole.read_bytes()
    (cache.folder / "part-truncated.npz").write_bytes(data[: len(data) // 2])

    found, vectors = EmbeddingCache(tmp_path, "fake").lookup(text_keys(TITLES[:6]))
    assert found.tolist() == [True] * 3 + [False] * 3
    np.testing.assert_array_equal(vectors, good)
    assert "unreadable embedding cache part" in caplog.text
    # the texts of the damaged part are simply encoded again
    encoder.calls.clear()
    _, stats = embed_texts(TITLES[:6], encoder, EmbeddingCache(tmp_path, "fake"))
    assert (stats.cache_hits, stats.encoded) == (3, 3)


def test_a_part_damaged_after_it_was_indexed_is_skipped_by_the_lookup(tmp_path, caplog):
    """A lookup reads the vectors of indexed parts only when asked: one found damaged then is
    skipped with a warning, and its texts are encoded again."""
    encoder, cache = CountingEncoder(), EmbeddingCache(tmp_path, "fake")
    good = cache.store(text_keys(TITLES[:3]), encoder.encode(TITLES[:3]))
    bad = cache.store(text_keys(TITLES[3:6]), encoder.encode(TITLES[3:6]))
    view = EmbeddingCache(tmp_path, "fake")
    assert view.contains(text_keys(TITLES[:6])).all()  # both indexed
    data = bytearray(bad.read_bytes())
    data[len(data) // 3] ^= 0xFF  # a flipped bit inside the vectors: its CRC fails
    bad.write_bytes(bytes(data))
    found, vectors = view.lookup(text_keys(TITLES[:6]))
    assert found.tolist() == [True] * 3 + [False] * 3
    np.testing.assert_array_equal(vectors, encoder.encode(TITLES[:3]))
    assert "unreadable embedding cache part" in caplog.text and good.exists()
    _, stats = embed_texts(TITLES[:6], encoder, view)
    assert (stats.cache_hits, stats.encoded) == (3, 3)


def test_interrupted_store_leaves_no_part_and_no_tmp(tmp_path, monkeypatch):
    cache = EmbeddingCache(tmp_path, "fake")

    def savez_then_die(handle, **arrays):
        handle.write(b"PK\x03\x04 partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", savez_then_die)
    with pytest.raises(KeyboardInterrupt):
        cache.store(text_keys(TITLES[:2]), np.ones((2, 8), np.float32))
    assert list(cache.folder.iterdir()) == []
    assert not cache.lookup(text_keys(TITLES[:2]))[0].any()


def test_compact_merges_parts_without_losing_a_concurrent_reader(tmp_path):
    encoder = CountingEncoder()
    for i in range(4):
        EmbeddingCache(tmp_path, "fake").store(
            text_keys(TITLES[2 * i : 2 * i + 3]), encoder.encode(TITLES[2 * i : 2 * i + 3])
        )
    reader = EmbeddingCache(tmp_path, "fake")
    before = reader.lookup(text_keys(TITLES[:9]))[1]
    stale = reader.folder / ".part-old.npz.tmp"
    stale.write_bytes(b"x")

    assert EmbeddingCache(tmp_path, "fake").compact(stale_tmp_seconds=0) == 4
    assert len(list(reader.folder.glob("part-*.npz"))) == 1 and not stale.exists()
    for fresh in (reader, EmbeddingCache(tmp_path, "fake")):
        found, after = fresh.lookup(text_keys(TITLES[:9]))
        assert found.all() and fresh.size == 9
        np.testing.assert_array_equal(after, before)


def test_compact_skips_while_another_process_compacts(tmp_path):
    cache = EmbeddingCache(tmp_path, "fake")
    for title in TITLES[:3]:
        cache.store(text_keys([title]), CountingEncoder().encode([title]))
    with open(cache.folder / ".compact.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert cache.compact() == 0
    assert cache.compact() == 3


def test_torch_model_key_is_stable():
    """Precomputed caches (~/.cache/pairsieve) are keyed by it; a change orphans them."""
    keys = {b: _model_key(bundled_model_path(), EmbedConfig(backend=b)) for b in
            ("torch", "onnx", "onnx-optimized", "onnx-int8")}  # fmt: skip
    assert keys["torch"] == "5e982d2d4e135c6d"
    assert len(set(keys.values())) == 4
    assert _model_key(bundled_model_path(), EmbedConfig(max_seq_length=32)) != keys["torch"]


def test_weights_fine_tuned_into_the_same_folder_get_new_keys(tmp_path):
    """Same folder name, same weight size, other bytes: the old model's cached vectors and ONNX
    export must not serve the new weights."""
    folder = tmp_path / "encoder"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    weights = folder / "model.safetensors"
    weights.write_bytes(bytes(range(256)) * 64)
    cfg = EmbedConfig(backend="onnx-int8")
    before = _model_key(str(folder), cfg), model_fingerprint(str(folder))
    weights.write_bytes(bytes(reversed(range(256))) * 64)  # a training step later, same size
    after = _model_key(str(folder), cfg), model_fingerprint(str(folder))
    assert before[0] != after[0] and before[1] != after[1]
    assert after[1].startswith(f"encoder-{256 * 64}-")  # still readable as folder and size
    renamed = folder.rename(tmp_path / "other")
    assert _model_key(str(renamed), cfg) != after[0]


@pytest.mark.slow
def test_onnx_backends_load_offline_and_agree_with_torch(
    torch_encoder, onnx_cache_root, monkeypatch
):
    def no_network(*args, **kwargs):
        raise AssertionError("the ONNX backend tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    reference = torch_encoder.encode(TITLES)
    for backend, floor in (("onnx", 0.9999), ("onnx-optimized", 0.9999), ("onnx-int8", 0.98)):
        onnx = load_encoder(EmbedConfig(backend=backend), onnx_cache_root)
        vectors = onnx.encode(TITLES)
        cosine = (vectors * reference).sum(axis=1)
        assert vectors.dtype == np.float32 and cosine.min() > floor, backend
        assert cosine.mean() > 0.99, backend
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_int8_vector_does_not_depend_on_its_batch(onnx_cache_root):
    onnx = load_encoder(EmbedConfig(backend="onnx-int8"), onnx_cache_root)
    together = onnx.encode(TITLES)
    np.testing.assert_array_equal(onnx.encode(TITLES[3:5][::-1])[::-1], together[3:5])


_FILL = textwrap.dedent(
    """
    import sys, numpy as np
    from pairsieve.config import EmbedConfig
    from pairsieve.vectors.embed import EmbeddingCache, embed_texts, load_encoder
    root, texts_file, out = sys.argv[1:4]
    texts = open(texts_file, encoding="utf-8").read().splitlines()
    encoder = load_encoder(EmbedConfig(backend="onnx-int8"), root)
    vectors, _ = embed_texts(texts, encoder, EmbeddingCache(root, encoder.model_key), 15)
    np.save(out, vectors)
    """
)


@pytest.mark.slow
def test_two_processes_filling_one_cache_agree(shared_data, onnx_cache_root, tmp_path):
    import polars as pl

    titles = pl.read_csv(shared_data / "pricerunner" / "pricerunner_aggregate.csv", n_rows=400)
    texts = titles["product_title"].unique(maintain_order=True).to_list()[:120]
    root = tmp_path / "cache"
    root.mkdir()
    (root / "onnx").symlink_to(onnx_cache_root / "onnx")
    texts_file = tmp_path / "texts.txt"
    texts_file.write_text("\n".join(texts), encoding="utf-8")
    outs = [tmp_path / f"out{i}.npy" for i in range(2)]
    procs = [
        subprocess.Popen([sys.executable, "-c", _FILL, str(root), str(texts_file), str(out)])
        for out in outs
    ]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]

    first, second = (np.load(out) for out in outs)
    np.testing.assert_array_equal(first, second)
    encoder_key = _model_key(bundled_model_path(), EmbedConfig(backend="onnx-int8"))
    cache = EmbeddingCache(root, encoder_key)
    assert cache.size == len(texts)
    np.testing.assert_array_equal(read_cached(texts, cache), first)
    assert cache.compact() >= 8  # at least the 8 partitions of one process
    np.testing.assert_array_equal(read_cached(texts, EmbeddingCache(root, encoder_key)), first)


@pytest.mark.slow
def test_partitions_map_as_tasks_and_warm_cache_plans_nothing(onnx_cache_root, tmp_path):
    root = tmp_path / "cache"
    root.mkdir()
    (root / "onnx").symlink_to(onnx_cache_root / "onnx")
    cfg = PairsieveConfig(cache_dir=str(root)).with_(
        **{"embed.backend": "onnx-int8", "embed.partition_size": 100}
    )
    texts = [f"{title} {size}" for title in TITLES for size in ("S", "M", "L")] * 2  # 30 distinct
    encoder = load_encoder(cfg.embed, root)
    cache = EmbeddingCache(root, encoder.model_key)
    partitions = plan_partitions(texts, cache, partition_size=8)
    assert [len(p) for p in partitions] == [8, 8, 8, 6]
    assert [t for p in partitions for t in p] == sorted(set(texts))
    files = write_partitions(partitions, tmp_path / "partitions")
    assert [read_partition(path) for path in files] == partitions
    with ThreadPoolExecutor(2) as pool:
        stats = list(pool.map(lambda path: embed_partition(path, cfg), files))
    assert sum(s.encoded for s in stats) == 30
    assert plan_partitions(texts, cache, partition_size=8) == []

    vectors = read_cached(texts, cache)
    expected, _ = embed_texts(texts, encoder)  # no cache: encoded afresh
    np.testing.assert_array_equal(vectors, expected)
    with pytest.raises(PairsieveError, match="not in the embedding cache"):
        read_cached(["a title nobody embedded"], cache)


@pytest.mark.parametrize("backend", ["torch", "onnx-int8"])
def test_a_model_path_without_a_model_is_one_error_naming_the_setting(tmp_path, backend):
    """A wrong `embed.model_path` stops before anything loads or exports: one error that names
    the folder and the setting, and no export lock left in the cache."""
    from pairsieve.config import PairsieveConfig
    from pairsieve.errors import PairsieveError
    from pairsieve.vectors.embed import cache_for

    missing = tmp_path / "no-such-model"
    cfg = PairsieveConfig().with_(
        **{"embed.model_path": str(missing), "embed.backend": backend,
           "cache_dir": str(tmp_path / "cache")}
    )  # fmt: skip
    for attempt in (lambda: load_encoder(cfg.embed, cfg.cache_dir), lambda: cache_for(cfg)):
        with pytest.raises(PairsieveError) as found:
            attempt()
        assert found.value.code == "missing_file"
        assert found.value.knob == "embed.model_path" and found.value.file == str(missing)
    assert not list(tmp_path.rglob(".export.lock"))


@pytest.mark.parametrize("backend", ["torch", "onnx-int8"])
def test_a_model_folder_that_does_not_load_is_one_error_and_leaves_no_lock(tmp_path, backend):
    """A folder with a config but no weights (a half-copied model) fails to load: one error
    naming the folder and the setting, and no export folder left holding only its lock."""
    from pairsieve.config import EmbedConfig
    from pairsieve.errors import PairsieveError

    broken = tmp_path / "half-copied"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(PairsieveError) as found:
        load_encoder(EmbedConfig(model_path=str(broken), backend=backend), tmp_path / "cache")
    assert (found.value.code, found.value.file) == ("bad_model", str(broken))
    assert found.value.knob == "embed.model_path"
    assert not list(tmp_path.rglob(".export.lock"))


def test_an_export_beside_the_build_that_fails_leaves_the_error_to_the_stage(tmp_path):
    from pairsieve.vectors.embed import exporting_beside

    broken = tmp_path / "half-copied"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "bert"}')
    cfg = PairsieveConfig(cache_dir=str(tmp_path / "cache")).with_(
        **{"embed.model_path": str(broken)}
    )
    with exporting_beside(cfg):
        pass  # no error escapes the thread
    assert not list(tmp_path.rglob(".export.lock")) and not list(tmp_path.rglob("*.onnx"))
