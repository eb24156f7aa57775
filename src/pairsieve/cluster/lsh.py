"""MinHash LSH as maps: the signatures the cache lacks, then the banding as a shuffle (band keys
by span of titles, then buckets by key partition).

The signatures of texts the signature cache lacks are computed a span at a time into the cache
(`signature_span`), like the embeddings. A bucket is the titles that share one band's key. Each
span of titles reads its signatures from the cache and writes every band's keys of its titles
into one file per key partition (`band_keys_span`; the partition is the key modulo their
number). Each partition's task (`bucket_span`) then holds every bucket of its keys whole and
pairs them, skipping buckets over the cap, as `minhash.lsh_pairs` does over the whole catalog in
one process. A task's memory follows its span or its share of the keys, not the catalog; the
flow only gathers the pairs.

The pairs come back sorted and distinct, so they are the same whatever the number of spans
and partitions (`tests/unit/cluster/test_candidates.py` compares them with `lsh_pairs`).
"""

from __future__ import annotations

import json
import math
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from pairsieve.config import PairsieveConfig
from pairsieve.core import io, partitions
from pairsieve.core.partitions import Span
from pairsieve.vectors import minhash

if TYPE_CHECKING:
    from pairsieve.core.partitions import Mapper

SIGNATURES_STEP = "computing MinHash signatures"
KEYS_STEP = "banding MinHash signatures"
BUCKETS_STEP = "pairing LSH buckets"
SIGNATURE_PARTITION = 250_000  # titles per signature cache part, and per mapped span
_TITLES_PER_SPAN = 1 << 18
_KEYS_PER_PARTITION = 1 << 23  # (band, key, title) rows a bucket task holds: ~120 MB
_TEXT = "text"


def signature_encoder(cfg: PairsieveConfig) -> minhash.SignatureEncoder:
    """The encoder (and cache key) of the configured MinHash signatures."""
    c = cfg.cluster
    return minhash.SignatureEncoder(c.shingle_kind, c.shingle_size, c.num_perm, cfg.seed)


def signature_span(plan: str, span: Span, cfg: PairsieveConfig) -> int:
    """A span of the texts the signature cache lacks (the plan file): their signatures computed
    into the cache, its only output; how many it computed."""
    from pairsieve.vectors.embed import embed_texts

    lo, hi = span
    texts = pl.scan_parquet(plan).slice(lo, hi - lo).collect()[_TEXT].to_list()
    encoder = signature_encoder(cfg)
    cache = minhash.SignatureCache(cfg.cache_dir, encoder.model_key)
    return embed_texts(texts, encoder, cache, SIGNATURE_PARTITION, step=None)[1].encoded


def missing_signatures(cfg: PairsieveConfig, texts: pl.Series, mapper: Mapper) -> int:
    """Compute the signatures of ``texts`` the cache lacks as a map on ``mapper``'s runner;
    how many it computed (none, and no task, when the cache is warm)."""
    from pairsieve.vectors.embed import plan_partitions

    cache = minhash.SignatureCache(cfg.cache_dir, signature_encoder(cfg).model_key)
    missing = list(chain.from_iterable(plan_partitions(texts, cache, SIGNATURE_PARTITION)))
    if not missing:
        return 0
    plan = mapper.folder / "signature-plan.parquet"
    io.write_parquet(pl.DataFrame({_TEXT: missing}, schema={_TEXT: pl.String}), plan)
    spans = partitions.spans(len(missing), SIGNATURE_PARTITION)
    return sum(mapper.run(signature_span, plan, spans, cfg, SIGNATURES_STEP))


