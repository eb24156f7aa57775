"""`pairsieve audit` on tiny hand-made datasets, with the real encoder and the real clusterer."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from pairsieve import schemas as S
from pairsieve.audits import stage as audit
from pairsieve.audits.dataset import read_dataset
from pairsieve.cli import app
from pairsieve.config import PairsieveConfig
from pairsieve.errors import PairsieveError
from pairsieve.labels import store
from pairsieve.pair_model.calibration import load_calibration
from pairsieve.report.wording import display_name
from tests.unit.report.test_wording import unlabelled

IPHONE = "Apple iPhone 8 64GB Space Grey"
GALAXY = "Samsung Galaxy S9 SM-G960F 64GB Black"
BOSCH = "Bosch WAN28081GB Serie 4 8kg 1400rpm Washing Machine"
SONY = "Sony KD-55XF9005 55 inch 4K TV"
CANON = "Canon EOS 2000D DSLR Camera 18-55mm Kit"

# 8 negatives, 3 of them the row's positive product: one exact copy (row 2) and two copies that
# differ only in case and spacing (rows 1 and 4), which every clusterer must join.
ROWS = [
    ("iphone 8 grey", IPHONE, ["APPLE iPhone 8 64GB  Space Grey", GALAXY]),
    ("galaxy s9", GALAXY, [GALAXY, IPHONE]),
    ("bosch washing machine", BOSCH, [SONY, CANON]),
    ("sony tv 55", SONY, [BOSCH, "sony kd-55xf9005 55 inch 4k tv"]),
]


def _cfg(tmp_path: Path) -> PairsieveConfig:
    return PairsieveConfig().with_(**{"cache_dir": str(tmp_path / "cache"), "shards.batch_size": 2})


def write_st(path: Path) -> Path:
    """sentence-transformers n-tuple layout: anchor, positive, negative_1, negative_2."""
    frame = pl.DataFrame(
        {
            S.ANCHOR: [r[0] for r in ROWS],
            S.POSITIVE: [r[1] for r in ROWS],
            **{S.negative_column(i + 1): [r[2][i] for r in ROWS] for i in range(2)},
        }
    )
    frame.write_parquet(path)
    return path


def write_flag(path: Path) -> Path:
    """FlagEmbedding layout: query, pos (list), neg (list) as JSONL."""
    with path.open("w") as handle:
        for query, pos, negs in ROWS:
            handle.write(json.dumps({"query": query, "pos": [pos], "neg": negs}) + "\n")
    return path


@pytest.fixture(scope="module")
def st_audit(tmp_path_factory, encoder):
    tmp = tmp_path_factory.mktemp("audit")
    inputs = audit.Inputs(write_st(tmp / "ds.parquet"))
    result = audit.run(_cfg(tmp), inputs, tmp / "out", encoder=encoder)
    return tmp, result, json.loads((tmp / "out" / S.REPORT_JSON).read_text())


def test_false_negative_rate_on_hand_made_dataset(st_audit):
    _, result, rep = st_audit
    figures = rep["audit"]["figures"]
    assert figures["false_negative_rate_by_cluster"] == pytest.approx(3 / 8)
    assert figures["false_negatives"] == 3
    # Estimated: the exact copy counts 1, the two case-and-spacing copies (one normalised
    # title) the calibrated share of identical titles, the five other products little.
    same_title = load_calibration().exact
    low = 1 + 2 * same_title
    assert low <= figures["expected_false_negatives"] <= low + 5 * 0.2
    assert rep["false_negative_rate"] == pytest.approx(figures["expected_false_negatives"] / 8)
    lo, hi = figures["false_negative_rate_ci"]
    assert lo <= 3 / 8 <= hi and hi - lo >= 2 * figures["calibration_error"]
    assert figures["exact_copy_negatives"] == 1
    assert figures["share_of_rows_with_false_negative"] == pytest.approx(3 / 4)
    assert result.balanced() and result.rows_out == 4
    examples = rep["audit"]["tables"]["false negatives, highest scoring first"]
    assert len(examples) == 3
    assert examples[0]["score"] >= examples[-1]["score"]


def test_audit_report_sections(st_audit):
    _, _, rep = st_audit
    for key in ("audit", "duplicates", "batches", "temperature", "hard_negatives"):
        assert rep[key]["title"], key
    assert "false-negative-rate" in rep["chart_ids"]
    # file order with batch size 2: rows 1+2 share no product, rows 3+4 neither, but each row's
    # negatives include the other row's positive product
    realised = rep["batches"]["tables"]["realised when replayed"]
    file_order = next(r for r in realised if r["order"] == "file order" and r["batch_size"] == 2)
    assert file_order["colliding_pairs"] == 0
    assert file_order["hard_negative_false_negatives_per_anchor"] > 0
    temp = rep["temperature"]["tables"]["on this data"]
    assert temp[0]["rows_with_false_negative"] == 3
    recs = rep["recommendations"]["tables"]["recommendations"]
    assert any(display_name("false_negative_rate") in r["rests_on"] for r in recs)
    assert unlabelled(rep) == []


def test_flagembedding_layout_gives_the_same_rate(tmp_path, encoder, st_audit):
    out = tmp_path / "out"
    inputs = audit.Inputs(write_flag(tmp_path / "ds.jsonl"))
    result = audit.run(_cfg(tmp_path), inputs, out, encoder=encoder)
    assert result.details["false_negative_rate_by_cluster"] == pytest.approx(3 / 8)
    st_figures = st_audit[2]["audit"]["figures"]
    assert result.details["false_negative_rate"] == pytest.approx(st_figures["false_negative_rate"])


def test_catalog_with_truth_adds_quality(tmp_path, encoder):
    catalog = pl.DataFrame(
        {
            S.LISTING_ID: ["a", "b", "c", "d", "e", "f"],
            S.TITLE: [IPHONE, "Apple iPhone 8 (64GB) - Space Grey", GALAXY, BOSCH, SONY, CANON],
            S.TRUE_PRODUCT_ID: ["1", "1", "2", "3", "4", "5"],
        }
    )
    catalog.write_parquet(tmp_path / "catalog.parquet")
    cfg = _cfg(tmp_path).with_(**{"ingest.truth_column": S.TRUE_PRODUCT_ID})
    inputs = audit.Inputs(write_st(tmp_path / "ds.parquet"), tmp_path / "catalog.parquet")
    audit.run(cfg, inputs, tmp_path / "out", encoder=encoder)
    rep = json.loads((tmp_path / "out" / S.REPORT_JSON).read_text())
    assert rep["quality"]["figures"]["bcubed_precision"] > 0
    assert rep["missing"] == []


def test_missing_columns_name_file_and_column(tmp_path):
    path = tmp_path / "bad.parquet"
    pl.DataFrame({S.ANCHOR: ["q"], S.POSITIVE: ["p"]}).write_parquet(path)
    with pytest.raises(PairsieveError) as err:
        read_dataset(path)
    assert err.value.column == "negative_1" and str(path) in str(err.value)
    pl.DataFrame({"text": ["q"]}).write_parquet(path)
    with pytest.raises(PairsieveError, match="FlagEmbedding"):
        read_dataset(path)


def test_rows_without_texts_are_counted(tmp_path):
    path = tmp_path / "ds.parquet"
    pl.DataFrame(
        {S.ANCHOR: ["q", None, "r"], S.POSITIVE: ["p", "p", "s"], "negative": ["n", "n", None]}
    ).write_parquet(path)
    data, dropped = read_dataset(path)
    assert data.height == 1
    assert dropped == {"missing_anchor_or_positive": 1, "no_negatives": 1}


def test_cli_audit_missing_dataset_exits_2(tmp_path):
    result = CliRunner().invoke(
        app, ["audit", "--dataset", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert not (tmp_path / "o").exists()


def test_audit_report_renders_in_chromium(st_audit, tmp_path):
    from tests.unit.report.test_stage import CHROMIUM, assert_page_renders

    if not CHROMIUM.exists():
        pytest.skip("Chromium absent: `apt-get install chromium` (make test does it)")
    tmp, _, _ = st_audit
    assert_page_renders(tmp / "out", tmp_path / "profile")


def test_labels_drawn_from_an_audit_correct_its_estimate(st_audit, tmp_path, encoder):
    tmp, _, _ = st_audit
    labels = tmp_path / "labels.jsonl"
    drawn = CliRunner().invoke(
        app, ["label", "sample", "--audit", str(tmp / "out"), "--n", "8", "--out", str(labels)]
    )
    assert drawn.exit_code == 0, drawn.output
    rows = store.read_labels(labels)
    assert rows.height == 8 and set(rows["source"]) == {"audit"}  # every distinct pair
    # A person answers every pair: the three negatives of the positive's product are "same".
    same = {(IPHONE, "APPLE iPhone 8 64GB  Space Grey"), (GALAXY, GALAXY), (SONY, ROWS[3][2][1])}
    answers = [(a, b) in same for a, b in rows.select("text_a", "text_b").iter_rows()]
    store.write_labels(rows.with_columns(pl.Series("label", answers)), labels)
    other = tmp_path / "other.jsonl"
    other.write_text('{"pair_id": "cdeadbeef", "label": true}\n')
    inputs = audit.Inputs(write_st(tmp_path / "ds.parquet"), labels=(labels, other))
    audit.run(_cfg(tmp_path), inputs, tmp_path / "out", encoder=encoder)
    rep = json.loads((tmp_path / "out" / S.REPORT_JSON).read_text())
    figures = rep["audit"]["figures"]
    assert rep["false_negative_rate"] == pytest.approx(3 / 8)  # every pair known: exact
    assert figures["false_negative_rate_ci"] == pytest.approx([3 / 8, 3 / 8])
    assert figures["labels_used"] == 8 and figures["labels_not_in_this_audit"] == 1
    assert figures["false_negative_rate_model_only"] != pytest.approx(3 / 8)
    assert unlabelled(rep) == []


def test_an_audit_reruns_when_a_setting_it_reads_changes(tmp_path, encoder):
    """The audit reads the training batch size; a new one gives a new report, not a skip."""
    from pairsieve.orchestration.steps import audit_step

    dataset, out = write_st(tmp_path / "ds.parquet"), tmp_path / "audit"

    def batch_of(cfg: PairsieveConfig) -> tuple[bool, int]:
        result = audit_step(cfg, dataset, None, out)
        report = json.loads((out / S.REPORT_JSON).read_text())
        return result.skipped, report["batches"]["figures"]["training_batch_size"]

    assert batch_of(_cfg(tmp_path)) == (False, 2)
    assert batch_of(_cfg(tmp_path)) == (True, 2)
    bigger = _cfg(tmp_path).with_(**{"shards.batch_size": 4})
    assert batch_of(bigger) == (False, 4)
    assert batch_of(bigger.with_(**{"runner.workers": 1})) == (True, 4)
