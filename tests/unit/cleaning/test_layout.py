"""Each input layout comes back as it came in: same columns and order, other columns untouched,
the negatives refilled, dropped rows gone, a `label` only when asked."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.audits.pairs import NEGATIVES
from pairsieve.cleaning import layout as L

TRIPLETS = pl.DataFrame(
    {"anchor": ["q1", "q2"], "positive": ["p1", "p2"], "negative": ["n1", "n2"], "id": [7, 8]}
)
TUPLES = pl.DataFrame(
    {
        "anchor": ["q1", "q2"],
        "positive": ["p1", "p2"],
        "negative_1": ["a1", "a2"],
        "negative_2": ["b1", "b2"],
    }
)
FLAG = [
    {"query": "q1", "pos": ["p1", "p1b"], "neg": ["n1", "m1"], "prompt": "x"},
    {"query": "q2", "pos": ["p2"], "neg": ["n2"], "prompt": "y"},
]


def _write(tmp_path, name: str):
    if name == "triplets.parquet":
        TRIPLETS.write_parquet(tmp_path / name)
    elif name == "tuples.parquet":
        TUPLES.write_parquet(tmp_path / name)
    else:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in FLAG))
    return tmp_path / name


def _unchanged(file: L.DatasetFile) -> pl.DataFrame:
    """Each output row's negatives as read (the first normalised row of each)."""
    rows = L.normalised_rows([file])
    return rows.group_by(L.ROW, maintain_order=True).agg(pl.col(NEGATIVES).first())


@pytest.mark.parametrize("name", ["triplets.parquet", "tuples.parquet", "flag.jsonl"])
def test_unchanged_negatives_write_back_the_same_rows(tmp_path, name):
    (file,) = L.read_files(_write(tmp_path, name))
    out = L.write_back(file, _unchanged(file), None, tmp_path / "out" / name)
    again = L.read_files(out)[0].frame
    assert again.columns == file.frame.columns
    assert again.to_dicts() == file.frame.to_dicts()


def test_sentence_transformers_columns_are_refilled_in_place_and_a_label_added(tmp_path):
    (file,) = L.read_files(_write(tmp_path, "tuples.parquet"))
    assert file.layout == L.SENTENCE_TRANSFORMERS and file.fixed_width
    assert file.negative_columns == ("negative_1", "negative_2")
    negatives = pl.DataFrame(
        {L.ROW: [1], NEGATIVES: [["r2", "b2"]]},
        schema={L.ROW: pl.UInt32, NEGATIVES: pl.List(pl.String)},
    )
    labels = pl.DataFrame(
        {L.ROW: [1], S.LABEL: [[1, 2, 3]]}, schema={L.ROW: pl.UInt32, S.LABEL: pl.List(pl.Int64)}
    )
    out = pl.read_parquet(L.write_back(file, negatives, labels, tmp_path / "o.parquet"))
    assert out.columns == [*TUPLES.columns, S.LABEL]
    assert out.row(0) == ("q2", "p2", "r2", "b2", [1, 2, 3])  # row 0 was dropped


def test_flagembedding_rows_keep_their_positives_and_other_keys(tmp_path):
    (file,) = L.read_files(_write(tmp_path, "flag.jsonl"))
    assert file.layout == L.FLAGEMBEDDING and not file.fixed_width
    rows = L.normalised_rows([file])
    assert rows[L.ROW].to_list() == [0, 0, 1]  # one row per positive
    negatives = pl.DataFrame(
        {L.ROW: [0, 1], NEGATIVES: [["m1"], ["r2", "s2"]]},
        schema={L.ROW: pl.UInt32, NEGATIVES: pl.List(pl.String)},
    )
    out = L.write_back(file, negatives, None, tmp_path / "o.jsonl")
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert written == [
        {"query": "q1", "pos": ["p1", "p1b"], "neg": ["m1"], "prompt": "x"},
        {"query": "q2", "pos": ["p2"], "neg": ["r2", "s2"], "prompt": "y"},
    ]
