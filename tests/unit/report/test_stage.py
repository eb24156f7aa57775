"""The duplicate-impact report over a run folder: sections, numbers, partial runs, and the page
rendered in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.config import PairsieveConfig
from pairsieve.core import io
from pairsieve.core.contract import StageResult
from pairsieve.core.hashing import label_int
from pairsieve.core.layout import RunLayout
from pairsieve.report import html as report_html
from pairsieve.report import impact, wording
from pairsieve.report import stage as report
from pairsieve.report.duplicates import duplicates_section
from tests.paths import SAMPLE_DIR
from tests.unit.report.test_wording import unlabelled

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
)


def _stage(run_dir: Path, name: str, rows_in: int, rows_out: int, dropped: dict) -> None:
    result = StageResult(name, rows_in, rows_out, dropped_by_reason=dropped)
    io.write_json(result.to_json(), run_dir / name / S.STAGE_JSON)


def _products(n_products: int) -> pl.DataFrame:
    """Product p has p % 4 + 1 listings; listing titles repeat the product's name."""
    rows = []
    for p in range(n_products):
        for k in range(p % 4 + 1):
            rows.append((f"l{p:03d}-{k}", f"p{p:03d}", f"Phone {p} {'64GB' if k % 2 else 'black'}"))
    frame = pl.DataFrame(rows, schema=[S.LISTING_ID, S.PRODUCT_ID, S.TITLE], orient="row")
    return frame.with_columns(pl.len().over(S.PRODUCT_ID).alias(S.CLUSTER_SIZE))


def make_run(run_dir: Path, truth: bool = True) -> dict:
    """A complete run folder written to the artifact contracts (docs/contracts.md), small
    enough to check by hand."""
    products = _products(40)
    listings = products.select(S.LISTING_ID, S.TITLE).with_columns(
        pl.col(S.TITLE).str.to_lowercase().alias(S.TITLE_NORM),
        pl.col(S.LISTING_ID).str.slice(0, 4).alias(S.TRUE_PRODUCT_ID),
    )
    if not truth:
        listings = listings.drop(S.TRUE_PRODUCT_ID)
    clicks = products.select(pl.col(S.LISTING_ID), ("q " + pl.col(S.TITLE)).alias(S.QUERY))
    io.write_parquet(listings, run_dir / "ingest" / S.LISTINGS_FILE)
    io.write_parquet(clicks, run_dir / "ingest" / S.CLICKS_FILE)
    _stage(run_dir, "ingest", clicks.height + 3, clicks.height, {"missing_query": 3})
    io.write_parquet(
        products.with_columns(
            pl.col(S.TITLE).alias(S.CANONICAL_TITLE), pl.lit("exact").alias(S.METHOD)
        ).drop(S.TITLE),
        run_dir / "cluster" / S.PRODUCTS_FILE,
    )
    pairs = pl.DataFrame(
        {
            S.LISTING_A: ["l001-0", "l002-0", "l003-0"],
            S.LISTING_B: ["l005-0", "l006-0", "l007-0"],
            S.JACCARD: [0.7, 0.6, 0.5],
            S.COSINE: [0.9, 0.9, 0.8],
            S.SIGNAL: ["minhash"] * 3,
            S.ACCEPTED: [False, False, True],
            S.VETO_REASON: ["capacity", "model_code", None],
        }
    )
    io.write_parquet(pairs, run_dir / "cluster" / S.PAIRS_FILE)
    _stage(run_dir, "cluster", listings.height, listings.height, {})
    mine = _mine_tables(clicks, products)
    io.write_parquet(mine[0], run_dir / "mine" / S.NEGATIVES_FILE)
    io.write_parquet(mine[1], run_dir / "mine" / S.NEGATIVES_DROPPED_FILE)
    _stage(run_dir, "mine", mine[0].height + mine[1].height, mine[0].height, {"same_product": 1})
    _write_shards(run_dir, clicks, products)
    return {"products": products, "clicks": clicks, "kept": mine[0], "dropped": mine[1]}


