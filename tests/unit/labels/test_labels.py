"""Labels: the stratified sample, the label file, and the estimator's coverage."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from pairsieve.cluster import stage as cluster
from pairsieve.config import PairsieveConfig
from pairsieve.core.layout import RunLayout
from pairsieve.errors import PairsieveError
from pairsieve.labels import estimate, sample, store
from pairsieve.labels import pairs as label_pairs
from pairsieve.orchestration import steps
from pairsieve.report import stage as report
from tests.unit.cluster.test_stage import catalog


def _population(n: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    p = np.clip(rng.beta(0.3, 1.5, n), 0, 1)  # most pairs sure "different", as in a catalog
    return pl.DataFrame({"pair_id": [f"q{i}" for i in range(n)], "p_same": p})


def test_weights_are_the_inverse_of_the_exact_inclusion_probabilities() -> None:
    pairs = _population(5000, 0)
    drawn = sample.draw(pairs, 300, seed=7)
    assert drawn.height == 300 and drawn["pair_id"].n_unique() == 300
    sizes = sample.stratum_sizes(pairs["p_same"].to_numpy())
    taken = drawn.group_by(sample.STRATUM).len().sort(sample.STRATUM)
    for h, n_h in taken.iter_rows():
        # every pair of stratum h is drawn with probability n_h / N_h
        weights = drawn.filter(pl.col(sample.STRATUM) == h)[sample.WEIGHT].unique().to_list()
        assert weights == [pytest.approx(sizes[h] / n_h)]
    assert drawn[sample.WEIGHT].sum() == pytest.approx(5000)  # weights add up to the population
    # inclusion frequencies over many seeds match n_h / N_h
    counts = np.zeros(pairs.height)
    index = {pid: i for i, pid in enumerate(pairs["pair_id"].to_list())}
    for seed in range(200):
        for pid in sample.draw(pairs, 300, seed)["pair_id"].to_list():
            counts[index[pid]] += 1
    which = sample.strata(pairs["p_same"].to_numpy())
    for h, n_h in taken.iter_rows():
        observed = counts[which == h].mean() / 200
        assert observed == pytest.approx(n_h / sizes[h], rel=0.05)


def test_the_uncertain_middle_gets_more_labels_than_its_size() -> None:
    pairs = _population(20_000, 1)
    drawn = sample.draw(pairs, 300, seed=0)
    sure = drawn.filter(pl.col("p_same") < 0.02).height / 300
    assert sure < (pairs["p_same"] < 0.02).mean()
    middle = drawn.filter(pl.col("p_same").is_between(0.3, 0.7)).height / 300
    assert middle > (pairs["p_same"].is_between(0.3, 0.7)).mean()


def test_same_seed_same_sample_whatever_the_row_order() -> None:
    pairs = _population(3000, 2)
    first = sample.draw(pairs, 200, seed=5)
    again = sample.draw(pairs.sample(fraction=1.0, shuffle=True, seed=9), 200, seed=5)
    assert first.equals(again)
    assert not first.equals(sample.draw(pairs, 200, seed=6))


def test_allocation_never_exceeds_a_stratum_and_spends_every_label() -> None:
    out = sample.allocate(np.array([3, 0, 1000, 5]), np.array([0.5, 0.5, 0.0, 0.5]), 20)
    assert out.sum() == 20 and out[1] == 0 and np.all(out <= [3, 0, 1000, 5])
    everything = sample.allocate(np.array([3, 4]), np.array([0.5, 0.5]), 50)
    assert everything.tolist() == [3, 4]


def test_the_interval_covers_the_truth_at_its_level() -> None:
    """A population whose model is miscalibrated (true share 0.30, mean p 0.22): the model
    alone is off; 300 stratified labels correct it, and 95% intervals cover the truth in about
    95% of repeated draws."""
    rng = np.random.default_rng(11)
    n = 20_000
    p = np.clip(rng.beta(0.5, 1.5, n), 0.001, 0.999)
    y = rng.random(n) < np.clip(1.4 * p, 0, 1)
    truth = y.mean()
    pairs = pl.DataFrame({"pair_id": [f"r{i}" for i in range(n)], "p_same": p})
    assert abs(p.mean() - truth) > 0.05
    covered, widths = 0, []
    for seed in range(120):
        drawn = sample.draw(pairs, 300, seed)
        idx = np.asarray([int(x[1:]) for x in drawn["pair_id"].to_list()])
        found = estimate.labelled_share(p, p[idx], y[idx])
        covered += found.interval[0] <= truth <= found.interval[1]
        widths.append(found.interval[1] - found.interval[0])
        assert found.labels == 300
    assert covered / 120 >= 0.9
    assert np.mean(widths) < 0.1


def test_multiplicity_weights_count_a_pair_as_often_as_it_occurs() -> None:
    p = np.array([0.1, 0.9, 0.5])
    weights = np.array([1.0, 3.0, 1.0])
    y = np.array([0.0, 1.0, 1.0])  # every pair labelled: the estimate is exact
    found = estimate.labelled_share(p, p, y, weights, weights)
    assert found.value == pytest.approx(4 / 5)
    assert found.interval == pytest.approx((0.8, 0.8))


def _lines(path, rows) -> None:
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows))


def test_a_bad_label_file_names_its_line(tmp_path) -> None:
    good = {"pair_id": "c1", "label": True, "source": "candidate"}
    cases = [
        ("not json\n", "not JSON", None),
        ({"label": True}, "no pair_id", "pair_id"),
        ({"pair_id": "c2", "label": "yes"}, "label must be", "label"),
        ({"pair_id": "c2", "source": "elsewhere"}, "source must be", "source"),
        ({"pair_id": "c1", "label": False}, "also on line 1", "pair_id"),
    ]
    for bad, words, column in cases:
        path = tmp_path / "labels.jsonl"
        _lines(path, [good, bad])
        with pytest.raises(PairsieveError) as info:
            store.read_labels(path)
        assert info.value.code == "bad_labels" and info.value.row == 2
        assert words in info.value.message and info.value.column == column
        assert str(path) in str(info.value)


def test_labels_round_trip_and_later_files_win(tmp_path) -> None:
    rows = pl.DataFrame(
        {
            "pair_id": ["c1", "c2", "a3"],
            "listing_a": ["x", "y", None],
            "listing_b": ["z", "w", None],
            "text_a": ["A", "B", "C"],
            "text_b": ["A'", "B'", "C'"],
            "p_same": [0.2, 0.8, 0.5],
            "stratum": [2, 6, 4],
            "weight": [10.0, 3.0, 2.0],
            "source": ["candidate", "candidate", "audit"],
            "label": [None, True, False],
        },
        schema=store.SCHEMA,
    )
    first = store.write_labels(rows, tmp_path / "one.jsonl")
    assert store.read_labels(first).equals(rows)
    second = tmp_path / "two.jsonl"
    _lines(second, [{"pair_id": "c2", "label": False}, {"pair_id": "c1", "label": None}])
    answers = store.answered([first, second])
    assert dict(answers.select("pair_id", "label").iter_rows()) == {"c2": False, "a3": False}


def _run_folder(root, encoder, cache_dir) -> RunLayout:
    """A build folder with the ingest and cluster outputs of the cluster tests' catalog."""
    layout = RunLayout(root)
    cfg = PairsieveConfig().with_(cache_dir=str(cache_dir))
    cluster.run(cfg, cluster.Inputs(catalog()), layout.stage_dir("cluster"), encoder=encoder)
    layout.listings.parent.mkdir(parents=True)
    catalog().select("listing_id", "title").write_parquet(layout.listings)
    return layout


