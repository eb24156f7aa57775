"""Clustering behaviour with the real bundled encoder on small fixtures of real titles."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from pairsieve import schemas as S
from pairsieve.cluster import candidates, linkage
from pairsieve.cluster import judge as cluster_judge
from pairsieve.cluster import nodes as cluster_nodes
from pairsieve.cluster import stage as cluster
from pairsieve.config import PairsieveConfig
from pairsieve.core import parallel as forked
from pairsieve.core.contract import StageResult
from pairsieve.core.facts import ClusterFacts
from pairsieve.core.hashing import hex_digest
from pairsieve.errors import PairsieveError
from pairsieve.pair_model import calibration
from tests.maps import from_disk
from tests.unit.cluster.graphs import random_graph

TITLES = {
    # one product, three sellers
    "a1": ("apple iphone 8 64gb silver", "P8-64"),
    "a2": ("Apple iPhone 8 64 GB - Silver", "P8-64"),
    "a3": ("apple mq6h2b/a iphone 8 64gb 4.7 12mp sim free smartphone in silver", "P8-64"),
    # its variants: capacity and model word
    "b1": ("apple iphone 8 256gb silver", "P8-256"),
    "b2": ("Apple iPhone 8 256 GB Silver", "P8-256"),
    "c1": ("apple iphone 8 plus 64gb silver", "P8P-64"),
    # one TV under region-suffixed codes
    "t1": ("samsung ue55nu8000 55 8 series flat led tv", "TV55"),
    "t2": ("samsung ue55nu8000txxu 55 inch 4k hdr smart tv", "TV55"),
    "t3": ("samsung ue65nu8000 65 8 series flat led tv", "TV65"),
    # low-information titles: never merged on text alone
    "w1": ("washing machine", "W1"),
    "w2": ("washing machine", "W2"),
}


def catalog() -> pl.DataFrame:
    return pl.DataFrame(
        {
            S.LISTING_ID: list(TITLES),
            S.TITLE: [t for t, _ in TITLES.values()],
            "true_product_id": [p for _, p in TITLES.values()],
        }
    )


@pytest.fixture
def cfg(session_cache_dir) -> PairsieveConfig:
    return PairsieveConfig().with_(cache_dir=str(session_cache_dir))


def groups(products: pl.DataFrame) -> set[frozenset[str]]:
    return {
        frozenset(g)
        for g in products.group_by(S.PRODUCT_ID).agg(pl.col(S.LISTING_ID))[S.LISTING_ID].to_list()
    }


def test_products_keep_variants_apart(cfg, encoder, tmp_path) -> None:
    result = cluster.run(cfg, cluster.Inputs(catalog()), tmp_path, encoder=encoder)
    products = pl.read_parquet(tmp_path / S.PRODUCTS_FILE)
    found = groups(products)
    assert {frozenset({"c1"}), frozenset({"t1", "t2"}), frozenset({"t3"})} <= found
    assert {frozenset({"w1"}), frozenset({"w2"})} <= found
    same = {x: g for g in found for x in g}
    assert {"a1", "a2"} <= same["a1"] and same["b1"] == {"b1", "b2"}
    assert same["a3"] <= {"a1", "a2", "a3"}  # never chained into the 256GB or Plus products
    assert result.rows_in == result.rows_out == len(TITLES) and result.balanced()
    by_id = {r[S.LISTING_ID]: r for r in products.iter_rows(named=True)}
    assert by_id["w1"][S.METHOD] == "singleton"
    assert by_id["t1"][S.METHOD] == "code" and by_id["t1"][S.CLUSTER_SIZE] == 2
    assert by_id["b2"][S.METHOD] == "exact"
    assert by_id["a1"][S.PRODUCT_ID] == "p" + hex_digest("a1")


def test_the_stage_records_the_facts_later_stages_read(cfg, encoder, tmp_path) -> None:
    """Read back through stage.json's form, by the typed record the other packages use."""
    result = cluster.run(cfg, cluster.Inputs(catalog()), tmp_path, encoder=encoder)
    facts = ClusterFacts.of(StageResult.from_json(json.loads(json.dumps(result.to_json()))))
    assert facts.build_number == 0  # a first build
    assert facts.accept_probability == cfg.cluster.accept_probability
    assert facts.settled_nodes is None and facts.reused_pairs is None  # nothing reused
    assert facts.labels_chosen == {} and facts.incremental == {}


