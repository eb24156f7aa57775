"""End-to-end builds on slices of the bundled sample: the Prefect flow, resumption, id lineage,
and identical results on the thread and Dask task runners, a lost Dask worker included."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.config import load_config
from pairsieve.core import io
from pairsieve.core.layout import RunLayout
from pairsieve.orchestration import steps
from pairsieve.orchestration.publish import manifest_files, verify
from pairsieve.orchestration.stages import settings_hash
from pairsieve.schemas import TRUE_PRODUCT_ID
from pairsieve.vectors.embed import embed_partition
from tests.paths import SAMPLE_DIR

SAMPLE = SAMPLE_DIR


def _slice(folder: Path, products: list[str], drop_listings: set[str] = frozenset()) -> Path:
    """Catalog and clicks of some sample products, written as parquet into ``folder``."""
    catalog = pl.read_parquet(SAMPLE / "catalog.parquet").filter(
        pl.col(TRUE_PRODUCT_ID).is_in(products) & ~pl.col("listing_id").is_in(list(drop_listings))
    )
    clicks = pl.read_parquet(SAMPLE / "clicks.parquet").filter(
        pl.col("listing_id").is_in(catalog["listing_id"].implode())
    )
    folder.mkdir(parents=True, exist_ok=True)
    catalog.write_parquet(folder / "catalog.parquet")
    clicks.write_parquet(folder / "clicks.parquet")
    return folder


@pytest.fixture(scope="module")
def product_ids() -> list[str]:
    return sorted(pl.read_parquet(SAMPLE / "catalog.parquet")[TRUE_PRODUCT_ID].unique())


def _cfg(cache_dir: Path, **overrides):
    return load_config(
        None,
        {
            "ingest.truth_column": TRUE_PRODUCT_ID,
            "cache_dir": str(cache_dir),
            "shards.batch_size": 8,
            "mine.num_negatives": 2,
            **overrides,
        },
    )


def _run_steps(cfg, data: Path, run_dir: Path, previous: Path | None = None) -> dict:
    """The build's stages in process (no Prefect), embedding partitions first like the flow."""
    clicks, catalog = [str(data / "clicks.parquet")], [str(data / "catalog.parquet")]
    ingest = steps.ingest_step(cfg, clicks, catalog, run_dir)
    partitions = steps.embedding_partitions(cfg, run_dir)
    embedded = sum(embed_partition(path, cfg).texts for path in partitions)
    steps.clear_embedding_partitions(run_dir)
    results = [
        ingest,
        steps.cluster_step(cfg, run_dir, previous),
        steps.mine_step(cfg, run_dir, previous),
        steps.shards_step(cfg, run_dir),
        steps.report_step(cfg, run_dir),
    ]
    return {"results": results, "embedded": embedded}


def _shard_hashes(build: Path) -> dict[str, str]:
    return manifest_files(json.loads((build / "shards" / "manifest.json").read_text()))


def test_build_flow_publishes_balanced_stages_and_skips_on_rerun(
    prefect_harness, tmp_path, product_ids, session_cache_dir
):
    from pairsieve.orchestration.flows import build

    data = _slice(tmp_path / "data", product_ids[:30])
    cfg = _cfg(session_cache_dir)
    kwargs = dict(
        clicks=str(data / "clicks.parquet"),
        catalog=str(data / "catalog.parquet"),
        out=str(tmp_path / "build"),
        config=cfg.model_dump(mode="json"),
    )
    first = build(**kwargs)
    assert list(first) == ["ingest", "cluster", "mine", "shards", "report"]
    for stage in first.values():
        assert stage["rows_in"] == stage["rows_out"] + sum(stage["dropped_by_reason"].values())
    assert verify(tmp_path / "build") == []
    assert (tmp_path / "build" / "report" / "report.html").exists()
    assert not (tmp_path / ".build.staging").exists()
    before = _shard_hashes(tmp_path / "build")
    second = build(**kwargs)
    assert all(stage["skipped"] for stage in second.values())
    assert _shard_hashes(tmp_path / "build") == before


