from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pairsieve.cli import app
from pairsieve.cli.app import parse_override
from pairsieve.config import PairsieveConfig, load_config
from pairsieve.config_docs import config_reference_markdown
from pairsieve.errors import PairsieveError
from tests.paths import REPO


def test_defaults_load_and_hash_is_stable():
    assert load_config().config_hash() == PairsieveConfig().config_hash()


def test_hash_ignores_where_caches_live_and_which_runner_runs():
    base = PairsieveConfig()
    assert base.with_(cache_dir="/elsewhere").config_hash() == base.config_hash()
    assert base.with_(**{"runner.task_runner": "dask"}).config_hash() == base.config_hash()
    assert base.with_(**{"shards.batch_size": 64}).config_hash() != base.config_hash()


def test_toml_file_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("seed = 5\n[mine]\nnum_negatives = 3\n")
    cfg = load_config(path, {"mine.sampling": "random"})
    assert (cfg.seed, cfg.mine.num_negatives, cfg.mine.sampling) == (5, 3, "random")
    assert cfg.config_hash() != PairsieveConfig().config_hash()


def test_unknown_key_names_the_key(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[mine]\nnum_negativez = 3\n")
    with pytest.raises(PairsieveError) as err:
        load_config(path)
    assert err.value.knob == "mine.num_negativez"
    assert err.value.file == str(path)


@pytest.mark.parametrize(
    ("old", "new"),
    [("cluster.verifier", "cluster.judge"), ("knn.shard_vectors", "knn.slice_vectors")],
)
def test_a_renamed_key_names_its_new_name(old, new):
    value = "rule" if new == "cluster.judge" else 4096
    with pytest.raises(PairsieveError) as err:
        load_config(None, {old: value})
    assert err.value.knob == old and f"renamed: use {new}" in str(err.value)
    assert err.value.file == "--set"  # where the key was given, not the defaults
    assert getattr(load_config(None, {new: value}), new.split(".")[0]) is not None


def test_out_of_range_value_names_the_key():
    with pytest.raises(PairsieveError) as err:
        load_config(None, {"shards.batch_size": 1})
    assert err.value.knob == "shards.batch_size"
    assert err.value.code == "bad_config"


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("seed = = 1")
    with pytest.raises(PairsieveError, match="not valid TOML"):
        load_config(bad)
    with pytest.raises(PairsieveError) as err:
        load_config(tmp_path / "nope.toml")
    assert err.value.code == "missing_file"


def test_parse_override_types():
    assert parse_override("mine.num_negatives=7") == ("mine.num_negatives", 7)
    assert parse_override("mine.relative_margin=0.1") == ("mine.relative_margin", 0.1)
    assert parse_override("ingest.truth_column=gt") == ("ingest.truth_column", "gt")
    assert parse_override("mine.relative_margin=none") == ("mine.relative_margin", None)
    with pytest.raises(PairsieveError):
        parse_override("no-equals-sign")


def test_config_is_frozen():
    cfg = PairsieveConfig()
    with pytest.raises(ValidationError):
        cfg.seed = 3  # type: ignore[misc]
    assert cfg.with_(**{"seed": 3}).seed == 3


def test_configuration_doc_matches_model():
    doc = (REPO / "docs" / "configuration.md").read_text()
    assert doc == config_reference_markdown(), "run `make docs` to regenerate docs/configuration.md"


def test_cli_rejects_bad_override_with_exit_code_2(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "build",
            "--clicks",
            "x",
            "--catalog",
            "y",
            "--out",
            str(tmp_path / "o"),
            "--set",
            "mine.num_negatives=0",
        ],
    )
    assert result.exit_code == 2
    assert "mine.num_negatives" in result.output
    assert not (tmp_path / "o").exists()


def test_init_writes_every_knob_at_its_default_and_never_overwrites(tmp_path):
    path = tmp_path / "pairsieve.toml"
    assert CliRunner().invoke(app, ["init", str(path)]).exit_code == 0
    written = path.read_text()
    assert load_config(path).model_dump() == PairsieveConfig().model_dump()
    for knob in ("seed", "relative_margin", "batch_size", "memory_budget_mb", "[runner]"):
        assert knob in written
    again = CliRunner().invoke(app, ["init", str(path)])
    assert again.exit_code == 2 and "file_exists" in again.output
    assert path.read_text() == written


def test_version_is_the_installed_packages():
    from pairsieve import __version__

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"pairsieve {__version__}"
