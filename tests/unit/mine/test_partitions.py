"""Mining as a map over partitions of the sorted queries: any partitioning, any order of the
tasks, a plan read back from disk in another process, the same rows as one pass over them all."""

from __future__ import annotations

import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.config import MINE_QUERY_BATCH, PairsieveConfig
from pairsieve.core import partitions as parts
from pairsieve.core.partitions import Mapper
from pairsieve.errors import PairsieveError
from pairsieve.mine import deepen, partitions
from pairsieve.mine import stage as mine
from pairsieve.mine.reuse import PreviousMining, kept_rows, titles_and_products
from pairsieve.vectors.knn import VectorFile
from tests.maps import in_processes
from tests.unit.mine.test_stage import CATALOG, deepening_case, frames


def test_batches_start_at_multiples_of_the_batch_whatever_the_span(monkeypatch):
    monkeypatch.setattr(deepen, "_QUERY_BATCH", 4)
    assert deepen.batch_edges((0, 10)) == [0, 4, 8, 10]
    assert deepen.batch_edges((4, 8)) == [4, 8]
    assert deepen.batch_edges((2, 9)) == [2, 4, 8, 9]
    assert deepen.batch_edges((3, 3)) == [3, 3]


def _mined_equal(left: deepen.Mined, right: deepen.Mined) -> None:
    assert left.kept.equals(right.kept)
    assert left.dropped.lazy().collect().equals(right.dropped.lazy().collect())
    assert left.counts.sort(S.QUERY).equals(right.counts.sort(S.QUERY))
    assert left.rounds == right.rounds
    assert left.skipped_above_ceiling == right.skipped_above_ceiling
    assert left.reasons == right.reasons


@pytest.mark.parametrize("order", ["in order", "last first"])
def test_partitions_in_any_order_give_the_rows_of_one_pass(monkeypatch, tmp_path, order):
    retrieval, positives, cfg = deepening_case()
    products = frames({}, {})[2]
    monkeypatch.setattr(deepen, "_QUERY_BATCH", 1)  # one query a batch, a partition each
    whole = deepen.mine_pairs(retrieval, positives, products, cfg.mine, cfg.seed)
    plan = str(partitions.Plan(retrieval, positives, products).write(tmp_path / "plan"))
    spans = parts.spans(len(retrieval.queries), 1)
    assert spans == [(0, 1), (1, 2)]
    run = spans if order == "in order" else spans[::-1]
    results = {span: partitions.mine_partition(plan, span, cfg) for span in run}
    _mined_equal(partitions.gather([results[span] for span in spans]), whole)
    assert [r.reasons for r in results.values()] != [{}, {}]


def test_a_partition_reads_the_plan_back_from_disk(monkeypatch, tmp_path):
    retrieval, positives, cfg = deepening_case()
    products = frames({}, {})[2]
    monkeypatch.setattr(deepen, "_QUERY_BATCH", 1)
    folder = partitions.Plan(retrieval, positives, products).write(tmp_path / "plan")
    held = [partitions.mine_partition(str(folder), span, cfg) for span in [(0, 1), (1, 2)]]
    parts.forget(folder)  # as on a worker that has never seen the plan
    read = partitions.Plan.read(folder)
    assert read.retrieval.queries == retrieval.queries
    assert read.retrieval.listing_ids.equals(retrieval.listing_ids)
    assert read.positives.equals(positives) and read.products.equals(products)
    again = [partitions.mine_partition(str(folder), span, cfg) for span in [(0, 1), (1, 2)]]
    _mined_equal(partitions.gather(again), partitions.gather(held))


