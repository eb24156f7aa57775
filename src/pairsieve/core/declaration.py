"""A stage's declaration: its name, the stages whose files it reads, the config sections it reads.

The build derives from these declarations alone which upstream fingerprints and which settings a
stage's skip/resume hash covers (`orchestration.stages`), and hands each stage a `StageConfig`
that refuses every other section. So a stage cannot come to depend on a setting its hash does not
cover: the read fails in the tests instead of leaving a stale output behind a skipped stage.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pairsieve.config import PairsieveConfig
from pairsieve.errors import PairsieveError

# Top-level settings that never change an artifact's bytes (the tests check the runners agree byte
# for byte, and the cache only saves work): every stage may read them, no hash covers them.
UNHASHED = frozenset({"cache_dir", "runner"})
SECTIONS = frozenset(PairsieveConfig.model_fields) - UNHASHED


@dataclass(frozen=True)
class Stage:
    """What the build needs to know of a stage to run it resumably.

    ``upstream`` names the stages whose published folders it reads (`RunLayout` entries);
    ``sections`` the config sections it reads besides theirs. A stage may also read its upstream
    stages' sections: a change there reruns the upstream stage, whose recorded hash then reruns
    this one. ``writes`` lists the files it may write into its folder (glob patterns; some only
    under some settings, such as the IVF layout above `knn.exact_max` vectors).
    """

    name: str
    upstream: tuple[str, ...]
    sections: tuple[str, ...]
    writes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.sections) - SECTIONS)
        if unknown:
            raise ValueError(f"stage {self.name!r} declares no such config section: {unknown}")


def sections_hash(cfg: PairsieveConfig, sections: Iterable[str]) -> str:
    """sha256 of ``sections`` of ``cfg`` (canonical JSON), so a report knob never re-clusters."""
    dumped = cfg.model_dump(mode="json")
    relevant = {key: dumped[key] for key in sorted(set(sections))}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


class UndeclaredSectionError(PairsieveError):
    """A stage read a config section it did not declare: a bug in pairsieve, not in the input."""


class StageConfig:
    """The config as one stage sees it: the sections it may read, and `cache_dir` and `runner`.

    It stands in for a `PairsieveConfig` (stage code is written against that type), so
    ``cfg.mine.num_negatives`` reads as before; reading any other section raises
    `UndeclaredSectionError`.
    """

    __slots__ = ("_cfg", "_stage", "_readable")

    def __init__(self, cfg: PairsieveConfig, stage: str, readable: Iterable[str]) -> None:
        self._cfg = cfg
        self._stage = stage
        self._readable = frozenset(readable)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # unpickling asks before the slots are filled
            raise AttributeError(name)
        if name in SECTIONS and name not in self._readable:
            raise UndeclaredSectionError(
                "undeclared_section",
                f"stage {self._stage!r} read config section {name!r}, which it does not "
                f"declare (it may read {sorted(self._readable)})",
                knob=name,
            )
        if name in {"model_dump", "model_dump_json", "with_"}:
            raise AttributeError(f"a stage's config has no {name}: it would read every section")
        return getattr(self._cfg, name)

    def __reduce__(self) -> tuple[Any, ...]:
        return StageConfig, (self._cfg, self._stage, self._readable)

    def __repr__(self) -> str:
        return f"StageConfig({self._stage!r}, readable={sorted(self._readable)})"

    def config_hash(self) -> str:
        """sha256 of every setting this stage may read: what shaped its artifacts."""
        return sections_hash(self._cfg, self._readable)

    def model_copy(self, *, update: dict[str, Any]) -> StageConfig:
        """The same view of a copy with ``update`` applied (only to readable sections)."""
        for name in update:
            getattr(self, name)  # refuses an undeclared section
        return StageConfig(self._cfg.model_copy(update=update), self._stage, self._readable)
