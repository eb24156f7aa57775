"""What a stage records in its stage.json for the stages, reports and commands after it, typed.

A stage's ``details`` also hold figures for a reader (counts, timings, settings) that no code
reads back. What another package does read back is declared here, once, with its type and its
meaning, and read only through these classes: a key renamed where it is written then fails the
tests that parse a real stage.json, instead of quietly reading as missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pairsieve.core.contract import StageResult


@dataclass(frozen=True)
class ClusterFacts:
    """The cluster stage's record of a build."""

    # This build's number in its lineage: 0 for a first build, one more than the previous
    # build's for a build with --previous (`cluster.lineage`).
    build_number: int
    # The acceptance probability the clustering used (learned judge); a label sample groups
    # pairs by it. None for a build that predates the record.
    accept_probability: float | None = None
    settled_nodes: int | None = None  # day 2: titles whose previous pairs were reused
    reused_pairs: int | None = None  # day 2: judged pairs taken over from the previous build
    incremental: dict[str, Any] = field(default_factory=dict)  # day 2: why not reused, if not
    labels_chosen: dict[str, Any] = field(default_factory=dict)  # what a user's labels chose

    @classmethod
    def of(cls, result: StageResult) -> ClusterFacts:
        details = result.details
        accept = details.get("accept_probability")
        return cls(
            build_number=int(details.get("build_number", 0)),
            accept_probability=None if accept is None else float(accept),
            settled_nodes=details.get("settled_nodes"),
            reused_pairs=details.get("reused_pairs"),
            incremental=details.get("incremental") or {},
            labels_chosen=(details.get("labels") or {}).get("chosen") or {},
        )


@dataclass(frozen=True)
class MineFacts:
    """The mine stage's record of a build."""

    # The share of copies among candidates inside the margin that the judgement assumed
    # (estimated from the build, or set in the config); None when the margin is not judged.
    copy_density: float | None = None
    # Day 2: queries reused, refiltered and mined, or why the previous build was not reused.
    incremental: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, result: StageResult) -> MineFacts:
        details = result.details
        density = (details.get("copy_density") or {}).get("value")
        return cls(
            copy_density=None if density is None else float(density),
            incremental=details.get("incremental") or {},
        )
