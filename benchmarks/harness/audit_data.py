"""Datasets to audit and the truth to check an audit against: sentence-transformers' own
`mine_hard_negatives` over a click log's (query, clicked title) pairs, and the ground truth's
answer for each pair an audit judged.

sentence-transformers would embed the texts itself at a few texts/s on a shared 2-core machine,
so its ``cache_folder`` is fed pairsieve's cached vectors of the same bundled MiniLM instead;
the mining itself is sentence-transformers' code, unchanged.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.vectors.embed import bundled_model_path, embed_texts, load_encoder
from pairsieve.vectors.embedding_cache import EmbeddingCache

NUM_NEGATIVES = 5
# the catalogs whose truth also groups listings inside one shop, so that any pair can be labelled
WITHIN_SHOP_TRUTH = ("pricerunner", "altosight", "alaska-cameras")


def st_dataset(catalog_path: Path, clicks_path: Path, out: Path) -> tuple[Path, float]:
    """sentence-transformers' own miner over the clicked pairs; returns (parquet, seconds)."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    if out.exists():
        return out, 0.0
    catalog = pl.read_parquet(catalog_path)
    dataset = Dataset.from_polars(clicked_pairs(catalog, pl.read_parquet(clicks_path)))
    model = SentenceTransformer(bundled_model_path(), device="cpu")
    model.max_seq_length = 64
    corpus = catalog[S.TITLE].unique().sort().to_list()
    cache_folder = out.parent / "st-cache"
    seed_st_cache(model, dataset, corpus, cache_folder)
    started = time.perf_counter()
    mined = mine_hard_negatives(
        dataset,
        model,
        corpus=corpus,
        num_negatives=NUM_NEGATIVES,
        output_format="n-tuple",
        batch_size=128,
        use_faiss=True,
        cache_folder=str(cache_folder),
        verbose=True,
    )
    seconds = time.perf_counter() - started
    mined.to_parquet(str(out))
    return out, seconds


def clicked_pairs(catalog: pl.DataFrame, clicks: pl.DataFrame) -> pl.DataFrame:
    """The click log's distinct (query, clicked title) pairs as (anchor, positive), sorted."""
    return (
        clicks.select(S.QUERY, S.LISTING_ID)
        .unique()
        .join(catalog.select(S.LISTING_ID, S.TITLE), on=S.LISTING_ID)
        .sort(S.QUERY, S.LISTING_ID)
        .select(pl.col(S.QUERY).alias(S.ANCHOR), pl.col(S.TITLE).alias(S.POSITIVE))
    )


def truth_of_titles(catalog: pl.DataFrame) -> dict[str, str]:
    """Each title's ground-truth product (a title of several: its smallest listing's)."""
    first = catalog.sort(S.LISTING_ID).unique(S.TITLE, keep="first", maintain_order=True)
    return dict(zip(first[S.TITLE], first[S.TRUE_PRODUCT_ID].cast(pl.String), strict=True))


def negative_copy_share(dataset: pl.DataFrame, truth: dict[str, str]) -> tuple[float, int]:
    """(share of negatives that are the positive's product by the truth, negatives)."""
    columns = [c for c in dataset.columns if c.startswith("negative")]
    same = total = 0
    for column in columns:
        for positive, negative in zip(dataset[S.POSITIVE], dataset[column], strict=True):
            total += 1
            same += truth.get(positive) is not None and truth.get(positive) == truth.get(negative)
    return same / max(total, 1), total


def seed_st_cache(model, dataset, corpus: list[str], folder: Path) -> None:
    """Write pairsieve-cached vectors where `mine_hard_negatives(cache_folder=...)` looks for them
    (its file names hash the model name, prompts and de-duplicated text lists, see
    sentence_transformers/util/hard_negatives.py)."""
    queries = list(dict.fromkeys(dataset[S.ANCHOR]))
    full_corpus = list(dict.fromkeys(corpus + list(dataset[S.POSITIVE])))
    name = model.model_card_data.base_model or ""
    encoder = load_encoder(PairsieveConfig().embed)
    cache = EmbeddingCache(PairsieveConfig().cache_dir, encoder.model_key)
    folder.mkdir(parents=True, exist_ok=True)
    for kind, texts in (("query", queries), ("corpus", full_corpus)):
        digest = hashlib.sha256(
            repr((name, None, None, texts)).encode(), usedforsecurity=False
        ).hexdigest()
        target = folder / f"{kind}_embeddings_{digest}.npy"
        if not target.exists():
            vectors, stats = embed_texts(texts, encoder, cache)
            logging.info("%s: %s", kind, stats)
            np.save(target, vectors)


def with_truth(pairs: pl.DataFrame, catalog: Path) -> pl.DataFrame:
    """The audit's pairs with ``label``: the ground truth's answer (titles -> truth ids; a title
    of several products takes its smallest listing's)."""
    truth = (
        pl.read_parquet(catalog)
        .sort(S.LISTING_ID)
        .unique(S.TITLE, keep="first", maintain_order=True)
        .select(S.TITLE, pl.col(S.TRUE_PRODUCT_ID).cast(pl.String))
    )
    out = pairs
    for text, alias in (("text_a", "_ta"), ("text_b", "_tb")):
        out = out.join(truth.rename({S.TITLE: text, S.TRUE_PRODUCT_ID: alias}), on=text, how="left")
    same = pl.col("_ta").is_not_null() & (pl.col("_ta") == pl.col("_tb"))
    return out.with_columns(same.alias("label")).drop("_ta", "_tb")
