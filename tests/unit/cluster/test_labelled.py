"""The clustering tuned to labels, with the real encoder on real camera titles: a catalog that
counts a camera's kits (other lenses) as one camera says so through its labels, and the veto
gives way."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.cluster import stage as cluster
from pairsieve.config import PairsieveConfig
from pairsieve.errors import PairsieveError
from pairsieve.labels.pairs import pair_id
from pairsieve.labels.store import write_labels
from pairsieve.pair_model.model import NEIGHBOUR_FEATURES, load_model
from tests.paths import SAMPLE_DIR

# Each camera is listed twice, as two kits with other lenses, as marketplaces list it.
CAMERAS = [
    ("canon eos 80d 24.2mp dslr kit with {} lens", "18-55mm", "18-135mm"),
    ("nikon d7200 24.2mp dslr kit {} vr lens", "18-105mm", "18-140mm"),
    ("sony alpha a6000 24.3mp mirrorless kit {} black", "16-50mm", "55-210mm"),
    ("canon eos rebel t6 18mp dslr kit {} lens", "18-55mm", "75-300mm"),
    ("nikon d3400 24.2mp dslr {} kit black", "18-55mm", "70-300mm"),
    ("fujifilm x-t20 24.3mp mirrorless {} kit silver", "18-55mm", "15-45mm"),
]


def _catalog() -> pl.DataFrame:
    ids, titles = [], []
    for i, (pattern, *lenses) in enumerate(CAMERAS):
        for j, lens in enumerate(lenses):
            ids.append(f"c{i}{j}")
            titles.append(pattern.format(lens))
    return pl.DataFrame({S.LISTING_ID: ids, S.TITLE: titles})


def _labels(path, pairs: list[tuple[str, str, bool]]):
    rows = pl.DataFrame(
        {
            "pair_id": [pair_id("candidate", a, b) for a, b, _ in pairs],
            "listing_a": [a for a, _, _ in pairs],
            "listing_b": [b for _, b, _ in pairs],
            "text_a": [None] * len(pairs),
            "text_b": [None] * len(pairs),
            "p_same": [None] * len(pairs),
            "stratum": [None] * len(pairs),
            "weight": [None] * len(pairs),
            "source": ["candidate"] * len(pairs),
            "label": [label for _, _, label in pairs],
        },
        schema_overrides={"p_same": pl.Float64, "stratum": pl.Int64, "weight": pl.Float64},
    )
    return write_labels(rows, path)


def _same(products: pl.DataFrame, a: str, b: str) -> bool:
    of = dict(zip(products[S.LISTING_ID], products[S.PRODUCT_ID], strict=True))
    return of[a] == of[b]


def test_labels_that_call_a_cameras_kits_one_camera_lift_that_veto(
    encoder, tmp_path, session_cache_dir
) -> None:
    cfg = PairsieveConfig().with_(cache_dir=str(session_cache_dir))
    plain = cluster.run(cfg, cluster.Inputs(_catalog()), tmp_path / "plain", encoder=encoder)
    assert plain.details["vetoes"].get("length_conflict", 0) >= len(CAMERAS)
    products = pl.read_parquet(tmp_path / "plain" / S.PRODUCTS_FILE)
    assert not any(_same(products, f"c{i}0", f"c{i}1") for i in range(len(CAMERAS)))

    same = [(f"c{i}0", f"c{i}1", True) for i in range(len(CAMERAS))]
    files = (_labels(tmp_path / "labels.jsonl", [*same, ("c00", "c10", False)]),)
    tuned = cluster.run(
        cfg, cluster.Inputs(_catalog(), labels=files), tmp_path / "tuned", encoder=encoder
    )
    found = tuned.details["labels"]
    assert found["labels_used"] >= len(same)  # the other pair may be no candidate at all
    assert found["labels_used"] + found["labels_not_in_this_clustering"] == len(same) + 1
    assert "length_conflict" in found["proposed_lifts"]
    assert "length_conflict" in found["chosen"]["lifted_vetoes"]
    assert found["estimated_f1"] > found["default_estimated_f1"]
    products = pl.read_parquet(tmp_path / "tuned" / S.PRODUCTS_FILE)
    assert all(_same(products, f"c{i}0", f"c{i}1") for i in range(len(CAMERAS)))
    assert not _same(products, "c00", "c10")  # two cameras stay two
    pairs = pl.read_parquet(tmp_path / "tuned" / S.PAIRS_FILE)
    assert pairs.filter(pl.col(S.VETO_REASON) == "length_conflict").height == 0


def test_labels_on_pairs_this_clustering_never_judged_are_counted_not_used(
    encoder, tmp_path, session_cache_dir
) -> None:
    cfg = PairsieveConfig().with_(cache_dir=str(session_cache_dir))
    files = (_labels(tmp_path / "labels.jsonl", [("c00", "gone", True), ("x", "y", False)]),)
    result = cluster.run(cfg, cluster.Inputs(_catalog(), labels=files), tmp_path, encoder=encoder)
    assert result.details["labels"] == {"labels_used": 0, "labels_not_in_this_clustering": 2}


def test_labels_need_the_learned_pair_model(tmp_path) -> None:
    cfg = PairsieveConfig().with_(**{"cluster.use_embeddings": False})
    files = (_labels(tmp_path / "labels.jsonl", [("c00", "c01", True)]),)
    with pytest.raises(PairsieveError) as found:
        cluster.run(cfg, cluster.Inputs(_catalog(), labels=files), tmp_path / "out")
    assert found.value.code == "bad_config" and found.value.knob == "cluster.judge"


def test_cluster_and_eval_commands_take_labels(tmp_path, session_cache_dir) -> None:
    from typer.testing import CliRunner

    from pairsieve.cli import app

    catalog = _catalog().with_columns(pl.col(S.LISTING_ID).str.slice(0, 2).alias("camera"))
    path = tmp_path / "catalog.parquet"
    catalog.write_parquet(path)
    same = [(f"c{i}0", f"c{i}1", True) for i in range(len(CAMERAS))]
    labels = str(_labels(tmp_path / "labels.jsonl", same))
    cache = ["--set", f"cache_dir={session_cache_dir}"]
    out = tmp_path / "out"
    args = ["cluster", "--catalog", str(path), "--out", str(out), "--labels", labels, *cache]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert all(_same(pl.read_parquet(out / S.PRODUCTS_FILE), *pair[:2]) for pair in same)
    scores = []
    for extra in ([], ["--labels", labels]):
        args = ["eval", "--catalog", str(path), "--truth-column", "camera", *cache, *extra]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        scores.append(json.loads(result.stdout[result.stdout.index("{") :])["pairsieve"])
    assert scores[0]["pairwise_recall"] < scores[1]["pairwise_recall"] == 1.0


def test_labels_that_contradict_the_pair_model_refit_it(encoder, tmp_path, session_cache_dir):
    """On the bundled sample, answers that say the opposite of the shipped model on its unvetoed
    pairs: the refit learns them, judges the pairs, and p_same stays the shipped calibration."""
    cfg = PairsieveConfig().with_(cache_dir=str(session_cache_dir))
    catalog = pl.read_parquet(SAMPLE_DIR / "catalog.parquet")
    cluster.run(cfg, cluster.Inputs(catalog), tmp_path / "plain", encoder=encoder)
    plain = pl.read_parquet(tmp_path / "plain" / S.PAIRS_FILE)
    judged = plain.filter(pl.col(S.SIGNAL) != "exact", pl.col(S.VETO_REASON).is_null())
    middle = judged[S.LINK_SCORE].median()
    low = pl.col(S.LINK_SCORE) < middle
    asked = pl.concat(
        [judged.filter(low).head(100), judged.filter(~low).head(100)], how="vertical"
    ).sort(S.LISTING_A, S.LISTING_B)
    answers = (asked[S.LINK_SCORE] < middle).to_list()  # the shipped model's ranking, reversed
    pairs = list(zip(asked[S.LISTING_A], asked[S.LISTING_B], answers, strict=True))
    files = (_labels(tmp_path / "labels.jsonl", pairs),)
    tuned = cluster.run(
        cfg, cluster.Inputs(catalog, labels=files), tmp_path / "tuned", encoder=encoder
    )
    found = tuned.details["labels"]
    assert found["chosen"]["pair_model"] == "refit"
    assert found["refit"]["features"] == [*load_model().features, *NEIGHBOUR_FEATURES]
    after = asked.join(
        pl.read_parquet(tmp_path / "tuned" / S.PAIRS_FILE),
        on=[S.LISTING_A, S.LISTING_B],
        suffix="_tuned",
    )
    assert after.height == asked.height
    # the refit scores the answered-same pairs above the answered-different ones
    said_same = pl.Series(answers)
    tuned_score = after[f"{S.LINK_SCORE}_tuned"]
    assert tuned_score.filter(said_same).mean() > tuned_score.filter(~said_same).mean()
    np.testing.assert_allclose(after[S.P_SAME], after[f"{S.P_SAME}_tuned"], atol=1e-6)