def test_veto_reasons_recorded(cfg, encoder, tmp_path) -> None:
    cluster.run(cfg, cluster.Inputs(catalog()), tmp_path, encoder=encoder)
    pairs = pl.read_parquet(tmp_path / S.PAIRS_FILE)
    reason = {
        frozenset((a, b)): r
        for a, b, r in pairs.select(S.LISTING_A, S.LISTING_B, S.VETO_REASON).iter_rows()
    }
    assert reason[frozenset(("a1", "b1"))] == "bytes_conflict"
    assert reason[frozenset(("a1", "c1"))] == "variant_conflict"
    assert reason[frozenset(("t1", "t3"))] == "model_code_conflict"
    assert reason[frozenset(("w1", "w2"))] == "low_information"
    assert not pairs.filter(pl.col(S.VETO_REASON).is_not_null())[S.ACCEPTED].any()


def test_every_pair_gets_its_calibrated_probability(cfg, encoder, tmp_path) -> None:
    cluster.run(cfg, cluster.Inputs(catalog()), tmp_path / "learned", encoder=encoder)
    pairs = pl.read_parquet(tmp_path / "learned" / S.PAIRS_FILE)
    shipped = calibration.load_calibration()
    scored = pairs.filter(pl.col(S.SIGNAL) != "exact")
    vetoed = scored[S.VETO_REASON].is_not_null().to_numpy()
    expected = shipped.p_same(scored[S.LINK_SCORE].to_numpy(), vetoed)
    assert np.allclose(scored[S.P_SAME].to_numpy(), expected, atol=1e-6)
    exact = pairs.filter(pl.col(S.SIGNAL) == "exact")[S.P_SAME]
    assert exact.len() and (exact - shipped.exact).abs().max() < 1e-6
    by_pair = {
        frozenset(r[:2]): r[2] for r in pairs.select(S.LISTING_A, S.LISTING_B, S.P_SAME).rows()
    }
    assert by_pair[frozenset(("t1", "t2"))] > 0.5 > by_pair[frozenset(("t1", "t3"))]
    rule = cfg.with_(**{"cluster.judge": "rule"})
    cluster.run(rule, cluster.Inputs(catalog()), tmp_path / "rule", encoder=encoder)
    assert pl.read_parquet(tmp_path / "rule" / S.PAIRS_FILE)[S.P_SAME].null_count() == len(pairs)


def test_requested_pairs_are_judged_beside_the_candidates(cfg, encoder, tmp_path) -> None:
    asked = pl.DataFrame(
        {S.LISTING_A: ["w1", "a1", "a1", "b2"], S.LISTING_B: ["t3", "a2", "a1", "b1"]}
    )
    cluster.run(cfg, cluster.Inputs(catalog(), asked), tmp_path, encoder=encoder)
    pairs = pl.read_parquet(tmp_path / S.PAIRS_FILE)
    signal = {
        frozenset(r[:2]): r[2] for r in pairs.select(S.LISTING_A, S.LISTING_B, S.SIGNAL).rows()
    }
    assert signal[frozenset(("w1", "t3"))] == "requested"  # no signal proposes it
    assert signal[frozenset(("a1", "a2"))].endswith("+requested")  # proposed and asked
    assert signal[frozenset(("b1", "b2"))] == "exact"  # one title: nothing to judge
    assert pairs.select(S.LISTING_A, S.LISTING_B).is_duplicated().sum() == 0
    unknown = pl.DataFrame({S.LISTING_A: ["a1"], S.LISTING_B: ["nope"]})
    with pytest.raises(PairsieveError) as info:
        cluster.run(cfg, cluster.Inputs(catalog(), unknown), tmp_path / "x", encoder=encoder)
    assert info.value.code == "unknown_listing" and info.value.column == S.LISTING_B