def _mine_tables(clicks: pl.DataFrame, products: pl.DataFrame) -> tuple[pl.DataFrame, ...]:
    """One kept negative (0.3) per pair; one same-product candidate (0.75) per multi-listing
    product; a margin drop (0.79) for every pair. Positives score 0.8."""
    pos = clicks.join(products, on=S.LISTING_ID).select(
        S.QUERY, pl.col(S.LISTING_ID).alias(S.POSITIVE_LISTING_ID), S.PRODUCT_ID, S.CLUSTER_SIZE
    )
    base = pos.with_columns(pl.lit(0.8, pl.Float32).alias(S.POSITIVE_SCORE))
    kept = base.select(
        S.QUERY,
        S.POSITIVE_LISTING_ID,
        pl.lit("lzzz").alias(S.NEGATIVE_LISTING_ID),
        pl.lit(1, pl.Int32).alias(S.RANK),
        pl.lit(0.3, pl.Float32).alias(S.SCORE),
        S.POSITIVE_SCORE,
    )
    same = base.filter(pl.col(S.CLUSTER_SIZE) > 1).select(
        S.QUERY,
        S.POSITIVE_LISTING_ID,
        pl.lit("other").alias(S.NEGATIVE_LISTING_ID),
        pl.lit(2, pl.Int32).alias(S.RANK),
        pl.lit(0.75, pl.Float32).alias(S.SCORE),
        S.POSITIVE_SCORE,
        pl.lit("same_product").alias(S.REASON),
    )
    margin = same.with_columns(
        pl.lit(0.79, pl.Float32).alias(S.SCORE), pl.lit("margin").alias(S.REASON)
    )
    return kept, pl.concat([same, margin])


def _write_shards(run_dir: Path, clicks: pl.DataFrame, products: pl.DataFrame) -> None:
    """Rows sorted by listing id, then dealt round-robin so a block of 8 is product-disjoint."""
    rows = clicks.join(products, on=S.LISTING_ID).sort(S.LISTING_ID)
    by_rank = rows.with_columns(pl.int_range(pl.len()).over(S.PRODUCT_ID).alias("_k"))
    ordered = by_rank.sort("_k", S.PRODUCT_ID)
    labels = [[label_int(p), label_int("neg")] for p in ordered[S.PRODUCT_ID].to_list()]
    train = ordered.select(
        pl.col(S.QUERY).alias(S.ANCHOR),
        pl.col(S.TITLE).alias(S.POSITIVE),
        pl.lit("a negative").alias(S.negative_column(1)),
    ).with_columns(pl.Series(S.LABEL, labels, dtype=pl.List(pl.Int64)))
    io.write_parquet(train.head(60), run_dir / "shards" / "train-00000.parquet")
    io.write_parquet(train.slice(60), run_dir / "shards" / "train-00001.parquet")
    io.write_json({"batch_size": 8, "schema_version": 1}, run_dir / "shards" / S.MANIFEST_FILE)
    _stage(run_dir, "shards", train.height, train.height, {})


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict, dict]:
    run_dir = tmp_path_factory.mktemp("run")
    data = make_run(run_dir)
    cfg = PairsieveConfig().with_(**{"ingest.truth_column": S.TRUE_PRODUCT_ID})
    result = report.run(cfg, RunLayout(run_dir), run_dir / "report")
    return run_dir, data, {"result": result, "report": report.load_report(run_dir / "report")}


def test_report_has_every_section_and_balances(built):
    _, data, out = built
    rep = out["report"]
    assert rep["schema_version"] == report.REPORT_SCHEMA_VERSION
    assert rep["missing"] == []
    for key in ("accounting", "duplicates", "batches", "temperature", "hard_negatives", "quality"):
        assert rep[key]["title"], key
    assert out["result"].balanced()
    assert out["result"].rows_in == data["clicks"].height
    assert set(rep["chart_ids"]) >= {
        "accounting",
        "cluster-sizes",
        "vetoes",
        "collisions",
        "loss-floor",
        "gradient-share",
        "worked-example",
        "dropped-reasons",
        "scores",
        "quality",
    }


def test_duplicates_figures(built):
    _, data, out = built
    dup = out["report"]["duplicates"]
    sizes = data["products"].group_by(S.PRODUCT_ID).len()["len"].to_numpy()
    assert dup["figures"]["products"] == 40
    assert dup["figures"]["listings"] == int(sizes.sum())
    assert dup["figures"]["share_with_duplicate"] == pytest.approx(
        sizes[sizes > 1].sum() / sizes.sum()
    )
    assert dup["tables"]["largest clusters"][0]["listings"] == 4
    assert dup["tables"]["merges vetoed, by reason"] == [
        {"reason": "capacity", "pairs": 1},
        {"reason": "model_code", "pairs": 1},
    ]


