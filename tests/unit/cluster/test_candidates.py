"""MinHash candidates with the missing signatures computed as a map over spans of texts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pairsieve.cluster import candidates
from pairsieve.cluster.neighbours import Mapper
from pairsieve.config import PairsieveConfig
from pairsieve.core import partitions
from pairsieve.text import attributes as text
from tests.paths import SAMPLE_DIR


class CountingMap:
    """`partitions.map_here`, counting the spans it ran."""

    def __init__(self) -> None:
        self.spans = 0

    def __call__(self, fn, plan, spans, cfg, step):  # noqa: ANN001, ANN204
        self.spans += len(spans)
        return partitions.map_here(fn, plan, spans, cfg, step)


def test_mapped_signatures_give_the_pairs_of_signatures_computed_in_process(
    tmp_path: Path, monkeypatch
) -> None:
    titles = pl.read_parquet(SAMPLE_DIR / "catalog.parquet")["title"].head(600).to_list()
    words = [" ".join(sorted(text.extract_attributes(text.normalize(t)).words)) for t in titles]
    match_text = pl.Series(words + words[:50], dtype=pl.String)  # repeated texts too
    monkeypatch.setattr(candidates, "_SIGNATURE_PARTITION", 128)
    in_process = PairsieveConfig(cache_dir=str(tmp_path / "in-process"))
    want, skipped, computed = candidates.minhash_pairs(in_process, match_text)
    assert computed == match_text.n_unique() and len(want)

    cfg = PairsieveConfig(cache_dir=str(tmp_path / "cache"))
    mapped = CountingMap()
    found = candidates.minhash_pairs(cfg, match_text, mapper=Mapper(tmp_path / "p1", mapped))
    assert np.array_equal(found[0], want) and found[1:] == (skipped, computed)
    assert mapped.spans == -(-computed // 128)  # the cold cache's texts, 128 a span

    warm = CountingMap()
    again = candidates.minhash_pairs(cfg, match_text, mapper=Mapper(tmp_path / "p2", warm))
    assert np.array_equal(again[0], want) and again[2] == 0 and warm.spans == 0