def test_shuffled_input_gives_identical_bytes(cfg, encoder, tmp_path) -> None:
    cluster.run(cfg, cluster.Inputs(catalog()), tmp_path / "a", encoder=encoder)
    shuffled = cluster.Inputs(catalog().sample(fraction=1.0, shuffle=True, seed=5))
    cluster.run(cfg, shuffled, tmp_path / "b", encoder=encoder)
    for name in (S.PRODUCTS_FILE, S.PAIRS_FILE):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_truth_column_is_never_read(cfg, encoder, tmp_path) -> None:
    scrambled = catalog().with_columns(pl.lit("same").alias("true_product_id"))
    cluster.run(cfg, cluster.Inputs(catalog()), tmp_path / "a", encoder=encoder)
    cluster.run(cfg, cluster.Inputs(scrambled), tmp_path / "b", encoder=encoder)
    a = (tmp_path / "a" / S.PRODUCTS_FILE).read_bytes()
    assert a == (tmp_path / "b" / S.PRODUCTS_FILE).read_bytes()


def _scored(rows: list[tuple[int, int, float, bool, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["a", "b", "score", S.ACCEPTED, S.VETO_REASON], orient="row")


def test_bridge_pair_does_not_chain_two_products() -> None:
    # products {0,1,2} and {3,4,5}, each fully linked, joined by one strong bridge 2-3
    rows = [(i, j, 0.95, True, None) for i, j in [(0, 1), (0, 2), (1, 2), (3, 4), (3, 5), (4, 5)]]
    rows.append((2, 3, 0.9, True, None))
    labels = linkage.agglomerate(np.ones(6, dtype=np.int64), _scored(rows), link_threshold=0.5)
    assert labels.tolist() == [0, 0, 0, 3, 3, 3]
    chained = linkage.agglomerate(np.ones(6, dtype=np.int64), _scored(rows), link_threshold=0.05)
    assert len(set(chained.tolist())) == 1  # what connected components would do


def test_veto_blocks_merge_for_good() -> None:
    rows = [(0, 1, 0.9, True, None), (1, 2, 0.9, True, None), (0, 2, 0.5, False, "bytes_conflict")]
    labels = linkage.agglomerate(np.ones(3, dtype=np.int64), _scored(rows), link_threshold=0.1)
    assert labels[0] != labels[2]


def test_missing_title_column_is_a_clear_error(cfg, tmp_path) -> None:
    from pairsieve.errors import PairsieveError

    with pytest.raises(PairsieveError, match="title"):
        cluster.run(cfg, cluster.Inputs(pl.DataFrame({S.LISTING_ID: ["x"]})), tmp_path)


def test_compare_scores_pairsieve_and_baselines(cfg, encoder) -> None:
    from pairsieve.cluster import evaluate

    scores = evaluate.compare(cfg, catalog(), "true_product_id", encoder)
    assert set(scores) == {
        "pairsieve",
        "exact_title",
        "minhash_components",
        "embedding_components",
    }
    ours = scores["pairsieve"]
    assert ours.pairwise_precision == 1.0 and ours.largest_cluster <= 3
    assert scores["exact_title"].clusters == len(TITLES) - 2  # b1/b2 and w1/w2 share titles
    assert scores["exact_title"].pairwise_precision == 0.5  # "washing machine" x2 is wrong


@pytest.mark.slow
def test_cluster_command_writes_products(tmp_path, session_cache_dir) -> None:
    from typer.testing import CliRunner

    from pairsieve.cli import app

    path = tmp_path / "catalog.csv"
    catalog().write_csv(path)
    args = ["cluster", "--catalog", str(path), "--out", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*args, "--set", f"cache_dir={session_cache_dir}"])
    assert result.exit_code == 0, result.output
    products = pl.read_parquet(tmp_path / "out" / S.PRODUCTS_FILE)
    assert products[S.LISTING_ID].to_list() == sorted(TITLES)
    missing = CliRunner().invoke(app, ["cluster", "--catalog", "nope.csv", "--out", "x"])
    assert missing.exit_code == 2


def _judge_every_pair(titles: list[str], brands: list[str | None] | None = None, **knobs):
    """(nodes, attributes, node pairs, judge's rows) for every pair of distinct titles, on the
    MinHash path's rule judge with config ``knobs``."""
    from pairsieve.text import attributes as text

    listings = {S.LISTING_ID: [f"x{i:02d}" for i in range(len(titles))], S.TITLE: titles}
    if brands is not None:
        listings[S.BRAND] = brands
    nodes = cluster_nodes.node_table(cluster_nodes.prepare(pl.DataFrame(listings)))
    attrs = [text.extract_attributes(t) for t in nodes[S.TITLE_NORM].to_list()]
    n = len(nodes)
    pairs = np.array([(a, b) for a in range(n) for b in range(a + 1, n)], dtype=np.int64)
    candidates = pl.DataFrame({"a": pairs[:, 0], "b": pairs[:, 1], S.SIGNAL: "minhash"})
    cfg = PairsieveConfig().with_(**{"cluster.use_embeddings": False, **knobs}).cluster
    context = cluster_judge.judging(cfg, nodes, attrs, None)
    return nodes, attrs, pairs, cluster_judge.judge(context, None, candidates)


def test_columnwise_judging_agrees_with_text_checks_pair_by_pair() -> None:
    """`cluster_judge.judge` evaluates `match.assess` / `match.jaccard` column-wise; every pair
    of a small real-title set (all conflict kinds, codes, brands) must match the per-pair
    functions."""
    from pairsieve.text import match

    titles = [t for t, _ in TITLES.values()] + [
        "sony rx100 iv",
        "sony rx100 vi",
        "panasonic lx100",
        "panasonic lx100 mark ii",
        "samsung galaxy s8 64gb",
        "samsung galaxy s9 64gb",
        "apple iphone 7 32gb",
        "apple iphone 8 32gb",
        "bosch 7kg 1400rpm washer 60cm",
        "bosch 8kg 1400rpm washer 60cm",
        "intel core i7-8700k 3.7ghz lga1151",
        "intel core i7 8700k 3.7 ghz",
        "",
    ]
    brands = [["acme", None, "zeta", None][i % 4] for i in range(len(titles))]
    nodes, attrs, pairs, scored = _judge_every_pair(titles, brands)
    informative = nodes["_informative"].to_list()
    brands = nodes[S.BRAND].to_list()
    for (a, b), jac, reason in zip(
        pairs.tolist(), scored[S.JACCARD], scored[S.VETO_REASON], strict=True
    ):
        assert jac == round(match.jaccard(attrs[a], attrs[b]), 4)
        if not (informative[a] and informative[b]):
            expected = "low_information"
        elif brands[a] and brands[b] and brands[a] != brands[b]:
            expected = "brand_conflict"
        else:
            expected = match.assess(attrs[a], attrs[b])[0]
        assert reason == expected, (nodes[S.TITLE_NORM][a], nodes[S.TITLE_NORM][b])


def test_lifted_vetoes_fall_through_to_the_next_check() -> None:
    """A lifted reason stops vetoing, and a pair it vetoed is vetoed by its next conflict, if
    any (a body-and-kit granularity keeps capacities apart)."""
    titles = [
        "canon powershot sx730 hs 20mp black",
        "canon powershot sx730 hs 24mp black",
        "sandisk extreme 64gb sdsqxa2-064g",
        "sandisk extreme 128gb sdsqxa2-128g",
        "washing machine",
        "washing machine white",
    ]
    kinds = ("canon", "sandisk", "washing")

    def reasons(lifted: list[str]) -> dict[str, str | None]:
        nodes, _, pairs, scored = _judge_every_pair(titles, **{"cluster.lifted_vetoes": lifted})
        norm = nodes[S.TITLE_NORM].to_list()
        return {
            kind: reason
            for (a, b), reason in zip(pairs.tolist(), scored[S.VETO_REASON], strict=True)
            for kind in kinds
            if norm[a].startswith(kind) and norm[b].startswith(kind)
        }

    assert reasons([]) == {
        "canon": "pixels_conflict",
        "sandisk": "model_code_conflict",
        "washing": "low_information",
    }
    assert reasons(["pixels_conflict"])["canon"] is None
    assert reasons(["model_code_conflict"])["sandisk"] == "bytes_conflict"
    assert reasons(["model_code_conflict", "bytes_conflict"])["sandisk"] is None
    assert reasons(["low_information"])["washing"] is None


def test_an_unknown_lifted_veto_is_a_clear_error() -> None:
    with pytest.raises(PairsieveError) as found:
        _judge_every_pair(["sony a7 iii", "sony a7 ii"], **{"cluster.lifted_vetoes": ["colour"]})
    assert found.value.code == "bad_config" and "colour" in str(found.value)
    assert found.value.knob == "cluster.lifted_vetoes"


def _reference_agglomerate(
    counts: np.ndarray, scored: pl.DataFrame, threshold: float, unjudged: float = 1.0
) -> list:
    """The constrained average linkage as a plain Python heap-and-dict loop (the code
    `merge_loop` replaced): every pair is a [weight, vetoed, judged] cell, summed when
    repeated; unjudged pairs weigh ``unjudged`` in the mean."""
    import heapq

    n = len(counts)
    size = [float(c) for c in counts]
    links: list[dict[int, list]] = [{} for _ in range(n)]
    for a, b, score, ok, veto in scored.iter_rows():
        w = score * float(counts[a]) * float(counts[b]) if ok else 0.0
        for p, q in ((a, b), (b, a)):
            cell = links[p].setdefault(q, [0.0, False, 0.0])
            cell[0] += w
            cell[1] = cell[1] or veto is not None
            cell[2] += float(counts[a] * counts[b])

    def mean(x: int, y: int, cell: list) -> float:
        return cell[0] / (unjudged * size[x] * size[y] + (1.0 - unjudged) * cell[2])

    parent = list(range(n))
    heap = [
        (-mean(x, y, cell), x, y)
        for x in range(n)
        for y, cell in links[x].items()
        if x < y and not cell[1] and mean(x, y, cell) >= threshold
    ]
    heapq.heapify(heap)
    while heap:
        neg, x, y = heapq.heappop(heap)
        if parent[x] != x or parent[y] != y or y not in links[x]:
            continue
        cell = links[x][y]
        if cell[1] or abs(mean(x, y, cell) + neg) > 1e-12:
            continue
        parent[y] = x
        size[x] += size[y]
        _reference_merge(x, y, links)
        for z, cz in links[x].items():
            if not cz[1] and mean(x, z, cz) >= threshold:
                heapq.heappush(heap, (-mean(x, z, cz), min(x, z), max(x, z)))
    return [_root(parent, node) for node in range(n)]


def _reference_merge(x: int, y: int, links: list[dict[int, list]]) -> None:
    """Fold y's cells into x's: weights and judged pairs summed, vetoes OR-ed, neighbours
    repointed."""
    del links[x][y]
    for z, (wz, vz, jz) in links[y].items():
        if z == x:
            continue
        cell = links[x].setdefault(z, [0.0, False, 0.0])
        cell[0] += wz
        cell[1] = cell[1] or vz
        cell[2] += jz
        del links[z][y]
        links[z][x] = cell
    links[y] = {}


def _root(parent: list[int], node: int) -> int:
    while parent[node] != node:
        node = parent[node]
    return node


@pytest.mark.parametrize("seed", range(40))
def test_compiled_merge_loop_equals_the_python_loop(seed: int) -> None:
    """`agglomerate` (numpy + the numba `merge_loop`) labels random graphs exactly as the plain
    Python loop: tied scores, listing counts, vetoes, repeated and reversed pairs, two-node
    components."""
    counts, scored = random_graph(seed)
    for threshold in (0.3, 0.5, 0.8):
        for unjudged in (1.0, 0.5, 0.0):
            want = _reference_agglomerate(counts, scored, threshold, unjudged)
            found = linkage.agglomerate(counts, scored, threshold, unjudged)
            assert found.tolist() == want, (threshold, unjudged)


def test_unjudged_pairs_weigh_what_the_knob_says() -> None:
    """Nodes 0-3 are one product whose pairs 0-2 and 1-3 were never candidates: counted as
    zeros they hold the clusters {0, 1} and {2, 3} apart at threshold 0.6 (mean 0.45 over the
    four cross pairs); left out of the mean (weight 0) they merge (0.9 over the two judged)."""
    rows = [(0, 1, 0.9, True, None), (2, 3, 0.9, True, None)]
    rows += [(0, 3, 0.9, True, None), (1, 2, 0.9, True, None)]
    assert len(set(linkage.agglomerate(np.ones(4, dtype=np.int64), _scored(rows), 0.6))) == 2
    assert set(linkage.agglomerate(np.ones(4, dtype=np.int64), _scored(rows), 0.6, 0.0)) == {0}


def test_in_processes_is_ordered_and_reports_failures() -> None:
    """The fork helper returns every part in order, and a failing part raises (no hang)."""
    for workers in (2, 3):
        squares = forked.in_processes(
            lambda lo, hi: [i * i for i in range(lo, hi)], 50_001, workers
        )
        assert len(squares) == workers
        assert [x for part in squares for x in part] == [i * i for i in range(50_001)]
    assert forked.in_processes(lambda lo, hi: (lo, hi), 10) == [(0, 10)]
    assert forked.bounds(10, 3) == [(0, 3), (3, 6), (6, 10)]

    def fail_in_child(lo: int, hi: int) -> int:
        if lo > 0:
            raise ValueError("child")
        return 0

    with pytest.raises(RuntimeError, match="forked worker failed"):
        forked.in_processes(fail_in_child, 50_000, 2)

    def fail_in_parent(lo: int, hi: int) -> bytes:
        if lo == 0:
            raise ValueError("parent")
        return b"x" * (1 << 20)  # more than a pipe buffer: the child blocks until read

    with pytest.raises(ValueError, match="parent"):
        forked.in_processes(fail_in_parent, 50_000, 3)


def test_forked_workers_give_byte_identical_outputs(tmp_path, monkeypatch) -> None:
    """Attributes and code comparisons split over a forked child change no output byte."""
    from pairsieve.core import io
    from pairsieve.datasets.synth import catalog_chunk

    frame = catalog_chunk(0, 700, 700, 0).head(3000).drop(S.TRUE_PRODUCT_ID)
    cfg = PairsieveConfig().with_(**{"cluster.use_embeddings": False})
    hashes = []
    for label, threshold in (("alone", 10**9), ("forked", 1)):
        monkeypatch.setattr(forked, "FORK_MIN_ITEMS", threshold)
        cluster.run(cfg, cluster.Inputs(frame), tmp_path / label)
        hashes.append(
            [io.sha256_file(tmp_path / label / f) for f in (S.PRODUCTS_FILE, S.PAIRS_FILE)]
        )
    assert hashes[0] == hashes[1]


def test_code_block_pairs_equal_brute_force() -> None:
    """Every node pair sharing a blocking key of a block of at most max_block nodes."""
    from pairsieve.cluster.reuse import touching
    from pairsieve.text import attributes as text
    from pairsieve.text import match

    rng = np.random.default_rng(0)
    codes = ["ue55nu8000", "ue55nu8000txxu", "55nu8000", "ue65nu8000", "kx1234ab", "x12345", "ab12"]
    for max_block in (2, 3, 5, 50):
        attrs = [
            text.extract_attributes(" ".join(rng.choice(codes, size=rng.integers(0, 3))))
            for _ in range(40)
        ]
        keys = [set().union(*(match.code_keys(c) for c in a.codes | a.joined)) for a in attrs]
        members: dict[str, list[int]] = {}
        for node, node_keys in enumerate(keys):
            for key in node_keys:
                members.setdefault(key, []).append(node)
        expected = sorted(
            {
                (x, y)
                for nodes in members.values()
                if len(nodes) <= max_block
                for i, x in enumerate(nodes)
                for y in nodes[i + 1 :]
            }
        )
        skipped = sum(len(nodes) > max_block for nodes in members.values())
        pairs, n_skipped = candidates.code_block_pairs(attrs, max_block)
        assert [tuple(p) for p in pairs.tolist()] == expected
        assert n_skipped == skipped
        wanted = rng.random(len(attrs)) < 0.2  # a day-2 build's changed titles
        some, _ = candidates.code_block_pairs(attrs, max_block, wanted)
        assert touching(some, wanted).tolist() == touching(pairs, wanted).tolist()


def test_combined_candidates_name_every_signal_that_proposed_a_pair() -> None:
    """One row per distinct pair, sorted, with the signals joined in SIGNAL_ORDER."""
    rng = np.random.default_rng(1)
    found = {
        name: rng.integers(0, 30, size=(rng.integers(0, 60), 2))
        for name in ("embedding", "code", "minhash")
    }
    found = {name: np.sort(p, axis=1)[p[:, 0] != p[:, 1]] for name, p in found.items()}
    proposers: dict[tuple[int, int], set[str]] = {}
    for name, pairs in found.items():
        for x, y in pairs.tolist():
            proposers.setdefault((x, y), set()).add(name)
    combined = candidates.combine_candidates(
        {name: candidates.pair_codes(p) for name, p in found.items()}
    )
    expected = [
        (x, y, "+".join(s for s in candidates.SIGNAL_ORDER if s in proposers[x, y]))
        for x, y in sorted(proposers)
    ]
    assert combined.rows() == expected
    assert combined.schema[S.SIGNAL] == candidates.SIGNAL_TYPE
    assert candidates.combine_candidates({"code": np.empty(0, np.int64)}).height == 0


def test_mapped_search_and_judging_and_chunked_pairs_file_give_the_same_bytes(
    cfg, encoder, tmp_path, monkeypatch
) -> None:
    """Each mapped span reads its plan from disk, as a worker process would."""
    from pairsieve.cluster import neighbours, pairs_file

    copies = pl.DataFrame({S.LISTING_ID: ["a4"], S.TITLE: [TITLES["a1"][0]]})
    frame = pl.concat([catalog().drop("true_product_id"), copies])  # an exact duplicate row too
    cluster.run(cfg, cluster.Inputs(frame), tmp_path / "whole", encoder=encoder)
    monkeypatch.setattr(pairs_file, "_CHUNK", 3)
    monkeypatch.setattr(neighbours, "KNN_QUERIES", 4)
    monkeypatch.setattr(cluster_judge, "_JUDGE_CHUNK", 2)
    spans_seen: dict[str, int] = {}

    def counted(fn, plan, spans, cfg, step):
        spans_seen[step] = len(spans)
        return from_disk(fn, plan, spans, cfg, step)

    cluster.run(cfg, cluster.Inputs(frame), tmp_path / "spans", encoder=encoder, map_spans=counted)
    assert spans_seen[neighbours.STEP] > 1 and spans_seen[cluster_judge.JUDGE_STEP] > 1
    whole = pl.read_parquet(tmp_path / "whole" / S.PAIRS_FILE)
    assert whole.equals(pl.read_parquet(tmp_path / "spans" / S.PAIRS_FILE))
    assert (whole[S.SIGNAL] == "exact").sum() >= 1 and len(whole) > 3  # spans several chunks
    for name in (S.PRODUCTS_FILE,):
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "spans" / name).read_bytes()
    assert (
        sorted(p.name for p in (tmp_path / "spans").iterdir() if p.name.startswith((".", "_")))
        == []
    )


