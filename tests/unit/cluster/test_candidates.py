"""MinHash candidates as maps (the signatures the cache lacks, the band keys, the buckets) give
the pairs of the in-process path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pairsieve.cluster import candidates, lsh
from pairsieve.config import PairsieveConfig
from pairsieve.core import partitions
from pairsieve.core.partitions import Mapper
from pairsieve.text import attributes as text
from tests.paths import SAMPLE_DIR


class CountingMap:
    """`partitions.map_here`, counting the spans it ran per step."""

    def __init__(self) -> None:
        self.spans: dict[str, int] = {}

    def __call__(self, fn, plan, spans, cfg, step):  # noqa: ANN001, ANN204
        self.spans[step] = self.spans.get(step, 0) + len(spans)
        return partitions.map_here(fn, plan, spans, cfg, step)


def test_mapped_signatures_and_banding_give_the_in_process_pairs(tmp_path: Path, monkeypatch):
    titles = pl.read_parquet(SAMPLE_DIR / "catalog.parquet")["title"].head(600).to_list()
    words = [" ".join(sorted(text.extract_attributes(text.normalize(t)).words)) for t in titles]
    match_text = pl.Series(words + words[:50], dtype=pl.String)  # repeated texts too
    wanted = np.random.default_rng(0).random(len(match_text)) < 0.2
    monkeypatch.setattr(lsh, "SIGNATURE_PARTITION", 128)
    monkeypatch.setattr(lsh, "_TITLES_PER_SPAN", 100)
    monkeypatch.setattr(lsh, "_KEYS_PER_PARTITION", 2_000)
    in_process = PairsieveConfig(cache_dir="")  # no cache to map from: signatures here
    here = Mapper.local(tmp_path / "here")
    want, skipped, computed = candidates.minhash_pairs(in_process, match_text, here)
    assert computed == match_text.n_unique() and len(want)
    few = candidates.minhash_pairs(in_process, match_text, here, wanted)
    assert 0 < len(few[0]) < len(want)

    cfg = PairsieveConfig(cache_dir=str(tmp_path / "cache"))
    cold = CountingMap()
    found = candidates.minhash_pairs(cfg, match_text, Mapper(tmp_path / "p1", cold))
    assert np.array_equal(found[0], want) and found[1:] == (skipped, computed)
    assert cold.spans[lsh.SIGNATURES_STEP] == -(-computed // 128)  # the cold cache's, 128 a span
    assert cold.spans[lsh.KEYS_STEP] == 7 and cold.spans[lsh.BUCKETS_STEP] > 1

    warm = CountingMap()
    again = candidates.minhash_pairs(cfg, match_text, Mapper(tmp_path / "p2", warm), wanted)
    assert np.array_equal(again[0], few[0]) and again[1:] == (few[1], 0)
    assert lsh.SIGNATURES_STEP not in warm.spans  # nothing to compute: no task
