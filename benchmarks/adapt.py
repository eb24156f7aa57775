"""What a few hundred labels buy the product ids of the catalog they came from
(`pairsieve.labels.adapt`): pairwise F1 before and after adapting to simulated labels.

For each of the five benchmark catalogs, the default clustering is made (truth hidden), and
``--draws`` times ``--n`` of its judged candidate pairs are drawn as `pairsieve label sample
--run` draws them (strata of p_same within `sample.build_groups`; seed = draw number) and labelled
by the catalog's truth standing in for a person. The pair model is refitted to those labels
(`cluster.labelled.refitted_model`) and `adapt.choose` picks a setting, the shipped or the
refitted model among its knobs, from those labels alone; the clustering with that setting is
then scored against the truth. Two-shop
catalogs are sampled and scored on cross-shop pairs only (their truth says nothing inside a
shop). Nothing fitted sees the measured catalog's truth except through the drawn labels.

    cd benchmarks && ../.venv/bin/python adapt.py --data-root ../../shared/data \
        [--n 300] [--draws 10] [--catalogs pricerunner,alaska-cameras] [--no-refit]

Prints a markdown table for benchmarks/RESULTS.md; "estimated gain" is what the labels'
estimate of pairwise F1 over the candidate pairs promised, the chosen setting's over the
default's.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl
from harness.clustering import Run

from pairsieve import schemas as S
from pairsieve.cluster.judge import resolved_link_threshold
from pairsieve.cluster.labelled import Clusterings, refitted_model
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS
from pairsieve.labels import adapt, sample
from pairsieve.pair_model import model as pair_model
from pairsieve.pair_model.calibration import load_calibration
from pairsieve.pair_model.model import PairModel


class Catalog:
    """One catalog's clusterings, one per set of lifted vetoes (candidates and pair features
    are the same in all), and the pairs a simulated labeller can answer."""

    def __init__(self, name: str, data_root: Path) -> None:
        bench = BENCHMARKS[name]
        self.catalog = bench.load(data_root)
        self.source = S.SELLER_ID if bench.cross_source else None
        self.runs: dict[tuple[str, ...], Run] = {}
        self.merged: dict[adapt.Setting, np.ndarray] = {}
        base = self.run(())
        self.score = base.scored["score"].to_numpy()
        self.answerable = np.flatnonzero(base.labelled)
        self.counts = base.result.nodes["count"].to_numpy()
        self.clusterings = Clusterings(self.counts, base.scored, (), self.judged_under)
        judged = ~base.vetoed  # the graph the product's refit reads (`labelled.tune`)
        graph = pair_model.neighbour_graph(len(self.counts), base.a[judged], base.b[judged])
        base.features.update(pair_model.neighbour_features(graph, base.a, base.b))

    def run(self, lifted: tuple[str, ...]) -> Run:
        if lifted not in self.runs:
            cfg = PairsieveConfig().with_(**{"cluster.lifted_vetoes": list(lifted)})
            self.runs[lifted] = Run(cfg, self.catalog, self.source)
        return self.runs[lifted]

    def judged(self, lifted: tuple[str, ...], model: PairModel | None) -> pl.DataFrame:
        """The candidates judged with ``lifted`` vetoes by ``model`` (None: shipped)."""
        scored = self.run(lifted).scored
        if model is None:
            return scored
        return scored.with_columns(pl.Series("score", model.probability(self.runs[()].features)))

    def features(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[rows] for k, v in self.runs[()].features.items()}

    def merged_by(self, setting: adapt.Setting) -> np.ndarray:
        """Which answerable pairs ``setting`` puts in one product (cached per shipped-model
        setting)."""
        if setting.pair_model != adapt.SHIPPED:
            return self.clusterings.merged(setting)[self.answerable]
        if setting not in self.merged:
            self.merged[setting] = self.clusterings.merged(setting)[self.answerable]
        return self.merged[setting]

    def scores(self, model: str) -> np.ndarray:
        """The answerable pairs' scores by ``model``."""
        return self.clusterings.scores((), model)[self.answerable]

    def f1(self, setting: adapt.Setting) -> float:
        base = self.runs[()]
        listing = self.clusterings.labels(setting)[base.result.frame["_node"].to_numpy()]
        return base._score(listing, None).pairwise_f1

    def refit_to(self, labelled: adapt.Labelled, allowed: bool) -> tuple[str, ...]:
        """Refit the pair model to ``labelled`` (rows of the answerable pairs) if ``allowed``:
        the pair models a setting may then choose from."""
        if not allowed:
            return (adapt.SHIPPED,)
        rows = self.answerable[labelled.rows]
        on_pairs = adapt.Labelled(rows, labelled.label, labelled.weight)
        refitted = refitted_model(on_pairs, self.runs[()].vetoed, self.features)
        self.clusterings.models[adapt.REFIT] = refitted
        for key in [k for k in self.clusterings.judged if k[1] == adapt.REFIT]:
            del self.clusterings.judged[key]
        return (adapt.SHIPPED,) if refitted is None else (adapt.SHIPPED, adapt.REFIT)