def _informative(titles: list[str], share: float | None) -> dict[str, bool]:
    listings = pl.DataFrame({S.LISTING_ID: [f"x{i:04d}" for i in range(len(titles))],
                             S.TITLE: titles})  # fmt: skip
    frame = cluster_nodes.prepare(listings, rare_word_share=share)
    return dict(frame.select(S.TITLE, cluster_nodes.INFORMATIVE).iter_rows())


def test_word_named_titles_are_informative_where_their_words_are_rare() -> None:
    """With `cluster.rare_word_share`, a title without a code names a product when two of its
    words are rare in this catalog: "adobe photoshop elements" among many other titles, but
    not "washing machine" in a catalog of washing machines, nor anything by default."""
    fillers = [f"garden hose reel {c}{d}" for c in "abcdefghij" for d in "klmnopqrst"]
    software = ["adobe photoshop elements", "photoshop elements by adobe", *fillers]
    assert _informative(software, 0.01)["adobe photoshop elements"]
    assert not _informative(software, None)["adobe photoshop elements"]
    appliances = [f"washing machine {c}" for c in "abcdefghijklmnopqrstuvwxyz"] * 4
    appliances += ["washing machine", "washing machine white"]
    flags = _informative(appliances, 0.01)
    assert not flags["washing machine"] and not flags["washing machine white"]
