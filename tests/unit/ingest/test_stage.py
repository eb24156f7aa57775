"""Ingest: quarantine reasons, file-level errors, accounting, format/order independence."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import fsspec
import polars as pl
import pytest
from typer.testing import CliRunner

from pairsieve.cli import app
from pairsieve.config import PairsieveConfig
from pairsieve.core.hashing import hex_digest
from pairsieve.errors import PairsieveError
from pairsieve.ingest import catalog as ingest_catalog
from pairsieve.ingest import clicks as ingest_clicks
from pairsieve.ingest import rules
from pairsieve.ingest import stage as ingest
from pairsieve.schemas import (
    CLICK_ROWS,
    CLICKS,
    CLICKS_FILE,
    LISTING_ID,
    LISTINGS_FILE,
    QUARANTINE_FILE,
    QUERY,
    QUERY_ID,
    QUERY_NORM,
    RAW,
    REASON,
    ROW_NUMBER,
    SOURCE_FILE,
    STAGE_JSON,
    TABLE,
    TITLE,
    TITLE_NORM,
    TS,
)

CFG = PairsieveConfig()
CATALOG = pl.DataFrame(
    {
        LISTING_ID: ["L1", "L2", "L3", "L4", "L2", "L5", "L6"],
        TITLE: [
            "Apple iPhone 12 64 GB Black",
            "Samsung Galaxy S21 128GB",
            "Sony WH-1000XM4 headphones",
            "Nike Air Max 90",
            "Samsung Galaxy S21 128 GB (duplicate id)",
            None,
            "Dell XPS 13",
        ],
        "brand": ["Apple", "Samsung", "Sony", "Nike", "Samsung", "x", "Dell"],
        "true_product": ["p1", "p2", "p3", "p4", "p2", "p5", "p6"],
    }
)
CLICKS_IN = pl.DataFrame(
    {
        QUERY: ["iphone 12", "iPhone  12", "iphone 12", "galaxy s21", None, "dell", "sony", "xps"],
        LISTING_ID: ["L1", "L1", "L1", "L2", "L3", "L9", "L3", "L5"],
        CLICKS: [1, 2, 3, 1, 1, 1, 4, 1],
        TS: pl.datetime_range(
            datetime(2024, 3, 1, 9, 30, tzinfo=UTC),
            datetime(2024, 3, 8, 9, 30, tzinfo=UTC),
            "1d",
            eager=True,
        ),
    }
)


def _write(frame: pl.DataFrame, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    {".parquet": frame.write_parquet, ".jsonl": frame.write_ndjson, ".csv": frame.write_csv}[
        path.suffix
    ](path)
    return path


def _run(tmp_path: Path, clicks, catalog, cfg: PairsieveConfig = CFG, name: str = "out"):
    out = tmp_path / name
    out.mkdir()
    return ingest.run(cfg, ingest.Inputs(clicks, catalog), out), out


def _quarantine(out: Path) -> pl.DataFrame:
    return pl.read_parquet(out / QUARANTINE_FILE)


def _reasons(out: Path, table: str) -> dict[int, str]:
    q = _quarantine(out).filter(pl.col(TABLE) == table)
    return dict(zip(q[ROW_NUMBER].to_list(), q[REASON].to_list(), strict=True))


def _lines(path: Path, header: str, rows: list[bytes]) -> Path:
    path.write_bytes(header.encode() + b"\n" + b"\n".join(rows) + b"\n")
    return path


def test_every_catalog_reason(tmp_path):
    catalog = _lines(
        tmp_path / "catalog.csv",
        "listing_id,title",
        [
            b"A,Good phone 64GB",
            b",No id",
            b"B,   ",
            b"C,caf\xff latte",  # not UTF-8
            b"D,bell\x07 character",
            b"E," + b"very long title " * 3,
            b"A,Second A",
            b"F,\x01",  # only a control character: control wins over empty
        ],
    )
    clicks = _write(pl.DataFrame({QUERY: ["phone"], LISTING_ID: ["A"]}), tmp_path / "c.csv")
    cfg = CFG.with_(**{"ingest.max_title_chars": 40})
    result, out = _run(tmp_path, clicks, catalog, cfg)
    assert _reasons(out, "catalog") == {
        2: rules.MISSING_LISTING_ID,
        3: rules.EMPTY_TITLE,
        4: rules.BAD_ENCODING,
        5: rules.CONTROL_CHARACTERS,
        6: rules.TITLE_TOO_LONG,
        7: rules.DUPLICATE_LISTING_ID,
        8: rules.CONTROL_CHARACTERS,
    }
    listings = pl.read_parquet(out / LISTINGS_FILE)
    assert listings[TITLE].to_list() == ["Good phone 64GB"]
    assert listings[TITLE_NORM].to_list() == ["good phone 64gb"]
    raw = json.loads(_quarantine(out).filter(pl.col(ROW_NUMBER) == 7)[RAW][0])
    assert raw == {LISTING_ID: "A", TITLE: "Second A"}
    assert result.details["catalog"]["dropped_by_reason"][rules.CONTROL_CHARACTERS] == 2


def test_every_clicks_reason(tmp_path):
    catalog = _write(CATALOG.head(4), tmp_path / "catalog.parquet")
    clicks = _lines(
        tmp_path / "clicks.csv",
        "query,listing_id,clicks,position,ts",
        [
            b"iphone,L1,1,1,2024-03-01 10:00:00",
            b",L1,1,1,2024-03-01 10:00:00",
            b"  ,L1,1,1,2024-03-01 10:00:00",
            b"iphone,,1,1,2024-03-01 10:00:00",
            b"iph\xffone,L1,1,1,2024-03-01 10:00:00",
            b"iph\x1bone,L1,1,1,2024-03-01 10:00:00",
            b"an extremely long query,L1,1,1,2024-03-01 10:00:00",
            b"iphone,L1,many,1,2024-03-01 10:00:00",
            b"iphone,L1,-1,1,2024-03-01 10:00:00",
            b"iphone,L1,1,2.5,2024-03-01 10:00:00",
            b"iphone,L404,1,1,2024-03-01 10:00:00",
            b"iphone,L1,2,,",
            b"iphone,L1,1,1,last tuesday",
            b"iphone,L1,1,1,2024-02-30",
            b"iphone,L1,1,1,2024-03-01T09:00:00+01:00",  # another format, another zone
        ],
    )
    cfg = CFG.with_(**{"ingest.max_query_chars": 12})
    result, out = _run(tmp_path, clicks, catalog, cfg)
    assert _reasons(out, "clicks") == {
        2: rules.MISSING_QUERY,
        3: rules.MISSING_QUERY,
        4: rules.MISSING_LISTING_ID,
        5: rules.BAD_ENCODING,
        6: rules.CONTROL_CHARACTERS,
        7: rules.QUERY_TOO_LONG,
        8: rules.BAD_VALUE,
        9: rules.BAD_VALUE,
        10: rules.BAD_VALUE,
        11: rules.UNKNOWN_LISTING,
        13: rules.BAD_VALUE,
        14: rules.BAD_VALUE,
    }
    pairs = pl.read_parquet(out / CLICKS_FILE)
    assert pairs.select(QUERY, LISTING_ID, CLICKS, CLICK_ROWS, "position", TS).rows() == [
        ("iphone", "L1", 4.0, 3, 1, datetime(2024, 3, 1, 8, tzinfo=UTC))
    ]
    assert result.details["clicks"]["dropped_by_reason"][rules.AGGREGATED] == 2


def test_click_on_a_quarantined_listing_is_unknown(tmp_path):
    catalog = _write(CATALOG, tmp_path / "catalog.csv")
    clicks = _write(pl.DataFrame({QUERY: ["a"], LISTING_ID: ["L5"]}), tmp_path / "c.csv")
    _, out = _run(tmp_path, clicks, catalog)
    assert _reasons(out, "catalog")[6] == rules.EMPTY_TITLE
    assert _reasons(out, "clicks") == {1: rules.UNKNOWN_LISTING}


def test_accounting_identity_per_input_and_total(tmp_path):
    catalog = _write(CATALOG, tmp_path / "catalog.csv")
    clicks = _write(CLICKS_IN, tmp_path / "clicks.csv")
    result, out = _run(tmp_path, clicks, catalog)
    assert result.balanced()
    assert result.rows_in == CATALOG.height + CLICKS_IN.height
    for table in ("clicks", "catalog"):
        acc = result.details[table]
        assert acc["rows_in"] == acc["rows_out"] + sum(acc["dropped_by_reason"].values())
        quarantined = _quarantine(out).filter(pl.col(TABLE) == table).height
        merged = acc["dropped_by_reason"].get(rules.AGGREGATED, 0)
        assert quarantined == sum(acc["dropped_by_reason"].values()) - merged
    assert result.details["catalog"]["rows_out"] == pl.read_parquet(out / LISTINGS_FILE).height
    assert result.details["clicks"]["rows_out"] == pl.read_parquet(out / CLICKS_FILE).height


def test_aggregation_keeps_most_frequent_spelling_and_exact_sums(tmp_path):
    catalog = _write(CATALOG.head(2), tmp_path / "catalog.csv")
    clicks = _write(
        pl.DataFrame(
            {
                QUERY: ["iPhone 12", "IPHONE 12", "iphone   12", "IPHONE 12", "iPhone 12"],
                LISTING_ID: ["L1", "L1", " L1 ", "L1", "L2"],
                "weight": [0.1, 0.2, 0.0, 0.0, 1.5],
                "session_id": ["s9", "s2", "s5", "s7", "s1"],
            }
        ),
        tmp_path / "clicks.csv",
    )
    _, out = _run(tmp_path, clicks, catalog)
    pairs = pl.read_parquet(out / CLICKS_FILE).sort(LISTING_ID)
    # "IPHONE 12" and "iPhone 12" both appear twice: the tie goes to the smaller string.
    assert pairs[QUERY].to_list() == ["IPHONE 12", "IPHONE 12"]
    assert pairs[QUERY_NORM].to_list() == ["iphone 12", "iphone 12"]
    assert pairs[QUERY_ID].to_list() == [hex_digest("iphone 12")] * 2
    assert pairs[CLICKS].to_list() == [0.3, 1.5]  # exact: summed in micro-units
    assert pairs[CLICK_ROWS].to_list() == [4, 1]
    assert pairs["session_id"].to_list() == ["s2", "s1"]
    assert "weight" not in pairs.columns


def test_without_a_count_column_clicks_are_rows(tmp_path):
    catalog = _write(CATALOG.head(1), tmp_path / "catalog.csv")
    clicks = _write(
        pl.DataFrame({QUERY: ["a", "A", "b"], LISTING_ID: ["L1"] * 3}), tmp_path / "c.csv"
    )
    _, out = _run(tmp_path, clicks, catalog)
    assert pl.read_parquet(out / CLICKS_FILE).sort(QUERY)[CLICKS].to_list() == [2.0, 1.0]


def test_duplicate_keeps_first_by_file_and_row_whatever_the_listing_order(tmp_path):
    first = _write(CATALOG.head(1), tmp_path / "cat" / "a.csv")
    second = _write(
        pl.DataFrame({LISTING_ID: ["L1"], TITLE: ["Later copy"]}), tmp_path / "cat" / "b.csv"
    )
    clicks = _write(pl.DataFrame({QUERY: ["a"], LISTING_ID: ["L1"]}), tmp_path / "c.csv")
    for name, spec in (("fwd", [str(first), str(second)]), ("rev", [str(second), str(first)])):
        _, out = _run(tmp_path, clicks, spec, name=name)
        assert pl.read_parquet(out / LISTINGS_FILE)[TITLE].to_list() == [CATALOG[TITLE][0]]
        dup = _quarantine(out).filter(pl.col(TABLE) == "catalog")
        assert dup[SOURCE_FILE].to_list() == [str(second.resolve())]


def _variants(tmp_path: Path) -> dict[str, tuple[object, object]]:
    """The same clicks and catalog as single files of each format, globs, folders, memory://."""
    base = tmp_path / "in"
    made = {}
    for ext in (".csv", ".parquet", ".jsonl"):
        made[ext] = (
            str(_write(CLICKS_IN, base / f"clicks{ext}")),
            str(_write(CATALOG, base / f"catalog{ext}")),
        )
    for part, (clicks, catalog) in enumerate(
        ((CLICKS_IN[:3], CATALOG[:3]), (CLICKS_IN[3:], CATALOG[3:]))
    ):
        _write(clicks, base / "clicks_parts" / f"day={part}" / "part.parquet")
        _write(catalog, base / "catalog_parts" / f"part-{part}.jsonl")
        _write(clicks, base / "clicks_glob" / f"part-{part}.csv")
        _write(clicks, base / "clicks_mixed" / f"part-{part}{('.parquet', '.jsonl')[part]}")
    made["folder"] = (str(base / "clicks_parts"), str(base / "catalog_parts"))
    made["glob"] = (str(base / "clicks_glob" / "*.csv"), made[".csv"][1])
    made["mixed formats"] = (str(base / "clicks_mixed"), made[".jsonl"][1])
    return made


