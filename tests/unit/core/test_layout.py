"""RunLayout names every artifact of a build folder; staging and published folders map both ways."""

from __future__ import annotations

from pathlib import Path

from pairsieve import schemas as S
from pairsieve.core.layout import RunLayout, published_dir, staging_dir


def test_artifacts_live_in_their_stage_folder():
    layout = RunLayout("runs/b")
    assert layout.clicks == Path("runs/b/ingest") / S.CLICKS_FILE
    assert layout.products == Path("runs/b/cluster") / S.PRODUCTS_FILE
    assert layout.id_changes == Path("runs/b/cluster") / S.ID_CHANGES_FILE
    assert layout.negatives_dropped == Path("runs/b/mine") / S.NEGATIVES_DROPPED_FILE
    assert layout.manifest == Path("runs/b/shards") / S.MANIFEST_FILE
    assert sorted(Path("runs/b/shards").glob("x")) == []  # a plain path, nothing touched
    assert layout.train_shards.match("train-*.parquet")
    assert layout.stage_dir("report") == layout.report == Path("runs/b/report")


def test_a_staging_folder_publishes_as_its_build_folder():
    out = Path("runs/b")
    assert staging_dir(out) == Path("runs/.b.staging")
    assert published_dir(staging_dir(out)) == out == published_dir(out)
    assert RunLayout(staging_dir(out)).published == out
