"""Where every artifact of a build folder lives: one object instead of paths joined by hand.

A build folder has one subfolder per stage, named after it, each holding its artifacts and its
``stage.json``. Stages read their inputs through a `RunLayout` of the folder they run in, and a
day-2 build reads the previous build through a `RunLayout` of that folder, so a renamed file is
one edit here.

A build works in a staging folder beside its ``--out`` folder (`staging_dir`) and publishes it
atomically; `published_dir` maps either back to the name readers use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pairsieve import schemas as S

EMBED_PARTITIONS_DIR = "embed-partitions"  # scratch of a build in progress, never published


def staging_dir(out: str | Path) -> Path:
    """Where a build of ``out`` works until it publishes."""
    out = Path(out)
    return out.with_name(f".{out.name}.staging")


def published_dir(folder: str | Path) -> Path:
    """The build folder a staging folder publishes as (any other folder is itself)."""
    folder = Path(folder)
    name = folder.name
    if name.startswith(".") and name.endswith(".staging"):
        return folder.with_name(name[1 : -len(".staging")])
    return folder


class _Artifact:
    """A path of a build folder, read as an attribute of its `RunLayout`."""

    def __init__(self, *parts: str) -> None:
        self.parts = parts

    def __get__(self, layout: RunLayout, owner: type | None = None) -> Path:
        return layout.root.joinpath(*self.parts)


@dataclass(frozen=True)
class RunLayout:
    """The artifact paths of the build folder ``root`` (staging or published)."""

    root: Path

    clicks = _Artifact("ingest", S.CLICKS_FILE)
    listings = _Artifact("ingest", S.LISTINGS_FILE)
    quarantine = _Artifact("ingest", S.QUARANTINE_FILE)
    products = _Artifact("cluster", S.PRODUCTS_FILE)
    pairs = _Artifact("cluster", S.PAIRS_FILE)
    id_changes = _Artifact("cluster", S.ID_CHANGES_FILE)
    negatives = _Artifact("mine", S.NEGATIVES_FILE)
    negatives_dropped = _Artifact("mine", S.NEGATIVES_DROPPED_FILE)
    negatives_judgement = _Artifact("mine", S.NEGATIVES_JUDGEMENT_FILE)
    shards = _Artifact("shards")
    train_shards = _Artifact("shards", f"{S.TRAIN_PREFIX}-*.parquet")  # a glob
    manifest = _Artifact("shards", S.MANIFEST_FILE)
    report = _Artifact("report")
    embed_partitions = _Artifact(EMBED_PARTITIONS_DIR)

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    def stage_dir(self, stage: str) -> Path:
        return self.root / stage

    @property
    def published(self) -> Path:
        """The folder name readers see for this build."""
        return published_dir(self.root)