def test_formats_globs_folders_and_memory_urls_give_identical_outputs(tmp_path):
    variants = _variants(tmp_path)
    fs = fsspec.filesystem("memory")
    fs.pipe("/ingest-test/clicks.csv", CLICKS_IN.write_csv().encode())
    fs.pipe("/ingest-test/catalog.parquet", Path(variants[".parquet"][1]).read_bytes())
    variants["memory"] = ("memory://ingest-test/clicks.csv", "memory://ingest-test/catalog.parquet")
    try:
        outputs = {}
        for name, (clicks, catalog) in variants.items():
            result, out = _run(tmp_path, clicks, catalog, name=name.strip("."))
            # Raw values are kept as each format renders them (a parquet timestamp's text
            # differs from the CSV's), so compare which rows went where, by listing id.
            raw_id = pl.col(RAW).str.json_path_match(f"$.{LISTING_ID}")
            q = _quarantine(out).select(TABLE, REASON, raw_id).sort(pl.all())
            outputs[name] = (
                (out / CLICKS_FILE).read_bytes(),
                (out / LISTINGS_FILE).read_bytes(),
                q.rows(),
                result.dropped_by_reason,
            )
    finally:
        fs.rm("/ingest-test", recursive=True)
    reference = outputs[".csv"]
    assert reference[2]  # the data does quarantine something
    for name, got in outputs.items():
        assert got == reference, name


