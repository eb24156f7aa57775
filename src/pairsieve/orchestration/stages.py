"""The stages' declarations gathered, and what the build derives from them.

A stage is skipped when its own settings (`Stage.sections`) hash as they did and its upstream
stages recorded the same fingerprints and hashes (`core.contract.stage_fingerprint`): nothing here
is kept by hand beside the declarations in the stage packages.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pairsieve import audits, cleaning, cluster, ingest, mine, report, shards
from pairsieve.config import PairsieveConfig
from pairsieve.core.declaration import Stage, StageConfig, sections_hash
from pairsieve.core.io import sha256_file
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
    """The hash of stage ``name``'s own settings, recorded in its `stage.json`, with what the
    files its settings name hold (`named_files`)."""
    settings = sections_hash(cfg, STAGES[name].sections)
    held = named_files(cfg, STAGES[name].sections)
    if not held:
        return settings
    return hashlib.sha256("|".join([settings, *held]).encode()).hexdigest()


def named_files(cfg: PairsieveConfig, sections: tuple[str, ...]) -> list[str]:
    """What the files named by settings of ``sections`` hold: the team's own model folder
    (`model_identity.weights_identity`) and the judgement's model. Settings hash their paths
    only, yet fine-tuning into the same folder or refitting into the same file changes every
    output, so the stages reading them must run again. The shipped model and judgement change
    only with the code, which `code_version` covers, so they add nothing."""
    held = []
    if "embed" in sections and cfg.embed.model_path is not None:
        held.append("|".join(weights_identity(cfg.embed.model_path)))
    if "mine" in sections and cfg.mine.copy_model is not None:
        path = Path(cfg.mine.copy_model)
        held.append(sha256_file(path) if path.is_file() else "missing")
    return held


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