# sha256 of the demo build's artifacts (`make demo`: the bundled sample, default config). A change
# here is a change of every user's product ids, negatives or shards: make it on purpose. The int8
# encoder is exported at install time, so new onnx / onnxruntime / torch releases, and another
# processor's int8 kernels, can move the vectors and with them near-tied negatives (products
# hold): the same code then gives other bytes. The product ids are pinned on every processor; the
# negatives and shards per processor family (`_processor_family`), for the families whose set was
# taken from this code. Record a family's set by running this test on it. Every parquet footer
# names the polars release that wrote it, so the dev extra pins polars to the release of this set.
DEMO_PRODUCTS_SHA256 = "457d42179a2b46ae9ca73bb5535ac6a35f5b3e6caa66c5f263915b632a0da419"
DEMO_SHA256_BY_PROCESSOR = {
    "avx2": {
        "mine/negatives.parquet": (
            "db0f74c94310371310ba9a55e9c8ce510cebd177cd4162ab01576f6a3ac06445"
        ),
        "shards/train-00000.parquet": (
            "f4b68f2ca4c8d0068e6aa9135e22fd2055bb8c24d3f9ddfc66dd8c7bdd44f9ac"
        ),
        "shards/meta-00000.parquet": (
            "ecd0735ba9fc27a143beab1b6834bb6c1fd475bfa0f663255ca3ed664d1a330e"
        ),
    },
}


def _processor_family() -> str:
    """The family whose bytes apply: intel-amx (AMX tiles), amd-avx512-vnni, avx2 (neither
    AVX-512 VNNI nor AMX), or other."""
    info = Path("/proc/cpuinfo")
    found = info.read_text() if info.exists() else ""
    if " amx_tile" in found:
        return "intel-amx"
    if " avx512_vnni" in found:
        return "amd-avx512-vnni" if "AuthenticAMD" in found else "other"
    return "avx2" if " avx2" in found else "other"