def band_keys_span(plan: str, span: Span, cfg: PairsieveConfig) -> list[str]:
    """A span of titles: every band's key of each title, written as (band, key, title) rows
    into one file per key partition beside the plan; the files, by partition."""
    from pairsieve.vectors.embed import read_cached

    folder, (lo, hi) = Path(plan), span
    settings = json.loads((folder / "settings.json").read_text())
    bands, rows, count = settings["bands"], settings["rows"], settings["partitions"]
    texts = pl.scan_parquet(folder / "texts.parquet").slice(lo, hi - lo).collect()[_TEXT]
    encoder = signature_encoder(cfg)
    sig = read_cached(texts.to_list(), minhash.SignatureCache(cfg.cache_dir, encoder.model_key))
    keys = np.stack(
        [minhash.band_keys(sig[:, band * rows : (band + 1) * rows]) for band in range(bands)]
    )  # (bands, titles)
    del sig
    frame = pl.DataFrame(
        {
            "band": np.repeat(np.arange(bands, dtype=np.uint16), hi - lo),
            "key": keys.ravel(),
            "title": np.tile(np.arange(lo, hi, dtype=np.uint32), bands),
        }
    ).with_columns((pl.col("key") % count).alias("_partition"))
    files = []
    for part in range(count):
        chosen = frame.filter(pl.col("_partition") == part).drop("_partition")
        files.append(str(io.write_parquet(chosen, folder / f"keys-{lo:012d}-{part:05d}.parquet")))
    return files


def bucket_span(plan: str, span: Span, cfg: PairsieveConfig) -> tuple[str, int]:
    """A span of key partitions (one): the pairs of titles sharing a bucket, as sorted
    distinct `minhash.pair_codes` in a file beside the plan, and the buckets skipped."""
    folder, (part, _) = Path(plan), span
    max_bucket = json.loads((folder / "settings.json").read_text())["max_bucket"]
    wanted_file = folder / "wanted.npy"
    wanted = np.load(wanted_file, mmap_mode="r") if wanted_file.exists() else None
    keys = pl.read_parquet(sorted(folder.glob(f"keys-*-{part:05d}.parquet")))
    found, skipped = [np.empty(0, dtype=np.int64)], 0
    for group in keys.sort("band", maintain_order=True).partition_by("band"):
        titles = group["title"].to_numpy().astype(np.int64)
        mine = None if wanted is None else np.asarray(wanted[titles])
        pairs, n_skipped = minhash.pairs_within_groups(group["key"].to_numpy(), max_bucket, mine)
        found.append(minhash.pair_codes(np.sort(titles[pairs], axis=1)))
        skipped += n_skipped
    del keys
    codes = minhash.distinct_codes(np.concatenate(found))
    out = folder / f"pairs-{part:05d}.npy"
    np.save(out, codes)
    return str(out), skipped


def minhash_pairs_mapped(
    cfg: PairsieveConfig, texts: pl.Series, wanted: np.ndarray | None, mapper: Mapper
) -> tuple[np.ndarray, int, int]:
    """`cluster.candidates.minhash_pairs` of the titles ``texts`` as three maps on
    ``mapper``'s runner (the missing signatures, the band keys, the buckets): (m, 2) int64
    pairs, sorted and distinct, the buckets skipped and the signatures computed."""
    computed = missing_signatures(cfg, texts, mapper)
    c = cfg.cluster
    bands, rows = minhash.lsh_params(c.lsh_threshold, c.num_perm)
    count = max(1, math.ceil(len(texts) * bands / _KEYS_PER_PARTITION))
    folder = mapper.folder / "banding-plan"
    folder.mkdir(parents=True, exist_ok=True)
    io.write_parquet(pl.DataFrame({_TEXT: texts}), folder / "texts.parquet")
    settings = {"bands": bands, "rows": rows, "partitions": count, "max_bucket": c.max_bucket}
    (folder / "settings.json").write_text(json.dumps(settings))
    if wanted is not None:
        np.save(folder / "wanted.npy", wanted)
    spans = partitions.spans(len(texts), _TITLES_PER_SPAN)
    mapper.run(band_keys_span, folder, spans, cfg, KEYS_STEP)
    by_partition = [(part, part + 1) for part in range(count)]
    found = mapper.run(bucket_span, folder, by_partition, cfg, BUCKETS_STEP)
    codes = np.concatenate([np.load(file) for file, _ in found])
    return minhash.distinct_pairs(codes), sum(skipped for _, skipped in found), computed
