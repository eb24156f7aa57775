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


@dataclass(frozen=True)
class RunLayout:
    """The artifact paths of the build folder ``root`` (staging or published)."""

    root: Path

    def __init__(self, root: str | Path) -> None:
        object.__setattr__(self, "root", Path(root))

    def stage_dir(self, stage: str) -> Path:
        return self.root / stage

    @property
    def clicks(self) -> Path:
        return self.root / "ingest" / S.CLICKS_FILE

    @property
    def listings(self) -> Path:
        return self.root / "ingest" / S.LISTINGS_FILE

    @property
    def quarantine(self) -> Path:
        return self.root / "ingest" / S.QUARANTINE_FILE

    @property
    def products(self) -> Path:
        return self.root / "cluster" / S.PRODUCTS_FILE

    @property
    def pairs(self) -> Path:
        return self.root / "cluster" / S.PAIRS_FILE

    @property
    def id_changes(self) -> Path:
        return self.root / "cluster" / S.ID_CHANGES_FILE

    @property
    def negatives(self) -> Path:
        return self.root / "mine" / S.NEGATIVES_FILE

    @property
    def negatives_dropped(self) -> Path:
        return self.root / "mine" / S.NEGATIVES_DROPPED_FILE

    @property
    def shards(self) -> Path:
        return self.root / "shards"

    @property
    def train_shards(self) -> Path:
        """A glob of the train shard files."""
        return self.shards / f"{S.TRAIN_PREFIX}-*.parquet"

    @property
    def manifest(self) -> Path:
        return self.shards / S.MANIFEST_FILE

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def embed_partitions(self) -> Path:
        return self.root / EMBED_PARTITIONS_DIR

    @property
    def published(self) -> Path:
        """The folder name readers see for this build."""
        return published_dir(self.root)