def test_listing_vectors_read_from_the_plan_file_give_the_rows_of_those_in_memory(
    monkeypatch, tmp_path
):
    retrieval, positives, cfg = deepening_case()
    products = frames({}, {})[2]
    monkeypatch.setattr(deepen, "_QUERY_BATCH", 1)
    whole = deepen.mine_pairs(retrieval, positives, products, cfg.mine, cfg.seed)
    assert len(whole.rounds) > 1, "a query must be mined again below the margin (a scan)"
    lean = partitions.listings_on_disk(retrieval, tmp_path)
    assert isinstance(lean.listing_vectors, VectorFile)
    assert (lean.listing_vectors[0 : len(lean.listing_vectors)] == retrieval.listing_vectors).all()
    mined, _ = partitions.mine_mapped(lean, positives, products, cfg, Mapper.local(tmp_path))
    _mined_equal(mined, whole)
    # A plan written elsewhere gets its own copy of the file.
    elsewhere = partitions.Plan(lean, positives, products).write(tmp_path / "elsewhere")
    parts.forget(elsewhere)
    copied = partitions.Plan.read(elsewhere).retrieval.listing_vectors
    assert (copied[0 : len(copied)] == retrieval.listing_vectors).all()


def test_the_partition_size_must_be_a_multiple_of_the_batch():
    with pytest.raises(PairsieveError) as bad:
        PairsieveConfig().with_(**{"runner.mine_partition_queries": MINE_QUERY_BATCH + 1})
    assert bad.value.code == "bad_config" and "multiple of 4096" in str(bad.value)
    cfg = PairsieveConfig().with_(**{"runner.mine_partition_queries": 2 * MINE_QUERY_BATCH})
    assert cfg.runner.mine_partition_queries == 2 * MINE_QUERY_BATCH


def _catalog_inputs() -> mine.Inputs:
    """The test catalog with its true products as product ids, and a query per listing (its
    title less the first two words) that clicked it."""
    listings = pl.DataFrame(
        CATALOG, schema=[S.LISTING_ID, S.TITLE, S.TRUE_PRODUCT_ID], orient="row"
    )
    products = listings.select(S.LISTING_ID, pl.col(S.TRUE_PRODUCT_ID).alias(S.PRODUCT_ID))
    clicks = pl.DataFrame(
        {
            S.QUERY: [t.split(" ", 2)[-1] for t in listings[S.TITLE]],
            S.LISTING_ID: listings[S.LISTING_ID],
        }
    )
    return mine.Inputs(clicks, listings, products)


@pytest.mark.parametrize("index", ["exact", "ivf"])
def test_the_stage_mapped_on_single_thread_processes_writes_the_same_bytes(
    tmp_path, monkeypatch, session_cache_dir, encoder, index
):
    inputs = _catalog_inputs()
    knobs = {"mine.num_negatives": 3, "mine.search_depth": 4}
    if index == "ivf":  # the first round and the search below the margin on the IVF index
        knobs |= {"knn.exact_max": 1, "knn.nlist": 4, "knn.deep_nprobe": 2}
    cfg = PairsieveConfig(cache_dir=str(session_cache_dir)).with_(**knobs)
    here = mine.run(cfg, inputs, tmp_path / "here", encoder=encoder)
    assert len(here.details["retrieval_rounds"]) > 1  # queries were mined below the margin
    assert here.details["index"] == {"exact": "IndexFlatIP", "ivf": "IndexIVFFlat"}[index]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    mapped = mine.run(cfg, inputs, tmp_path / "mapped", encoder=encoder, map_spans=in_processes)
    assert here.details["partitions"] == mapped.details["partitions"] == 1
    for name in (S.NEGATIVES_FILE, S.NEGATIVES_DROPPED_FILE, S.NEGATIVES_JUDGEMENT_FILE):
        assert (tmp_path / "here" / name).read_bytes() == (tmp_path / "mapped" / name).read_bytes()
    assert here.rows_out == mapped.rows_out > 0