def population(cat: Catalog) -> adapt.Population:
    base = cat.runs[()]
    keep = cat.answerable
    p_same = load_calibration().p_same(cat.score, base.vetoed)
    reason = base.scored[S.VETO_REASON].cast(pl.String).fill_null("").to_numpy().astype(str)
    return adapt.Population(p_same[keep], cat.score[keep], reason[keep])


def draws(
    cat: Catalog, n: int, count: int, default: adapt.Setting, refit: bool = True
) -> list[tuple[float, adapt.Adaptation]]:
    """(listing pairwise F1, adaptation) of ``count`` draws of ``n`` simulated labels."""
    pop = population(cat)
    base = cat.runs[()]
    truth = base.label[cat.answerable].astype(np.float64)
    vetoed = pop.veto_reason != ""
    groups = sample.build_groups(
        cat.merged_by(default), vetoed, pop.score, default.accept_probability
    )
    frame = pl.DataFrame(
        {"pair_id": np.arange(len(pop.p_same)).astype(str), "p_same": pop.p_same, "group": groups}
    )
    out = []
    for seed in range(count):
        drawn = sample.draw(frame, n, seed, by="group", shares=sample.BUILD_SHARES)
        rows = drawn["pair_id"].cast(pl.Int64).to_numpy()
        labelled = adapt.Labelled(rows, truth[rows], drawn["weight"].to_numpy())
        models = cat.refit_to(labelled, refit)
        scores = {model: cat.scores(model) for model in models}
        found = adapt.choose(pop, labelled, cat.merged_by, default, scores=scores)
        out.append((cat.f1(found.chosen), found))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--catalogs", default=",".join(BENCHMARKS))
    parser.add_argument(
        "--no-refit", action="store_true", help="tune the knobs only, never refit the pair model"
    )
    args = parser.parse_args()
    c = PairsieveConfig().cluster
    default = adapt.Setting(
        c.accept_probability, resolved_link_threshold(c), c.unjudged_weight, c.lifted_vetoes
    )
    print(
        "| catalog | default F1 | adapted F1, mean | gain: mean | min | max | estimated gain "
        "| default kept | refit chosen | lifted most often |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    gains = []
    for name in args.catalogs.split(","):
        started = time.perf_counter()
        cat = Catalog(name, args.data_root)
        before = cat.f1(default)
        found = draws(cat, args.n, args.draws, default, refit=not args.no_refit)
        gain = np.array([f1 - before for f1, _ in found])
        gains.append(gain.mean())
        estimated = np.mean([a.chosen_f1 - a.default_f1 for _, a in found])
        kept = sum(a.chosen == default for _, a in found)
        refits = sum(a.chosen.pair_model == adapt.REFIT for _, a in found)
        lifts = pl.Series([r for _, a in found for r in a.chosen.lifted_vetoes], dtype=pl.String)
        common = ", ".join(f"{r} ({k})" for r, k in lifts.value_counts(sort=True).iter_rows())
        print(
            f"| {name} | {before:.3f} | {before + gain.mean():.3f} | **{gain.mean():+.3f}** "
            f"| {gain.min():+.3f} | {gain.max():+.3f} | {estimated:+.3f} | {kept} of {len(found)} "
            f"| {refits} of {len(found)} | {common or '-'} "
            f"| ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print(f"\nmean gain over the catalogs: {np.mean(gains):+.3f}")


if __name__ == "__main__":
    main()
