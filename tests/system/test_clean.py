"""`pairsieve clean` with the real model and Prefect on a generated marketplace: copies of the
positive's product planted among a dataset's negatives are replaced, every row and negative is
accounted for, each layout comes back as it came in, the same inputs give the same bytes, rows
whose positive the catalog lacks are quarantined, and `pairsieve.clean` hands
`SentenceTransformerTrainer` a dataset it trains on with the masked loss."""

from __future__ import annotations

import hashlib
import json
import random

import polars as pl
import pytest
from datasets import Dataset
from typer.testing import CliRunner

import pairsieve
from pairsieve import schemas as S
from pairsieve.cli import app
from pairsieve.datasets import synth
from pairsieve.labels import store
from tests.unit.report.test_wording import unlabelled

pytestmark = pytest.mark.system


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """An 80-product marketplace and a dataset mined without products: for each clicked pair,
    negative_1 is another listing of the positive's product (a copy) in two rows of five, and
    negative_2 a listing of another product."""
    folder = tmp_path_factory.mktemp("clean-inputs")
    synth.generate(folder, n_products=80, seed=2)
    catalog = pl.read_parquet(folder / "catalog.parquet")
    title = dict(zip(catalog[S.LISTING_ID], catalog[S.TITLE], strict=True))
    product = dict(zip(catalog[S.LISTING_ID], catalog[S.TRUE_PRODUCT_ID], strict=True))
    listings = sorted(title)
    pairs = pl.read_parquet(folder / "clicks.parquet").select(S.QUERY, S.LISTING_ID).unique()
    rng, rows = random.Random(5), []
    for query, clicked in pairs.sort(S.QUERY, S.LISTING_ID).iter_rows():
        copies = [x for x in listings if product[x] == product[clicked] and x != clicked]
        others = [x for x in listings if product[x] != product[clicked]]
        first = rng.choice(copies) if copies and rng.random() < 0.4 else rng.choice(others)
        rows.append((query, title[clicked], title[first], title[rng.choice(others)], len(rows)))
    columns = [S.ANCHOR, S.POSITIVE, "negative_1", "negative_2", "row_id"]
    pl.DataFrame(rows, schema=columns, orient="row").write_parquet(folder / "tuples.parquet")
    return folder


def truth_of(folder) -> dict[str, str]:
    catalog = pl.read_parquet(folder / "catalog.parquet")
    return dict(zip(catalog[S.TITLE], catalog[S.TRUE_PRODUCT_ID], strict=True))


def copy_share(frame: pl.DataFrame, truth: dict[str, str], negatives: list[str]) -> float:
    pairs = [(p, n) for c in negatives for p, n in zip(frame[S.POSITIVE], frame[c], strict=True)]
    return sum(truth[p] == truth[n] for p, n in pairs) / len(pairs)


def clean(*args: str):
    return CliRunner().invoke(app, ["clean", *args])


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def cleaned(sample, tmp_path_factory, prefect_harness):
    out = tmp_path_factory.mktemp("clean") / "out"
    done = clean("--dataset", str(sample / "tuples.parquet"), "--catalog",
                 str(sample / "catalog.parquet"), "--out", str(out))  # fmt: skip
    assert done.exit_code == 0, done.output
    return out