def test_the_stage_writes_the_same_bytes_whatever_the_partition_count(
    tmp_path, monkeypatch, session_cache_dir, encoder
):
    inputs = _catalog_inputs()
    cfg = PairsieveConfig(cache_dir=str(session_cache_dir)).with_(**{"mine.num_negatives": 3})
    monkeypatch.setattr(deepen, "_QUERY_BATCH", 1)  # a batch per query, as at 4,096 queries
    one = mine.run(cfg, inputs, tmp_path / "one", encoder=encoder)
    # a partition per query: below the validated minimum, set past validation for the test
    runner = cfg.runner.model_copy(update={"mine_partition_queries": 1})
    many = mine.run(
        cfg.model_copy(update={"runner": runner}), inputs, tmp_path / "many", encoder=encoder
    )
    assert (one.details["partitions"], many.details["partitions"]) == (1, len(CATALOG))
    for name in (S.NEGATIVES_FILE, S.NEGATIVES_DROPPED_FILE, S.NEGATIVES_JUDGEMENT_FILE):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()


def test_day_two_refiltering_writes_the_same_bytes_whatever_the_partitions(
    tmp_path, monkeypatch, session_cache_dir, encoder
):
    """Queries that only gained clicks are filtered again from day 1's candidates, a partition
    of them at a time: one partition, one per query, or partitions in fresh processes that read
    the plan from disk write the same rows."""
    day1_inputs = _catalog_inputs()
    clicks, listings, products = day1_inputs.clicks, day1_inputs.listings, day1_inputs.products
    # More negatives than the catalog holds: every pair ends short, so every query's search was
    # exhausted and a query that only gained clicks is settled from day 1's candidates.
    cfg = PairsieveConfig(cache_dir=str(session_cache_dir)).with_(
        **{"mine.num_negatives": 20, "mine.refresh_builds": 10_000}
    )
    monkeypatch.setattr(deepen, "_QUERY_BATCH", 1)
    day1 = tmp_path / "day1"
    mine.run(cfg, day1_inputs, day1, encoder=encoder)
    state = PreviousMining(
        kept_rows(day1),
        pl.scan_parquet(day1 / S.NEGATIVES_DROPPED_FILE),
        clicks,
        titles_and_products(listings, products),
    )
    # Each query clicks the next listing of its product as well, where the product has one.
    following = products.with_columns(
        pl.col(S.LISTING_ID).shift(-1).over(S.PRODUCT_ID).alias("_next")
    )
    gained = (
        clicks.join(following, on=S.LISTING_ID)
        .drop_nulls("_next")
        .select(S.QUERY, pl.col("_next").alias(S.LISTING_ID))
    )
    day2 = mine.Inputs(pl.concat([clicks, gained]), listings, products)
    one = mine.run(cfg, day2, tmp_path / "one", encoder=encoder, previous=(state, 1))
    runner = cfg.runner.model_copy(update={"mine_partition_queries": 1})  # past validation
    each = cfg.model_copy(update={"runner": runner})
    many = mine.run(each, day2, tmp_path / "many", encoder=encoder, previous=(state, 1))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    apart = mine.run(
        each,
        day2,
        tmp_path / "apart",
        encoder=encoder,
        previous=(state, 1),
        map_spans=in_processes,
    )
    incremental = one.details["incremental"]
    assert incremental["queries_refiltered"] == gained.height > 1
    assert incremental["refilter_partitions"] == 1
    assert many.details["incremental"]["refilter_partitions"] == gained.height
    assert apart.details["incremental"] == many.details["incremental"]
    for name in (S.NEGATIVES_FILE, S.NEGATIVES_DROPPED_FILE, S.NEGATIVES_JUDGEMENT_FILE):
        expected = (tmp_path / "one" / name).read_bytes()
        assert (tmp_path / "many" / name).read_bytes() == expected
        assert (tmp_path / "apart" / name).read_bytes() == expected
    assert one.rows_out == many.rows_out == apart.rows_out > 0
    assert one.dropped_by_reason == many.dropped_by_reason == apart.dropped_by_reason
