"""`pairsieve experiment` at toy size on a slice of the bundled sample: every arm trains, the
results file has its schema, a rerun reuses the runs, and bad requests get one clear line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from pairsieve.cli import app
from pairsieve.experiment.arms import ARMS
from pairsieve.schemas import TRUE_PRODUCT_ID
from tests.paths import SAMPLE_DIR
from tests.system.test_pipeline import _cfg, _run_steps, _slice

pytestmark = pytest.mark.system
METRICS = ("recall@10", "ndcg@10", "mrr@10")
TOY = ["--steps", "2", "--batch-size", "8", "--negatives", "1"]


@pytest.fixture(scope="module")
def eval_build(tmp_path_factory, session_cache_dir) -> Path:
    """A build of 150 sample products with 30% of them held out."""
    products = sorted(pl.read_parquet(SAMPLE_DIR / "catalog.parquet")[TRUE_PRODUCT_ID].unique())
    root = tmp_path_factory.mktemp("experiment")
    data = _slice(root / "data", products[:150])
    cfg = _cfg(session_cache_dir, **{"shards.eval_fraction": 0.3})
    _run_steps(cfg, data, root / "run")
    return root / "run"


def experiment(*args: str):
    return CliRunner().invoke(app, ["experiment", *args], catch_exceptions=False)


def toy_experiment(build: Path, out: Path):
    """Every arm (those run on request too) at τ 0.05 and learned, one seed, two steps."""
    return experiment(
        "--run", str(build), "--out", str(out), "--truth-column", TRUE_PRODUCT_ID,
        "--arms", ",".join(ARMS), "--taus", "0.05,learned", *TOY,
    )  # fmt: skip


@pytest.fixture(scope="module")
def toy_results(eval_build, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("exp") / "out"
    done = toy_experiment(eval_build, out)
    assert done.exit_code == 0, done.output
    return out, json.loads((out / "results.json").read_text())


def test_every_arm_trains_and_the_results_have_their_schema(toy_results):
    out, results = toy_results
    assert results["version"] == 1
    assert results["relevance"] == f"ground truth ({TRUE_PRODUCT_ID})"
    assert results["queries"] > 0 and results["corpus_listings"] > results["queries"] / 10
    arms = {(a["arm"], a["tau"]) for a in results["arms"]}
    assert arms == {
        ("zero-shot", None),
        *(
            (arm, tau)
            for arm in (
                "naive",
                "cleaned",
                "pairsieve",
                "pairsieve-queue",
                "pairsieve-guided",
                "pairsieve-contrast",
                "pairsieve-gist",
                "pairsieve-contrast-guided",
                "shards-stock",
                "oracle",
            )
            for tau in (0.05, "learned")
        ),
        ("st-best", 0.05),  # GISTEmbedLoss takes no learned temperature
    }
    for row in results["arms"]:
        assert all(0 <= row[m] <= 1 for m in METRICS)
    learned = [a for a in results["arms"] if a["tau"] == "learned"]
    assert all(len(a["learned_tau"]) == 1 and 0.01 <= a["learned_tau"][0] for a in learned)
    # τ has a learning rate of its own: at the encoder's 2e-5 it would stay within 1e-5 of 0.07.
    assert all(abs(a["learned_tau"][0] - 0.07) > 1e-4 for a in learned)
    trained = [r for r in results["runs"] if r["arm"] != "zero-shot"]
    assert all(r["steps"] == 2 for r in trained)
    assert all(len(r["tau_trace"]) == 2 * (r["tau"] == "learned") for r in trained)
    pairs = {(c["arm"], c["baseline"]) for c in results["comparisons"]}
    assert {
        ("pairsieve", "naive"),
        ("pairsieve", "st-best"),
        ("cleaned", "naive"),
        ("cleaned", "st-best"),
        ("oracle", "pairsieve"),
        ("pairsieve", "shards-stock"),
        ("pairsieve-queue", "pairsieve"),
        ("pairsieve-guided", "pairsieve"),
        ("pairsieve-contrast", "pairsieve"),
        ("pairsieve-gist", "pairsieve"),
        ("pairsieve-contrast-guided", "pairsieve-contrast"),
    } <= pairs
    for c in results["comparisons"]:
        assert c["ci"][0] <= c["difference"] <= c["ci"][1], c
    shares = results["negatives_of_the_positive_product"]
    assert set(shares) == {"naive", "st-best", "cleaned", "pairsieve"}
    assert shares["pairsieve"] < shares["naive"]  # the miner without products keeps copies
    assert shares["cleaned"] < shares["naive"]
    per_query = pl.read_parquet(out / "per_query.parquet")
    assert per_query.height == results["queries"] * len(results["runs"])
    page = (out / "report.html").read_text()
    assert page.count("data-chart=") == 3 and "What it did to a model" in page


def test_a_rerun_reuses_every_run(toy_results, eval_build):
    out, results = toy_results
    runs = sorted((out / "runs").iterdir())
    stamps = [p.stat().st_mtime_ns for p in runs]
    again = toy_experiment(eval_build, out)
    assert again.exit_code == 0, again.output
    assert [p.stat().st_mtime_ns for p in sorted((out / "runs").iterdir())] == stamps
    assert json.loads((out / "results.json").read_text()) == results


def test_a_build_without_held_out_products_is_refused_with_the_knob(eval_build, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(eval_build, run)
    manifest = json.loads((run / "shards" / "manifest.json").read_text())
    manifest["files"]["eval"] = []
    (run / "shards" / "manifest.json").write_text(json.dumps(manifest))
    done = experiment("--run", str(run), "--out", str(tmp_path / "out"), *TOY)
    assert done.exit_code == 2
    assert "no_eval_split" in done.output and "shards.eval_fraction" in done.output


def test_the_oracle_needs_ground_truth_and_arms_are_checked(eval_build, tmp_path):
    out = str(tmp_path / "o")
    done = experiment("--run", str(eval_build), "--out", out, "--arms", "oracle", *TOY)
    assert done.exit_code == 2 and "oracle arm needs --truth-column" in done.output
    done = experiment("--run", str(eval_build), "--out", str(tmp_path / "o"), "--arms", "magic")
    assert done.exit_code == 2 and "unknown arm" in done.output