def test_judgement_figures_from_a_scanned_pair_file(tmp_path):
    """The mean p_same of merged and of kept-apart judged pairs (exact pairs left out), counted
    from the file by a streaming query; pairs without any p_same (the rule judge) add none."""
    pairs = pl.DataFrame(
        {
            S.SIGNAL: ["knn", "knn", "minhash", "exact", "knn"],
            S.ACCEPTED: [True, True, False, True, False],
            S.VETO_REASON: [None, None, "capacity", None, "capacity"],
            S.P_SAME: pl.Series([0.9, 0.7, 0.2, 0.8, 0.1], dtype=pl.Float32),
        }
    )
    path = tmp_path / S.PAIRS_FILE
    io.write_parquet(pairs, path)
    products = _products(3)
    titles = products.select(S.LISTING_ID, S.TITLE)
    figures = duplicates_section(products, titles, pl.scan_parquet(path))["figures"]
    assert figures["mean_p_same_accepted"] == pytest.approx(0.8, abs=1e-6)
    assert figures["mean_p_same_rejected"] == pytest.approx(0.15, abs=1e-6)
    assert (figures["candidate_pairs"], figures["accepted_pairs"]) == (5, 3)
    assert figures["vetoed_pairs"] == 2
    io.write_parquet(pairs.with_columns(pl.lit(None, pl.Float32).alias(S.P_SAME)), path)
    figures = duplicates_section(products, titles, pl.scan_parquet(path))["figures"]
    assert "mean_p_same_accepted" not in figures
    assert figures["candidate_pairs"] == 5


def test_batches_kappa_and_replay(built):
    _, data, out = built
    batches = out["report"]["batches"]
    sizes = data["products"].group_by(S.PRODUCT_ID).len()["len"].to_numpy()
    assert batches["figures"]["kappa_product"] == pytest.approx(impact.collision_rate(sizes))
    # titles repeat within a product ("Phone 3 black" twice), so exact-text κ is smaller
    assert 0 < batches["figures"]["kappa_text"] < batches["figures"]["kappa_product"]
    realised = batches["tables"]["realised when replayed"]
    at_8 = {r["order"]: r for r in realised if r["batch_size"] == 8}
    assert at_8["shard order"]["colliding_pairs"] == 0
    assert at_8["seeded shuffle"]["colliding_pairs"] > 0


def test_temperature_from_mined_scores(built):
    _, _, out = built
    temp = out["report"]["temperature"]
    data = {r["tau"]: r for r in temp["tables"]["on this data"]}
    # every multi-listing product's pair has a same-product candidate 0.05 below its positive
    assert data[0.1]["mean_loss_floor"] == pytest.approx(float(impact.loss_floor(0.05, 0.1)), 1e-5)
    share = impact.negative_share([0.8, 0.75, 0.3], 0, 1, 0.02)
    assert data[0.02]["false_negative_gradient_share"] == pytest.approx(share, rel=1e-4)
    worked = {r["tau"]: r for r in temp["tables"]["worked 2-pair example"]}
    assert round(worked[0.1]["mean_loss"], 3) == 0.181
    assert round(worked[0.02]["row2_with_duplicate_loss"], 3) == 0.697


def test_hard_negatives_and_recommendations(built):
    _, data, out = built
    rep = out["report"]
    hard = rep["hard_negatives"]
    assert hard["figures"]["negatives_kept"] == data["kept"].height
    reasons = {r["reason"]: r["candidates"] for r in hard["tables"]["dropped, by reason"]}
    assert reasons["same_product"] == reasons["margin"] > 0
    recs = rep["recommendations"]["tables"]["recommendations"]
    assert len(recs) >= 4
    assert all(r["rests_on"] for r in recs)
    assert rep["quality"]["figures"]["pairwise_f1"] == 1.0  # truth = product here


def test_partial_run_reports_what_exists(tmp_path):
    full = tmp_path / "full"
    make_run(full, truth=False)
    partial = tmp_path / "partial"
    shutil.copytree(full / "cluster", partial / "cluster")
    result = report.run(PairsieveConfig(), RunLayout(partial), partial / "report")
    rep = report.load_report(partial / "report")
    assert rep["duplicates"]["figures"]["products"] == 40
    assert rep["batches"] is None and rep["temperature"] is None
    assert any(m.startswith("batches") for m in rep["missing"])
    assert result.details["charts"] >= 2
    assert (partial / "report" / S.REPORT_HTML).read_text().count("<svg") >= 2


def test_report_artifacts(built):
    _, _, out = built
    markdown, table = report.report_artifacts(out["report"])
    assert "## Recommendations" in markdown
    assert f"| {wording.display_name('kappa_product')} | " in markdown
    assert "kappa_product" not in markdown
    assert [r["batch_size"] for r in table] == list(PairsieveConfig().report.batch_sizes)