def test_copies_are_replaced_and_every_row_and_negative_is_accounted_for(sample, cleaned):
    given = pl.read_parquet(sample / "tuples.parquet")
    repaired = pl.read_parquet(cleaned / "dataset" / "tuples.parquet")
    truth, negatives = truth_of(sample), ["negative_1", "negative_2"]
    assert copy_share(given, truth, negatives) > 0.15
    assert copy_share(repaired, truth, negatives) <= 0.01
    assert repaired.columns == [*given.columns, S.LABEL]
    assert repaired.height >= 0.95 * given.height
    kept = given.join(repaired.select("row_id"), on="row_id")  # untouched columns stay
    assert kept.select(S.ANCHOR, S.POSITIVE).equals(repaired.select(S.ANCHOR, S.POSITIVE))

    slots = pl.read_parquet(cleaned / "clean_negatives.parquet")
    dropped = pl.read_parquet(cleaned / "clean_rows_dropped.parquet")
    assert slots.height == 2 * given.height
    assert given.height == repaired.height + dropped.height
    report = json.loads((cleaned / "report.json").read_text())
    figures = report["clean"]["figures"]
    assert figures["negatives"] == sum(
        figures[f"negatives_{a}"] for a in ("kept", "replaced", "dropped")
    )
    assert figures["false_negative_rate_after"] < figures["false_negative_rate_before"]
    assert figures["false_negative_rate_by_cluster_after"] == 0
    # A replaced negative's place holds its replacement; a kept one is the negative given.
    by_row = dict(zip(repaired["row_id"], repaired.iter_rows(named=True), strict=True))
    for slot in slots.filter(pl.col("row") < 40).iter_rows(named=True):
        row = by_row.get(given["row_id"][slot["row"]])
        if row is not None:
            expected = slot["replacement"] if slot["action"] == "replaced" else slot["negative"]
            assert row[f"negative_{slot['slot'] + 1}"] == expected
    assert "before and after" in (cleaned / "report.html").read_text()
    assert unlabelled(report) == []


def test_labels_are_the_product_ids_of_positive_and_negatives(sample, cleaned):
    repaired = pl.read_parquet(cleaned / "dataset" / "tuples.parquet")
    assert set(repaired[S.LABEL].list.len()) == {3}
    assert all(label[0] not in label[1:] for label in repaired[S.LABEL])


def test_the_same_inputs_give_the_same_bytes(sample, cleaned, tmp_path):
    again = tmp_path / "again"
    done = clean("--dataset", str(sample / "tuples.parquet"), "--catalog",
                 str(sample / "catalog.parquet"), "--out", str(again))  # fmt: skip
    assert done.exit_code == 0, done.output
    for name in ("dataset/tuples.parquet", "clean_negatives.parquet"):
        assert sha256(again / name) == sha256(cleaned / name), name


def test_flagembedding_jsonl_comes_back_as_jsonl_without_a_label(sample, tmp_path):
    given = pl.read_parquet(sample / "tuples.parquet").head(60)
    lines = [
        json.dumps(
            {
                "query": r[S.ANCHOR],
                "pos": [r[S.POSITIVE]],
                "neg": [r["negative_1"], r["negative_2"]],
                "id": r["row_id"],
            }
        )  # fmt: skip
        for r in given.iter_rows(named=True)
    ]
    (tmp_path / "flag.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    done = clean("--dataset", str(tmp_path / "flag.jsonl"), "--catalog",
                 str(sample / "catalog.parquet"), "--out", str(out))  # fmt: skip
    assert done.exit_code == 0, done.output
    written = [
        json.loads(line) for line in (out / "dataset" / "flag.jsonl").read_text().splitlines()
    ]
    assert [sorted(r) for r in written] == [["id", "neg", "pos", "query"]] * len(written)
    truth = truth_of(sample)
    copies = sum(truth[n] == truth[r["pos"][0]] for r in written for n in r["neg"])
    assert len(written) == 60 and copies == 0


