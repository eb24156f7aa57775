"""Each stage is declared once, and the build's skipping follows the declarations: changing any
setting a stage may read reruns it, changing any other leaves it skipped; a stage that reads a
section it did not declare fails."""

from __future__ import annotations

import pickle
import shutil
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from pairsieve.config import PairsieveConfig
from pairsieve.core.contract import StageResult, run_stage, stage_fingerprint
from pairsieve.core.declaration import (
    SECTIONS,
    UNHASHED,
    Stage,
    UndeclaredSectionError,
    sections_hash,
)
from pairsieve.orchestration.stages import (
    STAGES,
    readable,
    settings_hash,
    stage_config,
    upstream,
)
from tests.paths import REPO

BASE = PairsieveConfig()


def settings(model: BaseModel, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """Every leaf setting of ``model`` as (dotted key, annotation, value)."""
    found = []
    for key, field in type(model).model_fields.items():
        value = getattr(model, key)
        if isinstance(value, BaseModel):
            found += settings(value, f"{prefix}{key}.")
        else:
            found.append((f"{prefix}{key}", field.annotation, value))
    return found


def candidates(annotation: Any, value: Any) -> list[Any]:
    """Values to try in place of ``value``; validation picks the first the config accepts."""
    choices = [c for arg in typing.get_args(annotation) for c in typing.get_args(arg)]
    choices += [c for c in typing.get_args(annotation) if not isinstance(c, type)]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value * 2, value - 1]
    if isinstance(value, float):
        return [value * 0.9, value + 0.05, 0.5]
    if isinstance(value, tuple):
        return [value[:-1] or (0.5,), ("quantity",), (64,)]
    if isinstance(value, dict):
        return [{"a": "b"}]
    return [*choices, None, 0.1, 3, "latin-1", ";", "x"]


def changed(key: str, annotation: Any, value: Any) -> PairsieveConfig | None:
    for candidate in candidates(annotation, value):
        try:
            other = BASE.with_(**{key: candidate})
        except Exception:  # noqa: BLE001 - an invalid candidate: try the next
            continue
        if other.model_dump() != BASE.model_dump():
            return other
    return None


ORDER = ["ingest", "cluster", "mine", "shards", "report", "audit", "clean"]


def toy_build(cfg: PairsieveConfig, run_dir: Path) -> set[str]:
    """Every stage run through the build's own skip logic with a body that writes nothing; the
    stages that ran."""
    ran = set()
    for name in ORDER:

        def body(tmp: Path, name: str = name) -> StageResult:
            ran.add(name)
            return StageResult(name, rows_in=1, rows_out=1)

        fingerprint = stage_fingerprint(run_dir, upstream(name))
        run_stage(name, run_dir, settings_hash(cfg, name), fingerprint, body)
    return ran


def test_the_declarations_cover_every_stage_in_order():
    assert list(STAGES) == ORDER
    for name, stage in STAGES.items():
        assert all(ORDER.index(up) < ORDER.index(name) for up in stage.upstream)
    assert readable("report") >= {"ingest", "shards", "mine", "report", "seed"}
    assert readable("audit") >= {"ingest", "shards", "report"}  # no upstream: its own


def test_a_stage_reruns_exactly_when_a_setting_it_may_read_changes(tmp_path):
    base = tmp_path / "base"
    assert toy_build(BASE, base) == set(ORDER)
    assert toy_build(BASE, base) == set()
    untried = []
    for key, annotation, value in settings(BASE):
        other = changed(key, annotation, value)
        if other is None:
            untried.append(key)
            continue
        run_dir = tmp_path / key
        shutil.copytree(base, run_dir)
        section = key.split(".")[0]
        expected = {name for name in ORDER if section in readable(name)}
        assert toy_build(other, run_dir) == expected, key
        assert section in UNHASHED or expected, f"{key}: no stage reads it"
    assert untried == [], "settings the test could not change"


def test_a_stage_reading_an_undeclared_section_fails():
    cfg = stage_config(BASE, "cluster")
    assert cfg.cluster == BASE.cluster and cfg.ingest == BASE.ingest  # own and upstream
    assert cfg.cache_dir == BASE.cache_dir and cfg.runner == BASE.runner
    with pytest.raises(UndeclaredSectionError, match="'report'"):
        _ = cfg.report
    with pytest.raises(UndeclaredSectionError, match="'shards'"):
        _ = stage_config(BASE, "mine").shards.batch_size
    with pytest.raises(AttributeError, match="every section"):
        cfg.model_dump()


def test_the_view_survives_pickling_and_copies_stay_restricted():
    cfg = stage_config(BASE, "mine")
    again = pickle.loads(pickle.dumps(cfg))
    assert again.mine == BASE.mine
    copy = cfg.model_copy(update={"mine": BASE.mine.model_copy(update={"copy_density": 0.1})})
    assert copy.mine.copy_density == 0.1
    with pytest.raises(UndeclaredSectionError):
        _ = copy.report
    with pytest.raises(UndeclaredSectionError):
        cfg.model_copy(update={"report": BASE.report})


def test_a_stage_config_hashes_only_what_the_stage_may_read():
    shards = stage_config(BASE, "shards")
    assert (
        shards.config_hash()
        == stage_config(BASE.with_(**{"report.largest_clusters": 3}), "shards").config_hash()
    )
    assert shards.config_hash() != stage_config(BASE.with_(seed=1), "shards").config_hash()


def test_a_declaration_names_real_sections():
    assert "runner" not in SECTIONS and "mine" in SECTIONS
    with pytest.raises(ValueError, match="no such config section"):
        Stage("x", upstream=(), sections=("mining",))


def test_the_architecture_page_draws_the_declarations():
    from pairsieve.orchestration.stages import declarations_markdown

    page = (REPO / "docs" / "architecture.md").read_text()
    assert declarations_markdown() in page, "copy declarations_markdown() into the page"


def test_new_weights_in_the_same_model_folder_rerun_the_stages_that_embed(tmp_path):
    """No setting changes when a team fine-tunes into the folder `embed.model_path` names, yet
    every vector does: the stages that embed must not be skipped as up to date."""
    folder = tmp_path / "encoder"
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\x01" * 4096)
    cfg = BASE.with_(**{"embed.model_path": str(folder)})
    before = {name: settings_hash(cfg, name) for name in STAGES}
    weights.write_bytes(b"\x02" * 4096)
    after = {name: settings_hash(cfg, name) for name in STAGES}
    embedding = {name for name, stage in STAGES.items() if "embed" in stage.sections}
    assert {"cluster", "mine"} <= embedding
    assert {name for name in STAGES if before[name] != after[name]} == embedding
    # the bundled model's hash is its settings' alone, as builds recorded it before
    assert settings_hash(BASE, "cluster") == sections_hash(BASE, STAGES["cluster"].sections)


def test_a_judgement_refitted_into_the_same_file_reruns_the_stages_that_read_it(tmp_path):
    model = tmp_path / "copy_model.json"
    model.write_text('{"weights": [1.0]}')
    cfg = BASE.with_(**{"mine.copy_model": str(model)})
    before = {name: settings_hash(cfg, name) for name in STAGES}
    model.write_text('{"weights": [2.0]}')
    after = {name: settings_hash(cfg, name) for name in STAGES}
    reading = {name for name, stage in STAGES.items() if "mine" in stage.sections}
    assert {"mine", "shards"} <= reading
    assert {name for name in STAGES if before[name] != after[name]} == reading