def test_input_row_order_does_not_change_output_bytes(tmp_path):
    catalog = CATALOG.filter(pl.col(LISTING_ID).is_first_distinct())
    digests = set()
    for seed in (0, 1, 2):
        clicks_path = _write(
            CLICKS_IN.sample(fraction=1.0, shuffle=True, seed=seed), tmp_path / f"c{seed}.csv"
        )
        catalog_path = _write(
            catalog.sample(fraction=1.0, shuffle=True, seed=seed), tmp_path / f"k{seed}.parquet"
        )
        _, out = _run(tmp_path, clicks_path, catalog_path, name=f"o{seed}")
        digests.add(((out / CLICKS_FILE).read_bytes(), (out / LISTINGS_FILE).read_bytes()))
    assert len(digests) == 1


def test_optional_and_extra_columns_are_kept(tmp_path):
    catalog = _write(CATALOG.with_columns(_note=pl.lit("n")), tmp_path / "catalog.csv")
    clicks = _write(CLICKS_IN.with_columns(device=pl.lit("ios")), tmp_path / "clicks.csv")
    cfg = CFG.with_(**{"ingest.truth_column": "true_product"})
    _, out = _run(tmp_path, clicks, catalog, cfg)
    listings = pl.read_parquet(out / LISTINGS_FILE)
    assert listings.columns == [LISTING_ID, TITLE, TITLE_NORM, "brand", "_note", "true_product"]
    assert pl.read_parquet(out / CLICKS_FILE).columns == [
        QUERY_ID,
        QUERY,
        QUERY_NORM,
        LISTING_ID,
        CLICKS,
        CLICK_ROWS,
        TS,
        "device",
    ]
    assert listings[LISTING_ID].to_list() == ["L1", "L2", "L3", "L4", "L6"]