def test_a_builds_candidates_are_drawn_with_their_texts_and_ids(
    tmp_path, encoder, session_cache_dir
):
    layout = _run_folder(tmp_path / "run", encoder, session_cache_dir)
    population = label_pairs.candidate_pairs(layout.root)
    judged = pl.read_parquet(layout.pairs).filter(pl.col("signal") != "exact")
    assert population.height == judged.height and population["pair_id"].n_unique() == judged.height
    row = population.filter(
        pl.col("listing_a").is_in(["t1", "t2"]) & pl.col("listing_b").is_in(["t1", "t2"])
    )
    assert row["pair_id"][0] == label_pairs.pair_id("candidate", "t2", "t1")  # unordered
    assert row["group"][0] == 1  # merged
    assert row["linked"][0] and {row["text_a"][0], row["text_b"][0]} == {
        "samsung ue55nu8000 55 8 series flat led tv",
        "samsung ue55nu8000txxu 55 inch 4k hdr smart tv",
    }
    out = tmp_path / "labels.jsonl"
    written = label_pairs.write_sample(layout.root, None, 5, 3, out)
    drawn = store.read_labels(out)
    assert written == drawn.height == 5 and drawn["label"].null_count() == 5
    assert set(drawn["pair_id"]) <= set(population["pair_id"])
    again = tmp_path / "again.jsonl"
    label_pairs.write_sample(layout.root, None, 5, 3, again)
    assert again.read_bytes() == out.read_bytes()
    with pytest.raises(PairsieveError) as info:
        label_pairs.write_sample(None, None, 5, 3, out)
    assert info.value.code == "bad_argument"


def test_fewer_labels_than_strata_minimums_still_draws_exactly_n() -> None:
    out = sample.allocate(np.array([50, 50, 50, 50]), np.array([0.5, 0.5, 0.1, 0.0]), 5)
    assert out.sum() == 5 and np.all(out >= 0)


