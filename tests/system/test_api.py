"""The Python API runs the same flows as the CLI and writes the same outputs: a build from polars
frames gives the CLI's shards byte for byte, and an audit of a `datasets.Dataset` the CLI's
figures, as typed results."""

from __future__ import annotations

import json

import polars as pl
import pytest
from datasets import Dataset
from typer.testing import CliRunner

import pairsieve
from pairsieve.cli import app
from pairsieve.datasets import synth
from pairsieve.schemas import MANIFEST_FILE


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    folder = tmp_path_factory.mktemp("api-inputs")
    synth.generate(folder, n_products=80, seed=2)
    return folder


def manifest_files(build) -> dict[str, str]:
    manifest = json.loads((build / "shards" / MANIFEST_FILE).read_text())
    return {f["name"]: f["sha256"] for split in manifest["files"].values() for f in split}


def test_build_and_audit_from_python_match_the_cli(sample, tmp_path, prefect_harness):
    clicks, catalog = sample / "clicks.parquet", sample / "catalog.parquet"
    cli_build = tmp_path / "cli"
    args = ["build", "--clicks", str(clicks), "--catalog", str(catalog), "--out", str(cli_build)]
    assert CliRunner().invoke(app, args).exit_code == 0

    built = pairsieve.build(pl.read_parquet(clicks), pl.read_parquet(catalog), tmp_path / "api")
    assert isinstance(built, pairsieve.BuildResult)
    assert manifest_files(built.out) == manifest_files(cli_build)
    assert built.stages["shards"]["rows_out"] == built.train_dataset().num_rows > 0
    assert "label" in built.train_dataset().column_names
    assert built.products().height == pl.read_parquet(catalog).height
    assert built.to_html().lstrip().lower().startswith("<!doctype html")

    shards = sorted((cli_build / "shards").glob("train-*.parquet"))
    train = pl.concat([pl.read_parquet(f) for f in shards]).drop("label")
    dataset_file = tmp_path / "train.parquet"
    train.write_parquet(dataset_file)
    cli_audit = tmp_path / "cli-audit"
    args = ["audit", "--dataset", str(dataset_file), "--catalog", str(catalog)]
    assert CliRunner().invoke(app, [*args, "--out", str(cli_audit)]).exit_code == 0

    found = pairsieve.audit(
        Dataset(train.to_arrow()), tmp_path / "api-audit", catalog=pl.read_parquet(catalog)
    )
    expected = json.loads((cli_audit / "report.json").read_text())
    assert isinstance(found, pairsieve.AuditResult)
    assert found.false_negative_rate == pytest.approx(expected["false_negative_rate"])
    assert 0 <= found.false_negative_rate <= 1
    low, high = found.interval
    assert low <= found.false_negative_rate <= high
    assert list(found.interval) == expected["audit"]["figures"]["false_negative_rate_ci"]
    assert "false negative" in found.to_html().lower()


def test_a_table_of_another_kind_is_one_clear_error(tmp_path):
    with pytest.raises(pairsieve.api.PairsieveError) as caught:
        pairsieve.audit([{"anchor": "a"}], tmp_path / "out")
    assert caught.value.code == "bad_argument"