def test_a_build_report_reads_as_words(built):
    run_dir, _, out = built
    assert unlabelled(out["report"]) == []
    page = (run_dir / "report" / S.REPORT_HTML).read_text()
    for spec in (
        c for sec in out["report"].values() if isinstance(sec, dict) for c in sec.get("charts", [])
    ):
        if spec["categories"]:
            assert report_html.html.escape(spec["reading"]) in page, spec["id"]
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", page)
    assert headers and not [h for h in headers if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h)]
    ticks = re.findall(r'text-anchor="end">([^<]*)</text>', page)
    assert ticks and not [t for t in ticks if "e+" in t]  # log axes read 27.6k, not 2.76e+04


def render_dom(html_file: Path, profile: Path, width: int = 1280) -> tuple[str, str]:
    """(dumped DOM, browser log) of a page opened in headless Chromium, ``width`` px wide."""
    proc = subprocess.run(
        [
            str(CHROMIUM),
            *CHROMIUM_FLAGS,
            f"--window-size={width},{FIRST_SCREEN}",
            f"--user-data-dir={profile}",
            "--dump-dom",
            html_file.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def assert_page_renders(report_dir: Path, profile: Path) -> None:
    """Every chart of report.json is an SVG with drawn values in the DOM, and no console error."""
    rep = json.loads((report_dir / S.REPORT_JSON).read_text())
    dom, log = render_dom(report_dir / S.REPORT_HTML, profile)
    assert f'data-charts-rendered="{len(rep["chart_ids"])}"' in dom  # the inline script ran
    for chart_id in rep["chart_ids"]:
        match = re.search(rf'<svg id="chart-{chart_id}" data-chart="{chart_id}".*?</svg>', dom)
        assert match, f"chart {chart_id} missing from the rendered page"
        assert "data-value=" in match.group(0), f"chart {chart_id} has no bars"
    errors = [line for line in log.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not errors, errors


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Chromium absent: `apt-get install chromium` (make test does it)"
)
def test_report_renders_in_headless_chromium(built, tmp_path):
    run_dir, _, _ = built
    assert_page_renders(run_dir / "report", tmp_path / "profile")


FIRST_SCREEN = 800  # px of page a 1280-px-wide browser shows before any scrolling


@pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Chromium absent: `apt-get install chromium` (make test does it)"
)
def test_the_headline_is_on_the_first_screen_and_says_the_sections_figures(built, tmp_path):
    run_dir, _, _ = built
    rep = json.loads((run_dir / "report" / S.REPORT_JSON).read_text())
    lead = " ".join(rep["headline"]["lead"])
    per_anchor = rep["batches"]["figures"]["false_negatives_per_anchor_at_training_batch"]
    assert f"would have met {per_anchor:.2f} same-product negatives per anchor" in lead
    share = rep["hard_negatives"]["figures"]["same_product_share_of_eligible"]
    assert f"{share:.1%} were the positive's own product" in lead
    dom, _ = render_dom(run_dir / "report" / S.REPORT_HTML, tmp_path / "profile", width=1280)
    assert dom.index('id="headline"') < dom.index('id="accounting"')
    bottom = int(re.search(r'data-headline-bottom="(\d+)"', dom).group(1))
    assert 0 < bottom <= FIRST_SCREEN


def test_padded_scores():
    out = report.padded([[0.5, 0.2], None, [0.1]])
    assert out.shape == (3, 2)
    assert np.isneginf(out[1]).all() and out[2, 1] == -np.inf


@pytest.fixture(scope="module")
def sample_build(tmp_path_factory, encoder, session_cache_dir) -> tuple[PairsieveConfig, Path]:
    """The demo's path: real ingest, clustering (real MiniLM), mining and shards on the bundled
    sample, then the report."""
    from pairsieve.orchestration import steps

    sample = SAMPLE_DIR
    if not (sample / "catalog.parquet").exists():
        pytest.skip("bundled sample absent")
    cfg = PairsieveConfig().with_(
        **{"ingest.truth_column": S.TRUE_PRODUCT_ID, "cache_dir": str(session_cache_dir)}
    )
    run_dir = tmp_path_factory.mktemp("sample") / "run"
    steps.ingest_step(
        cfg, [str(sample / "clicks.parquet")], [str(sample / "catalog.parquet")], run_dir
    )
    for step in (steps.cluster_step, steps.mine_step, steps.shards_step):
        step(cfg, run_dir)
    return cfg, run_dir


@pytest.mark.slow
def test_report_of_a_real_build_on_the_sample(sample_build, tmp_path):
    """Rendered in Chromium too."""
    cfg, run_dir = sample_build
    result = report.run(cfg, RunLayout(run_dir), run_dir / "report")
    rep = report.load_report(run_dir / "report")
    assert rep["missing"] == [] and result.balanced()
    batch = json.loads((run_dir / "shards" / S.MANIFEST_FILE).read_text())["batch_size"]
    realised = rep["batches"]["tables"]["realised when replayed"]
    in_order = next(r for r in realised if r["order"] == "shard order" and r["batch_size"] == batch)
    shuffled = next(
        r for r in realised if r["order"] == "seeded shuffle" and r["batch_size"] == batch
    )
    assert in_order["colliding_pairs"] == 0
    assert shuffled["colliding_pairs"] > 0  # the sample has popular products: a shuffle collides
    assert rep["quality"]["figures"]["bcubed_f1"] > 0.5
    if CHROMIUM.exists():
        assert_page_renders(run_dir / "report", tmp_path / "profile")


@pytest.mark.slow
def test_each_stage_writes_only_what_it_declares(sample_build):
    """The declarations' `writes` are the whole truth of a build folder: every file a stage
    left in its folder (besides its stage.json) matches one of its declared patterns."""
    from pairsieve.orchestration.stages import STAGES

    cfg, run_dir = sample_build
    report.run(cfg, RunLayout(run_dir), run_dir / "report")
    for name in ("ingest", "cluster", "mine", "shards", "report"):
        written = {p.name for p in (run_dir / name).iterdir()} - {S.STAGE_JSON}
        undeclared = {f for f in written if not any(fnmatch(f, w) for w in STAGES[name].writes)}
        assert written and undeclared == set(), name
    assert (run_dir / "mine" / S.NEGATIVES_JUDGEMENT_FILE).exists()  # the margin is judged


@pytest.mark.slow
def test_the_report_says_what_the_judgement_kept_and_labels_narrow_it(sample_build, tmp_path):
    """The judged figures agree with the mine stage's files; answers on the kept pairs drawn by
    `label sample --run` replace the mean probability by an estimate with an interval."""
    from pairsieve.labels import store
    from pairsieve.labels.pairs import write_sample

    cfg, run_dir = sample_build
    report.run(cfg, RunLayout(run_dir), run_dir / "report")
    figures = report.load_report(run_dir / "report")["hard_negatives"]["figures"]
    dropped = pl.read_parquet(RunLayout(run_dir).negatives_dropped)[S.REASON].value_counts()
    counts = dict(dropped.select(pl.col(S.REASON).cast(pl.String), "count").iter_rows())
    assert figures["dropped_inside_margin_judged_copy"] == counts.get("judged_copy", 0)
    assert figures["dropped_inside_margin_undecided"] == counts.get("margin", 0)
    vague = figures["dropped_inside_margin_query_cannot_tell"]
    assert vague == counts.get("query_cannot_tell", 0) > 0
    kept = pl.read_parquet(run_dir / "report" / S.JUDGED_PAIRS_FILE)
    assert kept["rows"].sum() == figures["kept_above_margin"] > 0
    assert figures["kept_above_margin"] <= figures["negatives_kept"]
    model_only = figures["estimated_copies_among_kept_above_margin"]
    assert 0 <= model_only < 0.02  # each was kept because its p_copy was below 2%

    labels = tmp_path / "labels.jsonl"
    write_sample(run_dir, None, n=40, seed=0, out=labels)
    drawn = store.read_labels(labels)
    negatives = drawn.filter(pl.col("source") == "negative")
    assert negatives.height > 0 and drawn["pair_id"].n_unique() == drawn.height
    truth = pl.read_parquet(RunLayout(run_dir).listings, columns=[S.LISTING_ID, S.TRUE_PRODUCT_ID])
    product = dict(truth.iter_rows())
    answers = [product[a] == product[b] for a, b in drawn.select(S.LISTING_A, S.LISTING_B).rows()]
    store.write_labels(drawn.with_columns(pl.Series("label", answers)), labels)
    report.run(cfg, RunLayout(run_dir), tmp_path / "labelled", labels=(labels,))
    labelled = report.load_report(tmp_path / "labelled")["hard_negatives"]["figures"]
    lo, hi = labelled["estimated_copies_among_kept_above_margin_ci"]
    assert lo <= labelled["estimated_copies_among_kept_above_margin"] <= hi
    on_kept = drawn.filter(pl.col("pair_id").is_in(kept["pair_id"].implode()))
    assert labelled["estimated_copies_labels_used"] == on_kept.height >= negatives.height
    true_share = (
        sum(
            r * (product[a] == product[b])
            for a, b, r in kept.select(S.LISTING_A, S.LISTING_B, "rows").rows()
        )
        / kept["rows"].sum()
    )
    assert abs(labelled["estimated_copies_among_kept_above_margin"] - true_share) <= max(
        hi - lo, 0.01
    )