def test_the_ratio_interval_covers_the_recall_of_the_linked_pairs() -> None:
    """Recall of linked pairs among all true pairs, from a miscalibrated model and 300 labels."""
    rng = np.random.default_rng(12)
    n = 20_000
    p = np.clip(rng.beta(0.5, 1.5, n), 0.001, 0.999)
    y = rng.random(n) < np.clip(1.3 * p, 0, 1)
    linked = (p > 0.4) & (rng.random(n) < 0.9)
    truth = (linked & y).sum() / y.sum()
    pairs = pl.DataFrame({"pair_id": [f"r{i}" for i in range(n)], "p_same": p})
    covered = 0
    for seed in range(120):
        idx = np.asarray([int(x[1:]) for x in sample.draw(pairs, 300, seed)["pair_id"].to_list()])
        found = estimate.labelled_ratio(p, linked, p[idx], linked[idx], y[idx])
        covered += found.interval[0] <= truth <= found.interval[1]
    assert covered / 120 >= 0.9
    exact = estimate.labelled_ratio(p, linked, p, linked, y)
    assert exact.value == pytest.approx(truth) and exact.interval == pytest.approx((truth, truth))


def test_a_build_report_with_every_pair_labelled_states_exact_precision_and_recall(
    tmp_path, encoder, session_cache_dir
):
    layout = _run_folder(tmp_path / "run", encoder, session_cache_dir)
    population = label_pairs.candidate_pairs(layout.root)
    truth = dict(catalog().select("listing_id", "true_product_id").iter_rows())
    same = [truth[a] == truth[b] for a, b in population.select("listing_a", "listing_b").rows()]
    # The labeller disagrees on one merged pair and on one pair kept apart, so precision and
    # recall are both below 1.
    same[population["linked"].to_list().index(True)] = False
    same[population["linked"].to_list().index(False)] = True
    rows = population.with_columns(
        pl.lit(0, dtype=pl.Int64).alias("stratum"),
        pl.lit(1.0).alias("weight"),
        pl.Series("label", same),
    )
    labels = store.write_labels(rows, tmp_path / "labels.jsonl")
    linked = population["linked"].to_numpy()
    answers = np.asarray(same)
    steps.report_step(PairsieveConfig(), layout.root, (labels,))  # what a build's flow runs
    rep = report.load_report(layout.report)
    figures = rep["duplicates"]["figures"]
    precision = answers[linked].mean()
    recall = (answers & linked).sum() / answers.sum()
    assert 0 < precision < 1 and 0 < recall < 1
    assert figures["merged_pair_precision"] == pytest.approx(precision)
    assert figures["merged_pair_precision_ci"] == pytest.approx([precision, precision])
    assert figures["candidate_recall"] == pytest.approx(recall)
    assert figures["labels_used"] == population.height
    assert figures["labels_not_in_this_build"] == 0
    assert any("Candidate recall" in note for note in rep["duplicates"]["notes"])


def test_a_sample_split_by_merged_gives_the_merged_pairs_their_own_labels() -> None:
    pairs = _population(20_000, 3).with_columns((pl.col("p_same") > 0.6).alias("linked"))
    plain = sample.draw(pairs, 300, seed=1)
    split = sample.draw(pairs, 300, seed=1, by="linked")
    assert split.height == 300 and split["linked"].sum() == 150 > plain["linked"].sum()
    sizes = sample.stratum_sizes(pairs["p_same"].to_numpy(), pairs["linked"].to_numpy())
    for h, n_h in split.group_by(sample.STRATUM).len().iter_rows():
        weights = split.filter(pl.col(sample.STRATUM) == h)[sample.WEIGHT].unique().to_list()
        assert weights == [pytest.approx(sizes[h] / n_h)]


def test_a_builds_sample_gives_each_group_its_share_and_weights_its_strata() -> None:
    """Kept apart, merged, and held apart by a veto the model would accept: each group gets
    `sample.BUILD_SHARES` of the labels, and each label weighs its (stratum, group)'s size over
    its labels."""
    rng = np.random.default_rng(4)
    pairs = _population(20_000, 5)
    p = pairs["p_same"].to_numpy()
    vetoed = rng.random(len(p)) < 0.3
    groups = sample.build_groups(p > 0.6, vetoed, rng.random(len(p)), accept=0.5)
    assert set(np.unique(groups)) == {0, 1, 2}
    assert not (groups[p > 0.6] != 1).any() and (groups[(p <= 0.6) & ~vetoed] == 0).all()
    pairs = pairs.with_columns(pl.Series("group", groups))
    drawn = sample.draw(pairs, 300, seed=2, by="group", shares=sample.BUILD_SHARES)
    counts = drawn["group"].value_counts().sort("group")["count"].to_list()
    assert counts == [int(300 * share) for share in sample.BUILD_SHARES]
    sizes = sample.stratum_sizes(p, groups)
    for h, n_h in drawn.group_by(sample.STRATUM).len().iter_rows():
        weights = drawn.filter(pl.col(sample.STRATUM) == h)[sample.WEIGHT].unique().to_list()
        assert weights == [pytest.approx(sizes[h] / n_h)]


def test_a_group_too_small_for_its_share_passes_the_rest_on() -> None:
    pairs = _population(5_000, 6).with_columns(
        pl.Series("group", np.r_[np.zeros(4_990, np.int64), np.full(10, 2)])
    )
    drawn = sample.draw(pairs, 300, seed=0, by="group", shares=sample.BUILD_SHARES)
    assert drawn.height == 300 and (drawn["group"] == 2).sum() == 10