# --- file-level errors ---------------------------------------------------------------------------


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[str, str, str, str | None, str | None]]:
    """name -> (clicks, catalog, expected code, expected file, expected column)."""
    good_clicks = str(_write(CLICKS_IN, tmp_path / "good" / "clicks.csv"))
    good_catalog = str(_write(CATALOG, tmp_path / "good" / "catalog.parquet"))
    corrupt = tmp_path / "bad" / "catalog.parquet"
    corrupt.parent.mkdir()
    corrupt.write_bytes(b"PAR1 truncated")
    empty = tmp_path / "bad" / "empty.csv"
    empty.write_bytes(b"")
    header_only = tmp_path / "bad" / "header.csv"
    header_only.write_text("listing_id,title\n")
    no_query = _write(CLICKS_IN.drop(QUERY), tmp_path / "bad" / "clicks.jsonl")
    missing = str(tmp_path / "bad" / "nope.csv")
    return {
        "missing_file": (missing, good_catalog, "missing_file", missing, None),
        "corrupt": (good_clicks, str(corrupt), "unreadable_file", str(corrupt), None),
        "missing_column": (str(no_query), good_catalog, "missing_column", str(no_query), QUERY),
        "zero_bytes": (good_clicks, str(empty), "empty_input", str(empty), None),
        "header_only": (good_clicks, str(header_only), "empty_input", str(header_only), None),
    }