def test_rows_whose_positive_the_catalog_lacks_are_quarantined(sample, tmp_path):
    given = pl.read_parquet(sample / "tuples.parquet").head(40)
    strange = given.with_columns(
        pl.when(pl.col("row_id") < 5)
        .then(pl.lit("a title no catalog holds ") + pl.col("row_id").cast(pl.String))
        .otherwise(pl.col(S.POSITIVE))
        .alias(S.POSITIVE)
    )
    strange.write_parquet(tmp_path / "some.parquet")
    catalog = str(sample / "catalog.parquet")
    done = clean("--dataset", str(tmp_path / "some.parquet"), "--catalog", catalog, "--out",
                 str(tmp_path / "some"))  # fmt: skip
    assert done.exit_code == 0, done.output
    dropped = pl.read_parquet(tmp_path / "some" / "clean_rows_dropped.parquet")
    assert dropped["row"].to_list() == [0, 1, 2, 3, 4]
    assert set(dropped[S.REASON]) == {"positive_not_in_catalog"}

    strange.head(5).write_parquet(tmp_path / "none.parquet")
    done = clean("--dataset", str(tmp_path / "none.parquet"), "--catalog", catalog, "--out",
                 str(tmp_path / "none"))  # fmt: skip
    assert done.exit_code == 2
    (line,) = [x for x in done.output.splitlines() if x.strip()]
    assert "empty_input" in line and "none.parquet" in line and "positive" in line


def test_a_cleaned_dataset_trains_with_the_masked_loss_and_no_glue(sample, tmp_path):
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from pairsieve.training import MaskedMultipleNegativesRankingLoss, ProductDisjointBatchSampler
    from pairsieve.vectors.embed import bundled_model_path

    given = Dataset(pl.read_parquet(sample / "tuples.parquet").drop("row_id").to_arrow())
    repaired = pairsieve.clean(given, pl.read_parquet(sample / "catalog.parquet"))
    assert isinstance(repaired, Dataset)
    assert repaired.column_names == [S.ANCHOR, S.POSITIVE, "negative_1", "negative_2", S.LABEL]
    model = SentenceTransformer(str(bundled_model_path()), device="cpu")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "train"), max_steps=3, per_device_train_batch_size=8,
        batch_sampler=ProductDisjointBatchSampler, report_to="none", save_strategy="no",
        disable_tqdm=True, dataloader_drop_last=True,
    )  # fmt: skip
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=repaired,
        loss=MaskedMultipleNegativesRankingLoss(model),
    )
    assert trainer.train().global_step == 3


def test_labels_correct_the_audit_before_as_they_correct_an_audit(sample, cleaned, tmp_path):
    labels = tmp_path / "labels.jsonl"
    drawn = CliRunner().invoke(
        app,
        ["label", "sample", "--audit", str(cleaned / "before"), "--n", "20", "--out", str(labels)],
    )
    assert drawn.exit_code == 0, drawn.output
    rows, truth = store.read_labels(labels), truth_of(sample)
    answers = [truth[a] == truth[b] for a, b in rows.select("text_a", "text_b").iter_rows()]
    store.write_labels(rows.with_columns(pl.Series("label", answers)), labels)
    out = tmp_path / "out"
    done = clean("--dataset", str(sample / "tuples.parquet"), "--catalog",
                 str(sample / "catalog.parquet"), "--labels", str(labels),
                 "--out", str(out))  # fmt: skip
    assert done.exit_code == 0, done.output
    figures = json.loads((out / "report.json").read_text())["clean"]["figures"]
    before = json.loads((out / "before" / "report.json").read_text())
    assert figures["labels_used_before"] == 20
    assert figures["false_negative_rate_before"] == before["false_negative_rate"]
    assert before["audit"]["figures"]["false_negative_rate_model_only"] != pytest.approx(
        before["false_negative_rate"]
    )
    # The labels change the estimate, not the repair: the same dataset comes out.
    assert sha256(out / "dataset" / "tuples.parquet") == sha256(
        cleaned / "dataset" / "tuples.parquet"
    )


def test_the_api_writes_what_the_command_writes(sample, cleaned, tmp_path):
    out = tmp_path / "api"
    repaired = pairsieve.clean(sample / "tuples.parquet", sample / "catalog.parquet", out=out)
    for name in ("dataset/tuples.parquet", "clean_negatives.parquet"):
        assert sha256(out / name) == sha256(cleaned / name), name
    assert repaired.num_rows == pl.read_parquet(cleaned / "dataset" / "tuples.parquet").height
