"""The stages' declarations gathered, and what the build derives from them.

A stage is skipped when its own settings (`Stage.sections`) hash as they did and its upstream
stages recorded the same fingerprints and hashes (`core.contract.stage_fingerprint`): nothing here
is kept by hand beside the declarations in the stage packages.
"""

from __future__ import annotations

import hashlib

from pairsieve import audits, cleaning, cluster, ingest, mine, report, shards
from pairsieve.config import PairsieveConfig
from pairsieve.core.declaration import Stage, StageConfig, sections_hash
from pairsieve.vectors.model_identity import weights_identity

STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        ingest.STAGE,
        cluster.STAGE,
        mine.STAGE,
        shards.STAGE,
        report.STAGE,
        audits.STAGE,
        cleaning.STAGE,
    )
}


def upstream(name: str) -> list[str]:
    """The stages whose recorded fingerprints and hashes stage ``name``'s fingerprint chains."""
    return list(STAGES[name].upstream)


def readable(name: str) -> frozenset[str]:
    """The config sections stage ``name`` may read: its own and its upstream stages'."""
    stage = STAGES[name]
    return frozenset(stage.sections).union(*(readable(up) for up in stage.upstream))


def settings_hash(cfg: PairsieveConfig, name: str) -> str:
    """The hash of stage ``name``'s own settings, recorded in its `stage.json`. A stage that
    embeds with a model folder of the team's own also hashes which weights the folder holds
    (`model_identity.weights_identity`): fine-tuning into the same folder changes no setting,
    yet every vector, so the stage must run again."""
    settings = sections_hash(cfg, STAGES[name].sections)
    if "embed" not in STAGES[name].sections or cfg.embed.model_path is None:
        return settings
    weights = "|".join(weights_identity(cfg.embed.model_path))
    return hashlib.sha256(f"{settings}|{weights}".encode()).hexdigest()


def stage_config(cfg: PairsieveConfig, name: str) -> PairsieveConfig:
    """``cfg`` as stage ``name`` may read it (`StageConfig`, standing in for the whole config)."""
    return StageConfig(cfg, name, readable(name))  # type: ignore[return-value]


def declarations_markdown() -> str:
    """The declarations as the table of docs/architecture.md ("Each stage declared once"): what
    each stage reads, which settings, and what it writes, in one place."""

    def names(values) -> str:
        return ", ".join(f"`{v}`" for v in values) or "–"

    lines = [
        "| stage | reads the folders of | own config sections | may also read | writes |",
        "|---|---|---|---|---|",
    ]
    for name, stage in STAGES.items():
        inherited = readable(name) - set(stage.sections)
        ordered = [s for s in PairsieveConfig.model_fields if s in inherited]
        lines.append(
            f"| {name} | {names(stage.upstream)} | {names(stage.sections)} | {names(ordered)} "
            f"| {names(stage.writes)} |"
        )
    return "\n".join(lines) + "\n"