def test_file_level_errors_raise_with_file_and_column(tmp_path):
    for name, (clicks, catalog, code, file, column) in _bad_inputs(tmp_path).items():
        out = tmp_path / f"out-{name}"
        out.mkdir()
        with pytest.raises(PairsieveError) as info:
            ingest.run(CFG, ingest.Inputs(clicks, catalog), out)
        assert (info.value.code, info.value.file, info.value.column) == (code, file, column), name
        assert list(out.iterdir()) == [], name


def test_cli_exits_2_and_writes_nothing_on_file_errors(tmp_path):
    runner = CliRunner()
    for name, (clicks, catalog, code, file, _) in _bad_inputs(tmp_path).items():
        out = tmp_path / f"cli-{name}"
        args = ["ingest", "--clicks", clicks, "--catalog", catalog, "--out", str(out)]
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (name, result.output)
        printed = result.output.replace("\n", "")  # rich wraps long lines
        assert f"[{code}]" in printed and file in printed, name
        assert not out.exists(), name


def test_cli_writes_stage_folder_and_skips_unchanged_rerun(tmp_path):
    clicks = str(_write(CLICKS_IN, tmp_path / "clicks.csv"))
    catalog = str(_write(CATALOG, tmp_path / "catalog.csv"))
    args = ["ingest", "--clicks", clicks, "--catalog", catalog, "--out", str(tmp_path / "run")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    stage = json.loads((tmp_path / "run" / "ingest" / STAGE_JSON).read_text())
    assert stage["rows_in"] == stage["rows_out"] + sum(stage["dropped_by_reason"].values())
    assert {p.name for p in (tmp_path / "run" / "ingest").iterdir()} == {
        CLICKS_FILE,
        LISTINGS_FILE,
        QUARANTINE_FILE,
        STAGE_JSON,
    }
    before = (tmp_path / "run" / "ingest" / STAGE_JSON).stat().st_mtime_ns
    assert CliRunner().invoke(app, args).exit_code == 0
    assert (tmp_path / "run" / "ingest" / STAGE_JSON).stat().st_mtime_ns == before


def test_input_fingerprint_is_content_based_and_order_independent(tmp_path):
    a = str(_write(CLICKS_IN[:4], tmp_path / "c" / "a.csv"))
    b = str(_write(CLICKS_IN[4:], tmp_path / "c" / "b.csv"))
    catalog = str(_write(CATALOG, tmp_path / "catalog.csv"))
    base = ingest.Inputs([a, b], catalog).fingerprint()
    assert ingest.Inputs([b, a], catalog).fingerprint() == base
    assert ingest.Inputs(str(tmp_path / "c"), catalog).fingerprint() == base
    assert ingest.Inputs(catalog, [a, b]).fingerprint() != base
    _write(CLICKS_IN[4:].with_columns(pl.col(CLICKS) + 1), Path(b))
    assert ingest.Inputs([a, b], catalog).fingerprint() != base


# --- the real latin-1 Abt-Buy catalog ------------------------------------------------------------

ABT_COLUMNS = {"ingest.catalog_columns": {"id": LISTING_ID, "name": TITLE}}


def _abt_clicks(tmp_path: Path) -> str:
    return str(
        _write(pl.DataFrame({QUERY: ["sony remote"], LISTING_ID: ["9071"]}), tmp_path / "c.csv")
    )


def test_abt_latin1_catalog_reads_accented_text(tmp_path, shared_data):
    abt = shared_data / "abt-buy" / "Abt.csv"
    cfg = CFG.with_(**ABT_COLUMNS, **{"ingest.csv_encoding": "latin-1"})
    result, out = _run(tmp_path, _abt_clicks(tmp_path), str(abt), cfg)
    listings = pl.read_parquet(out / LISTINGS_FILE)
    assert rules.BAD_ENCODING not in result.dropped_by_reason
    assert listings.height == result.details["catalog"]["rows_in"] == 1081
    text = listings.filter(pl.col(LISTING_ID) == "9071")["description"][0]
    assert text.endswith("Remote Commander\u00ae Remote Control")
    assert listings["description"].str.contains("178\u00b0 Wide Viewing Angle").sum() >= 1
    assert pl.read_parquet(out / CLICKS_FILE)[LISTING_ID].to_list() == ["9071"]


def test_abt_read_as_utf8_quarantines_bad_bytes_and_warns(tmp_path, shared_data, caplog):
    abt = shared_data / "abt-buy" / "Abt.csv"
    cfg = CFG.with_(**ABT_COLUMNS)
    with caplog.at_level(logging.WARNING, logger="pairsieve.ingest"):
        result, out = _run(tmp_path, _abt_clicks(tmp_path), str(abt), cfg)
    bad = _quarantine(out).filter(pl.col(REASON) == rules.BAD_ENCODING)
    assert result.dropped_by_reason[rules.BAD_ENCODING] == bad.height == 11
    assert all("\ufffd" in raw for raw in bad[RAW].to_list())
    assert "ingest.csv_encoding" in caplog.text
    # The click on listing 9071 (one of the undecodable rows) is now an unknown listing.
    assert _reasons(out, "clicks") == {1: rules.UNKNOWN_LISTING}


def test_text_that_normalises_to_nothing_is_quarantined(tmp_path, monkeypatch):
    # Today's normalisation only empties blank text; a stricter one (punctuation stripped) must
    # still not let an empty matching key through. A fake normaliser stands in for it.
    def strict(e: pl.Expr) -> pl.Expr:
        return e.str.replace_all(r"[^A-Za-z0-9 ]", "")

    monkeypatch.setattr(ingest_catalog, "normalize_expr", strict)  # titles
    monkeypatch.setattr(ingest_clicks, "normalize_expr", strict)  # queries
    catalog = _write(
        pl.DataFrame({LISTING_ID: ["L1", "L2"], TITLE: ["Phone", "!!!"]}), tmp_path / "k.csv"
    )
    clicks = _write(
        pl.DataFrame({QUERY: ["phone", "???", "phone"], LISTING_ID: ["L1", "L1", "L2"]}),
        tmp_path / "c.csv",
    )
    result, out = _run(tmp_path, clicks, catalog)
    assert _reasons(out, "catalog") == {2: rules.EMPTY_TITLE}
    assert _reasons(out, "clicks") == {2: rules.MISSING_QUERY, 3: rules.UNKNOWN_LISTING}
    assert result.balanced()


def test_abt_without_column_mapping_names_the_missing_column(tmp_path, shared_data):
    abt = shared_data / "abt-buy" / "Abt.csv"
    with pytest.raises(PairsieveError) as info:
        ingest.run(CFG, ingest.Inputs(_abt_clicks(tmp_path), str(abt)), tmp_path)
    err = info.value
    assert (err.code, err.file, err.column) == ("missing_column", str(abt), LISTING_ID)
    assert "id, name, description, price" in err.message


def test_separator_and_clicks_column_knobs_and_missing_truth_warning(tmp_path, caplog):
    catalog = tmp_path / "catalog.csv"
    catalog.write_text("listing_id;title\nL1;Phone; 64 GB\n")  # a ';' separator, quoted nowhere
    clicks = tmp_path / "clicks.csv"
    clicks.write_text("search_term;item\nphone;L1\n")
    cfg = CFG.with_(
        **{
            "ingest.csv_separator": ";",
            "ingest.clicks_columns": {"search_term": QUERY, "item": LISTING_ID},
            "ingest.truth_column": "true_product_id",
        }
    )
    with caplog.at_level(logging.WARNING, logger="pairsieve.ingest"):
        with pytest.raises(PairsieveError) as info:  # the stray ';' makes a ragged row
            ingest.run(cfg, ingest.Inputs(str(clicks), str(catalog)), tmp_path)
    assert (info.value.code, info.value.file) == ("unreadable_file", str(catalog))
    catalog.write_text("listing_id;title\nL1;Phone, 64 GB\n")
    with caplog.at_level(logging.WARNING, logger="pairsieve.ingest"):
        result, out = _run(tmp_path, str(clicks), str(catalog), cfg)
    assert pl.read_parquet(out / LISTINGS_FILE)[TITLE].to_list() == ["Phone, 64 GB"]
    assert pl.read_parquet(out / CLICKS_FILE).select(QUERY, LISTING_ID).rows() == [("phone", "L1")]
    assert "true_product_id" in caplog.text