def test_demo_build_through_the_flow_sends_paths_not_data_and_keeps_its_bytes(
    prefect_harness, tmp_path
):
    """The demo build (whole sample, default config) on a cold cache, through the real flow on an
    API whose parameter limit conftest lowered to a few kilobytes: the texts to embed travel as
    files, not parameters. Its artifacts keep their recorded bytes."""
    from prefect import flow

    from pairsieve.orchestration.flows import build
    from pairsieve.vectors.embed import bundled_model_path
    from pairsieve.vectors.onnx import ensure_onnx_model

    limit = int(os.environ["PREFECT_SERVER_API_MAX_PARAMETER_SIZE"])
    texts = pl.concat(
        [
            pl.read_parquet(SAMPLE / "catalog.parquet")["title"],
            pl.read_parquet(SAMPLE / "clicks.parquet")["query"],
        ]
    ).unique()
    assert len(json.dumps(texts.to_list())) > 20 * limit

    @flow
    def echo(payload: list[str]) -> int:
        return len(payload)

    with pytest.raises(Exception, match="must be less than"):
        echo(texts.head(2 * limit // 10).to_list())  # the limit is in force on this API

    cache = tmp_path / "cold-cache"  # nothing embedded yet; the int8 export is reused
    ensure_onnx_model(bundled_model_path(), tmp_path / "onnx", "onnx-int8")
    cache.mkdir()
    (cache / "onnx").symlink_to(tmp_path / "onnx")
    cfg = load_config(None, {"ingest.truth_column": TRUE_PRODUCT_ID, "cache_dir": str(cache)})
    out = tmp_path / "build"
    result = build(
        clicks=str(SAMPLE / "clicks.parquet"),
        catalog=str(SAMPLE / "catalog.parquet"),
        out=str(out),
        config=cfg.model_dump(mode="json"),
    )
    assert result["shards"]["rows_out"] > 0
    assert verify(out) == []
    assert not RunLayout(out).embed_partitions.exists()
    assert io.sha256_file(out / "cluster" / "products.parquet") == DEMO_PRODUCTS_SHA256
    family = _processor_family()
    names = DEMO_SHA256_BY_PROCESSOR["avx2"]
    found = {name: io.sha256_file(out / name) for name in names}
    assert found == DEMO_SHA256_BY_PROCESSOR.get(family, found), (family, found)

    # `pairsieve cluster` runs the same stage: the same products columns, lineage included.
    from typer.testing import CliRunner

    from pairsieve.cli import app

    alone = tmp_path / "cluster-alone"
    ran = CliRunner().invoke(
        app,
        ["cluster", "--catalog", str(SAMPLE / "catalog.parquet"), "--out", str(alone)]
        + ["--set", f'cache_dir="{cache}"'],
    )
    assert ran.exit_code == 0, ran.output
    schema = pl.read_parquet_schema(RunLayout(out).products)
    assert pl.read_parquet_schema(alone / S.PRODUCTS_FILE) == schema
    assert "first_seen" in schema
    assert (alone / S.ID_CHANGES_FILE).exists()


@pytest.mark.slow
def test_day_two_keeps_ids_and_embeds_only_new_texts(tmp_path, product_ids):
    day1_products, new_products = product_ids[:40], product_ids[40:46]
    day1_data = _slice(tmp_path / "d1", day1_products)
    day1_catalog = pl.read_parquet(day1_data / "catalog.parquet")
    removed = day1_catalog["listing_id"].sort()[0]
    # A new seller lists eight day-1 products under their existing titles.
    copies = (
        day1_catalog.sort("listing_id")
        .gather_every(len(day1_catalog) // 8)
        .head(8)
        .with_columns(pl.col("listing_id") + "-new", seller_id=pl.lit("seller-new"))
    )
    day2_data = _slice(tmp_path / "d2", day1_products + new_products, {removed})
    pl.concat([pl.read_parquet(day2_data / "catalog.parquet"), copies]).write_parquet(
        day2_data / "catalog.parquet"
    )
    cfg = _cfg(tmp_path / "cache")
    day1 = _run_steps(cfg, day1_data, tmp_path / "b1")
    day2 = _run_steps(cfg, day2_data, tmp_path / "b2", previous=tmp_path / "b1")

    ids1 = dict(
        pl.read_parquet(tmp_path / "b1" / "cluster" / "products.parquet")
        .select("listing_id", "product_id")
        .rows()
    )
    ids2 = dict(
        pl.read_parquet(tmp_path / "b2" / "cluster" / "products.parquet")
        .select("listing_id", "product_id")
        .rows()
    )
    kept = sorted(set(ids1) - {removed})
    assert sum(ids1[i] == ids2[i] for i in kept) >= 0.95 * len(kept)
    originals = copies["listing_id"].str.strip_suffix("-new")
    for copy, original in zip(copies["listing_id"], originals, strict=True):
        assert ids2[copy] == ids1[original], "a new copy must join its product's existing id"
    changes = pl.read_parquet(RunLayout(tmp_path / "b2").id_changes)
    assert set(changes["change"]) <= {"new", "merged", "split", "removed"}
    truth = dict(
        pl.read_parquet(day2_data / "catalog.parquet").select("listing_id", TRUE_PRODUCT_ID).rows()
    )
    new_listings = [i for i in ids2 if truth[i] in new_products]
    assert all(ids2[i] not in set(ids1.values()) for i in new_listings)
    assert changes.filter(pl.col("change") == "new")["listings"].sum() >= len(new_listings) // 2
    # Day 2 embeds only what day 1 did not see: new titles and new queries.
    texts = [(d / "catalog.parquet", "title") for d in (day1_data, day2_data)]
    texts += [(d / "clicks.parquet", "query") for d in (day1_data, day2_data)]
    seen = pl.concat([pl.read_parquet(p).select(t=pl.col(c)) for p, c in texts[::2]]).unique()
    now = pl.concat([pl.read_parquet(p).select(t=pl.col(c)) for p, c in texts[1::2]]).unique()
    assert day2["embedded"] == now.join(seen, on="t", how="anti").height
    assert day1["embedded"] > day2["embedded"] > 0
    _check_reuse(cfg, day2["results"], tmp_path / "b1", tmp_path / "b2")
    # Another config cannot reuse day 1: each stage runs in full and says why.
    other = cfg.with_(**{"cluster.knn_k": cfg.cluster.knn_k + 1, "mine.num_negatives": 3})
    for step in (steps.cluster_step, steps.mine_step):
        result = step(other, tmp_path / "b2", tmp_path / "b1")
        assert "different config" in result.details["incremental"]["why_not"]


def test_day_two_builds_its_ivf_indexes_on_day_ones_layout(
    tmp_path, product_ids, session_cache_dir
):
    from pairsieve.vectors import knn

    data = _slice(tmp_path / "data", product_ids[:12])
    cfg = _cfg(session_cache_dir, **{"knn.exact_max": 16, "cluster.knn_exact_max": 16})  # IVF
    day1 = _run_steps(cfg, data, tmp_path / "b1")["results"]
    day2 = _run_steps(cfg, data, tmp_path / "b2", previous=tmp_path / "b1")["results"]
    # Day 1's mining builds on the cluster stage's layout, over the same titles.
    assert [day1[p].details["ivf_centroids"] for p in (1, 2)] == ["trained", "reused"]
    centroids = [tmp_path / "b1" / stage / knn.CENTROIDS_FILE for stage in ("cluster", "mine")]
    assert io.sha256_file(centroids[0]) == io.sha256_file(centroids[1])
    for position, stage in ((1, "cluster"), (2, "mine")):
        assert day2[position].details["ivf_centroids"] == "reused"
        for name in (knn.CENTROIDS_FILE, knn.LISTS_FILE):  # every title kept its list
            first, second = (tmp_path / b / stage / name for b in ("b1", "b2"))
            assert io.sha256_file(first) == io.sha256_file(second)


def _same_rows(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    scores = [S.SCORE, S.POSITIVE_SCORE]
    return a.drop(scores).equals(b.drop(scores)) and all(
        (a[c] - b[c]).abs().max() < 1e-6 for c in scores
    )


def _check_nothing_to_mine(cfg, build: Path) -> None:
    """A build whose every query is unchanged (and none due for refresh) mines nothing and
    writes the previous rows as they were."""
    from pairsieve.mine import stage as mine
    from pairsieve.mine.reuse import PreviousMining, kept_rows, titles_and_products

    layout = RunLayout(build)
    inputs = mine.Inputs.of(layout)
    state = PreviousMining(
        kept_rows(layout.stage_dir("mine")),
        pl.read_parquet(layout.negatives_dropped),
        pl.read_parquet(inputs.clicks, columns=[S.QUERY, S.LISTING_ID]).unique(),
        titles_and_products(pl.read_parquet(inputs.listings), pl.read_parquet(inputs.products)),
    )
    never = cfg.with_(**{"mine.refresh_builds": 10_000})
    result = mine.run(never, inputs, build / "again", previous=(state, 1))
    assert result.details["incremental"]["queries_mined"] == 0
    for name in (S.NEGATIVES_FILE, S.NEGATIVES_DROPPED_FILE, S.NEGATIVES_JUDGEMENT_FILE):
        assert pl.read_parquet(build / "again" / name).equals(
            pl.read_parquet(build / "mine" / name)
        )


def _check_refilter(cfg, build: Path) -> None:
    """Over an unchanged catalog, a query that only gained a click scoring at or above its
    weakest one is filtered again from its previous candidates, one whose new click scores
    lower is mined unless its previous search was exhausted, and the whole output equals a full
    mine of the same clicks."""
    from pairsieve.mine import stage as mine
    from pairsieve.mine.reuse import PreviousMining

    state = PreviousMining.load(build, settings_hash(cfg, "mine"))
    rows = pl.concat([state.kept.drop(S.P_COPY), state.dropped.collect().drop(S.REASON)])
    weakest = rows.group_by(S.QUERY).agg(pl.col(S.POSITIVE_SCORE).min().alias("_weakest"))
    shown = rows.join(weakest, on=S.QUERY).join(
        state.pairs,
        left_on=[S.QUERY, S.NEGATIVE_LISTING_ID],
        right_on=[S.QUERY, S.LISTING_ID],
        how="anti",
    )
    steady = shown.filter(pl.col(S.SCORE) >= pl.col("_weakest")).sort(S.QUERY, S.RANK)
    moved = shown.filter(pl.col(S.SCORE) < pl.col("_weakest") - 0.05).sort(S.QUERY, S.RANK)
    steady = steady.unique(S.QUERY, keep="first").head(3)
    moved = moved.filter(~pl.col(S.QUERY).is_in(steady[S.QUERY].implode()))
    moved = moved.unique(S.QUERY, keep="first").head(2)
    assert steady.height and moved.height, "the sample offers both kinds of new click"
    new = pl.concat([steady, moved]).select(
        S.QUERY, pl.col(S.NEGATIVE_LISTING_ID).alias(S.LISTING_ID)
    )
    clicks = pl.concat([state.pairs, new])
    files = [build / "ingest" / S.LISTINGS_FILE, build / "cluster" / S.PRODUCTS_FILE]
    never = cfg.with_(**{"mine.refresh_builds": 10_000})
    inputs = mine.Inputs(clicks, *files)
    result = mine.run(never, inputs, build / "refilter", previous=(state, 1))
    incremental = result.details["incremental"]
    exhausted = state.exhausted(moved[S.QUERY], cfg.mine.num_negatives)
    assert incremental["queries_mined"] >= moved.height - exhausted.len()
    assert incremental["queries_refiltered"] >= 1
    assert incremental["queries_refiltered"] + incremental["queries_mined"] == new.height
    mine.run(never, inputs, build / "refilter-full")
    _check_same_mining(build / "refilter", build / "refilter-full")


def _check_same_mining(incremental: Path, full: Path, queries: pl.Series | None = None) -> None:
    """Both mine outputs hold the same kept rows, and the same dropped rows (of ``queries``
    only, if given: a reused query's dropped rows keep the reasons they were dropped for)."""
    kept, dropped = S.NEGATIVES_FILE, S.NEGATIVES_DROPPED_FILE
    assert _same_rows(pl.read_parquet(incremental / kept), pl.read_parquet(full / kept))
    chosen = pl.lit(True) if queries is None else pl.col(S.QUERY).is_in(queries.implode())
    assert _same_rows(
        pl.read_parquet(incremental / dropped).filter(chosen),
        pl.read_parquet(full / dropped).filter(chosen),
    )


def _check_refilter_regrouped(cfg, build: Path) -> None:
    """Over an unchanged catalog with the products of some queries' positives and kept
    negatives merged, and one query clicking a listing far below its weakest click (its
    ceiling drops), those queries are filtered again from their previous candidates, and the
    whole output equals a full mine. With few negatives per pair no query of the sample is
    short: a regrouped query settles unless the merge leaves it short, the lowered one is
    mined. With many, every query ended short, so its search was exhausted: a merge only takes
    negatives away and a lower ceiling only fewer candidates, so every one of them settles."""
    from pairsieve.mine import stage as mine
    from pairsieve.mine.reuse import PreviousMining, kept_rows, titles_and_products

    listings_file = build / "ingest" / S.LISTINGS_FILE
    products = pl.read_parquet(build / "cluster" / S.PRODUCTS_FILE)
    product_of = dict(products.select(S.LISTING_ID, S.PRODUCT_ID).iter_rows())
    pairs = pl.read_parquet(build / "ingest" / S.CLICKS_FILE, columns=[S.QUERY, S.LISTING_ID])
    pairs = pairs.unique()
    for negatives, exhausted in ((cfg.mine.num_negatives, 0), (200, pairs[S.QUERY].n_unique())):
        day = cfg.with_(**{"mine.num_negatives": negatives, "mine.refresh_builds": 10_000})
        folder = build / f"regrouped-{negatives}"
        mine.run(day, mine.Inputs(pairs, listings_file, products), folder / "before")
        state = PreviousMining(
            kept_rows(folder / "before"),
            pl.scan_parquet(folder / "before" / S.NEGATIVES_DROPPED_FILE),
            pairs,
            titles_and_products(pl.read_parquet(listings_file), products),
        )
        assert state.exhausted(pairs[S.QUERY].unique(), negatives).len() == exhausted
        # Two queries' first kept negatives join their positives' products.
        chosen = state.kept.unique([S.QUERY], keep="first", maintain_order=True).head(2)
        merge = {
            product_of[negative]: product_of[positive]
            for positive, negative in chosen.select(
                S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID
            ).rows()
        }
        merged = products.with_columns(pl.col(S.PRODUCT_ID).replace(merge))
        # Another query clicks a listing it was shown far below its weakest click.
        lower = (
            state.dropped.collect()
            .filter(~pl.col(S.QUERY).is_in(chosen[S.QUERY].implode()))
            .filter(pl.col(S.SCORE) < pl.col(S.POSITIVE_SCORE).min().over(S.QUERY) - 0.05)
            .sort(S.QUERY, S.RANK)
            .head(1)
            .select(S.QUERY, pl.col(S.NEGATIVE_LISTING_ID).alias(S.LISTING_ID))
        )
        assert lower.height == 1
        clicks = pl.concat([pairs, lower])
        inputs = mine.Inputs(clicks, listings_file, merged)
        result = mine.run(day, inputs, folder / "after", previous=(state, 1))
        plan = state.plan(clicks, pl.read_parquet(listings_file), merged, (1, 10_000))
        assert set(chosen[S.QUERY]) | set(lower[S.QUERY]) <= set(plan.refiltered)
        assert plan.reused.len() > 0
        incremental = result.details["incremental"]
        assert incremental["queries_refiltered"] + incremental["queries_mined"] == (
            plan.refiltered.len()
        )
        assert incremental["queries_refiltered"] >= 1
        if exhausted:
            assert incremental["queries_mined"] == 0
        else:
            assert incremental["queries_mined"] >= 1  # the lowered ceiling
        mine.run(day, inputs, folder / "full")
        _check_same_mining(folder / "after", folder / "full", plan.refiltered)
        # The reused rows stream from the previous file into the new one: the same bytes again.
        mine.run(day, inputs, folder / "again", previous=(state, 1))
        for name in (S.NEGATIVES_FILE, S.NEGATIVES_DROPPED_FILE, S.NEGATIVES_JUDGEMENT_FILE):
            again, after = (io.sha256_file(folder / run / name) for run in ("again", "after"))
            assert again == after


def _check_reuse(cfg, results, before: Path, after: Path) -> None:
    """Day 2 reused day 1's pairs and negatives where nothing changed, mined the rest as a full
    build would, and no reused negative is a copy of its positive."""
    from pairsieve.mine import stage as mine

    cluster, mined = results[1].details, results[2].details
    assert cluster["incremental"] == {"reused": True, "why_not": None}
    assert 0 < cluster["settled_nodes"] and cluster["reused_pairs"] > 0
    # Signatures of unchanged titles come from the cache: at most the changed titles' are new.
    assert 0 < cluster["signatures_computed"] <= cluster["titles"] - cluster["settled_nodes"]
    reused, fresh = mined["incremental"]["queries_reused"], mined["incremental"]["queries_mined"]
    assert reused > 0 and fresh > 0
    # Candidates are counted per query for both halves, so the accounting is a real check.
    mine_stage = results[2]
    assert mine_stage.rows_in == mine_stage.rows_out + sum(mine_stage.dropped_by_reason.values())
    kept = pl.read_parquet(after / "mine" / "negatives.parquet")
    dropped = pl.read_parquet(after / "mine" / "negatives_dropped.parquet")
    full = mine.run(cfg, mine.Inputs.of(RunLayout(after)), after / "full-mine")
    assert full.rows_out > 0
    order = [S.QUERY, S.POSITIVE_LISTING_ID, S.RANK]
    assert kept.equals(kept.sort(order)) and dropped.equals(dropped.sort(order))
    full_kept = pl.read_parquet(after / "full-mine" / "negatives.parquet")
    full_dropped = pl.read_parquet(after / "full-mine" / "negatives_dropped.parquet")
    old_kept = pl.read_parquet(before / "mine" / "negatives.parquet")
    # Day 2 forgets the dropped rows of listings removed or retitled since (`mine.reuse`).
    catalogs = [pl.read_parquet(RunLayout(b).listings, columns=[S.LISTING_ID, S.TITLE])
                for b in (before, after)]  # fmt: skip
    gone = catalogs[0].join(catalogs[1], on=[S.LISTING_ID, S.TITLE], how="anti")[S.LISTING_ID]
    assert gone.len() > 0  # the removed listing
    old_dropped = pl.read_parquet(before / "mine" / "negatives_dropped.parquet").filter(
        ~pl.col(S.NEGATIVE_LISTING_ID).is_in(gone.implode())
    )
    from_old = kept.join(old_kept, on=kept.columns, how="semi")[S.QUERY].unique()
    assert from_old.len() >= reused
    for today, whole, old in ((kept, full_kept, old_kept), (dropped, full_dropped, old_dropped)):
        # Every query's rows are either its previous rows or a full build's rows, whole
        # (scores to float rounding: faiss sums a subset of queries in other blocks).
        for query in today[S.QUERY].unique():
            rows, mine_again, previous = (
                t.filter(pl.col(S.QUERY) == query) for t in (today, whole, old)
            )
            assert _same_rows(rows, previous) or _same_rows(rows, mine_again)
    products = pl.read_parquet(after / "cluster" / "products.parquet").select(
        S.LISTING_ID, S.PRODUCT_ID
    )
    same = (
        kept.join(products, left_on=S.POSITIVE_LISTING_ID, right_on=S.LISTING_ID)
        .join(products, left_on=S.NEGATIVE_LISTING_ID, right_on=S.LISTING_ID, suffix="_neg")
        .filter(pl.col(S.PRODUCT_ID) == pl.col(S.PRODUCT_ID + "_neg"))
    )
    assert same.height == 0
    _check_nothing_to_mine(cfg, before)
    _check_refilter(cfg, before)
    _check_refilter_regrouped(cfg, before)
    changes = json.loads((after / "report" / "report.json").read_text())["changes"]["figures"]
    assert changes["build_number"] == 1 and changes["products_new"] >= 1
    assert (changes["queries_reused"], changes["queries_mined"]) == (reused, fresh)
    assert changes["pairs_reused"] == cluster["reused_pairs"]


def _kill_a_worker_mid_task(client, task_prefix: str, killed: list[int]) -> None:
    """Wait until a worker runs a task named ``task_prefix``..., then SIGKILL that worker's
    process (its nanny starts a new one) and record the pid in ``killed``."""
    import signal
    import time

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for worker, keys in client.processing().items():
            if any(str(key).startswith(task_prefix) for key in keys):
                pid = client.run(os.getpid, workers=[worker])[worker]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.02)


@pytest.fixture(scope="module")
def dask_cluster():
    """A real local Dask cluster: two worker processes of one thread each, and a client."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


def _runner_cfg(cache_dir: Path, runner: str, cluster, **overrides):
    return _cfg(
        cache_dir,
        **{
            "runner.task_runner": runner,
            "runner.address": cluster.scheduler_address if runner == "dask" else None,
            "embed.partition_size": 100,
            **overrides,
        },
    )


def _output_hashes(build: Path) -> dict[str, str]:
    """sha256 of the build's products, id changes, negatives (kept, dropped and judged) and
    shards."""
    layout = RunLayout(build)
    files = {
        "products": layout.products,
        "id_changes": layout.id_changes,
        "negatives": layout.negatives,
        "negatives_dropped": layout.negatives_dropped,
        "negatives_judgement": layout.negatives_judgement,
    }
    return _shard_hashes(build) | {name: io.sha256_file(path) for name, path in files.items()}


@pytest.mark.slow
def test_a_dask_build_that_loses_a_worker_mid_stage_keeps_the_threads_bytes(
    prefect_harness, tmp_path, product_ids, dask_cluster
):
    """One worker of the cluster is killed while it embeds a partition; Dask reruns the task on
    a live worker, and the build's shards, products and negatives are the thread runner's
    bytes."""
    import threading

    from pairsieve.orchestration.flows import build

    cluster, client = dask_cluster
    data = _slice(tmp_path / "data", product_ids[60:80])
    hashes, stages = {}, {}
    killed: list[int] = []
    for runner in ("threads", "dask"):
        cfg = _runner_cfg(tmp_path / f"cache-{runner}", runner, cluster)
        killer = threading.Thread(
            target=_kill_a_worker_mid_task, args=(client, "embed_partition", killed)
        )
        if runner == "dask":
            killer.start()
        build(
            clicks=str(data / "clicks.parquet"),
            catalog=str(data / "catalog.parquet"),
            out=str(tmp_path / runner),
            config=cfg.model_dump(mode="json"),
        )
        if runner == "dask":
            killer.join()
        hashes[runner] = _output_hashes(tmp_path / runner)
        stage_dir = RunLayout(tmp_path / runner).stage_dir("cluster")
        stages[runner] = json.loads((stage_dir / S.STAGE_JSON).read_text())
    assert len(killed) == 1 and killed[0] not in client.run(os.getpid).values()
    assert hashes["threads"] == hashes["dask"]
    # Every partition's vectors reached the cache, the lost one's too: clustering embedded none.
    assert stages["dask"]["details"]["embedded"] == 0
    assert stages["dask"]["details"]["embedding_cache_hits"] > 0


@pytest.mark.slow
def test_a_day_two_build_on_dask_reuses_day_one_and_keeps_the_threads_bytes(
    prefect_harness, tmp_path, product_ids, dask_cluster
):
    """Day 2 through the flow, on threads and on the Dask workers, from the same day 1: new
    products and queries that gained clicks. Both reuse day 1's pairs and negatives where
    nothing changed, refilter the queries that gained clicks, and write the same product ids,
    id changes, negatives and shards."""
    from pairsieve.orchestration.flows import build

    cluster, _ = dask_cluster
    chosen = product_ids[80:92]
    day1_data = _slice(tmp_path / "d1", chosen[:10])
    clicks = pl.read_parquet(day1_data / "clicks.parquet")
    day2_data = _slice(tmp_path / "d2", chosen)
    # Three queries click another listing of a product they clicked before.
    catalog = pl.read_parquet(day2_data / "catalog.parquet").select("listing_id", TRUE_PRODUCT_ID)
    seen = clicks.join(catalog, on="listing_id").unique(["query", "listing_id"])
    other = seen.join(catalog, on=TRUE_PRODUCT_ID, suffix="_other").filter(
        pl.col("listing_id_other") != pl.col("listing_id")
    )
    gained = (
        other.join(
            seen,
            left_on=["query", "listing_id_other"],
            right_on=["query", "listing_id"],
            how="anti",
        )
        .sort("query", "listing_id_other")
        .unique("query", keep="first", maintain_order=True)
        .head(3)
        .select("query", pl.col("listing_id_other").alias("listing_id"), *clicks.columns[2:])
    )
    assert gained.height == 3
    day2_clicks = pl.read_parquet(day2_data / "clicks.parquet")
    pl.concat([day2_clicks, gained.select(day2_clicks.columns)]).write_parquet(
        day2_data / "clicks.parquet"
    )

    def run(data: Path, out: str, runner: str, previous: str | None = None):
        # Mining asks for more negatives than a query finds: every search is exhausted, so a
        # query that only gained clicks is settled from day 1's candidates (`mine.reuse`).
        many = {"mine.num_negatives": 50, "shards.num_negatives": 2}
        cfg = _runner_cfg(tmp_path / f"cache-{out}", runner, cluster, **many)
        return build(
            clicks=str(data / "clicks.parquet"),
            catalog=str(data / "catalog.parquet"),
            out=str(tmp_path / out),
            config=cfg.model_dump(mode="json"),
            previous=previous,
        )

    run(day1_data, "day1", "threads")
    stages = {
        runner: run(day2_data, runner, runner, str(tmp_path / "day1"))
        for runner in ("threads", "dask")
    }
    assert _output_hashes(tmp_path / "threads") == _output_hashes(tmp_path / "dask")
    for runner, result in stages.items():
        cluster_details, mine_details = (result[s]["details"] for s in ("cluster", "mine"))
        assert cluster_details["incremental"] == {"reused": True, "why_not": None}, runner
        assert cluster_details["reused_pairs"] > 0
        incremental = mine_details["incremental"]
        assert incremental["queries_reused"] > 0 and incremental["queries_mined"] > 0
        assert incremental["queries_refiltered"] >= gained.height
        assert incremental["refilter_partitions"] == 1


def test_a_cold_build_prints_no_other_packages_log_lines(
    prefect_harness, tmp_path, product_ids, monkeypatch
):
    """The first build on a machine (the int8 export included) shows pairsieve's own lines only:
    every record the console prints comes from a `pairsieve` logger."""
    import logging

    from typer.testing import CliRunner

    from pairsieve import cli, terminal

    printed: list[logging.LogRecord] = []

    class Recording(terminal.RichHandler):
        """The console's handler, recording what passes its filters."""

        def emit(self, record: logging.LogRecord) -> None:
            printed.append(record)
            super().emit(record)

    monkeypatch.setattr(terminal, "RichHandler", Recording)
    data = _slice(tmp_path / "data", product_ids[:20])
    args = ["build", "--clicks", str(data / "clicks.parquet")]
    args += ["--catalog", str(data / "catalog.parquet"), "--out", str(tmp_path / "build")]
    result = CliRunner().invoke(cli.app, [*args, "--set", f'cache_dir="{tmp_path / "cold"}"'])
    assert result.exit_code == 0, result.output
    assert any(record.getMessage().startswith("preparing the onnx-int8") for record in printed)
    foreign = [(r.name, r.getMessage()[:80]) for r in printed if not r.name.startswith("pairsieve")]
    assert foreign == []


def test_a_build_with_labels_tunes_its_clustering_and_reports_their_estimates(
    prefect_harness, tmp_path, product_ids, session_cache_dir
):
    """Build, draw pairs to label from it, answer them from the truth, build again with the
    answers: the clustering says what the labels chose and the report estimates from them."""
    from pairsieve.labels.pairs import write_sample
    from pairsieve.labels.store import read_labels, write_labels
    from pairsieve.orchestration.flows import build
    from pairsieve.report.stage import load_report

    data = _slice(tmp_path / "data", product_ids[:40])
    cfg = _cfg(session_cache_dir).model_dump(mode="json")
    inputs = dict(clicks=str(data / "clicks.parquet"), catalog=str(data / "catalog.parquet"))
    build(**inputs, out=str(tmp_path / "first"), config=cfg)
    asked = tmp_path / "labels.jsonl"
    write_sample(tmp_path / "first", None, 60, 0, asked)
    truth = dict(
        pl.read_parquet(data / "catalog.parquet").select(S.LISTING_ID, TRUE_PRODUCT_ID).rows()
    )
    rows = read_labels(asked)
    same = [truth[a] == truth[b] for a, b in rows.select(S.LISTING_A, S.LISTING_B).rows()]
    write_labels(rows.with_columns(pl.Series("label", same)), asked)
    build(**inputs, out=str(tmp_path / "tuned"), config=cfg, labels=[str(asked)])
    layout = RunLayout(tmp_path / "tuned")
    found = json.loads((layout.stage_dir("cluster") / S.STAGE_JSON).read_text())["details"]
    assert found["labels"]["labels_used"] == rows.height > 0
    assert found["labels"]["labels_not_in_this_clustering"] == 0
    assert set(found["labels"]["chosen"]) == {
        "accept_probability",
        "link_threshold",
        "unjudged_weight",
        "lifted_vetoes",
        "pair_model",
    }
    assert found["accept_probability"] == found["labels"]["chosen"]["accept_probability"]
    figures = load_report(layout.report)["duplicates"]["figures"]
    assert figures["labels_used"] > 0 and 0 <= figures["merged_pair_precision"] <= 1
    assert figures["pair_model"] == found["labels"]["chosen"]["pair_model"]
    lifted = found["labels"]["chosen"]["lifted_vetoes"]
    assert figures["lifted_vetoes"] == (", ".join(lifted) or "none")
