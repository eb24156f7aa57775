"""Leave-one-catalog-out: do the words that one title has and the other lacks, learned from
other catalogs, tell products apart on a catalog the model never saw?

The pair model gains one 0/1 column per word class found in exactly one of the two titles
("upgrade", "case", "mac"; numbers with a unit become their unit, "#n:gb"; other tokens with
digits "#code"; bare numbers "#num"), hashed into 2^18 columns, beside today's 15 features
(standardised). Fitted as `transfer.py` fits (L2 logistic regression on the labelled, unvetoed
candidate pairs of four catalogs, each weighing the same; thresholds picked on those four with
`harness.clustering.best_thresholds`), measured on the fifth, for ``--c`` (the inverse L2
strength) given.

Usage: python benchmarks/word_differences.py --data-root ../shared/data [--c 0.3 0.02]
"""

from __future__ import annotations

import argparse
import re
import zlib
from pathlib import Path

import numpy as np
from harness.clustering import Run, benchmark_run, best_thresholds, held_out_splits
from scipy import sparse

from pairsieve import schemas as S
from pairsieve.cluster.judge import resolved_link_threshold
from pairsieve.config import PairsieveConfig
from pairsieve.datasets.benchmarks import BENCHMARKS
from pairsieve.pair_model import model as pair_model
from pairsieve.pair_model.fit import equal_catalog_weights

COLUMNS = 1 << 18
_WITH_UNIT = re.compile(r"^\d+(?:[.,]\d+)?([a-z]+)$")


def word_class(token: str) -> str:
    """A normalised title's token as the model sees it: numbers by their unit, codes as one."""
    if token.isdigit():
        return "#num"
    if any(ch.isdigit() for ch in token):
        unit = _WITH_UNIT.match(token)
        return f"#n:{unit.group(1)}" if unit else "#code"
    return token


def differences(run: Run) -> sparse.csr_matrix:
    """(pairs, COLUMNS) 0/1: the hashed word classes in one title of the pair and not the other."""
    words = [
        frozenset(word_class(t) for t in title.split())
        for title in run.result.nodes[S.TITLE_NORM].to_list()
    ]
    indptr, indices = [0], []
    for a, b in zip(run.a.tolist(), run.b.tolist(), strict=True):
        indices += sorted({zlib.crc32(w.encode()) % COLUMNS for w in words[a] ^ words[b]})
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float32)
    shape = (len(run.a), COLUMNS)
    return sparse.csr_matrix((data, np.asarray(indices, dtype=np.int32), indptr), shape=shape)


def main() -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-root", type=Path, default=Path("../shared/data"))
    parser.add_argument("--c", type=float, nargs="+", default=[0.3, 0.02])
    parser.add_argument("--min-precision", type=float, default=0.75)
    args = parser.parse_args()
    cfg = PairsieveConfig()
    shipped = pair_model.load_model()
    link = resolved_link_threshold(cfg.cluster)
    runs, dense, words = {}, {}, {}
    for name, bench in BENCHMARKS.items():
        run = runs[name] = benchmark_run(cfg, bench, args.data_root)
        dense[name], words[name] = run.matrix(shipped.features), differences(run)
    print(
        "\n| catalog | default pair F1 | " + " | ".join(f"C={c}: P / R / F1" for c in args.c) + " |"
    )
    print("|---|---|" + "---|" * len(args.c))
    means: dict[str, list[float]] = {"default": [], **{str(c): [] for c in args.c}}
    for fitted_on, held in held_out_splits(list(runs)):
        kept = [~runs[n].vetoed & runs[n].labelled for n in fitted_on]
        pairs = list(zip(fitted_on, kept, strict=True))
        scaler = StandardScaler().fit(np.vstack([dense[n][k] for n, k in pairs]))

        design = {
            n: sparse.hstack([scaler.transform(dense[n]), words[n]], format="csr") for n in runs
        }
        x = sparse.vstack([design[n][k] for n, k in pairs], format="csr")
        y = np.concatenate([runs[n].label[k] for n, k in pairs])
        run = runs[held]
        today = run.scores(shipped.probability(run.features), cfg.cluster.accept_probability, link)
        means["default"].append(today.pairwise_f1)
        cells = []
        for c in args.c:
            model = LogisticRegression(C=c, max_iter=3000, solver="liblinear")
            model.fit(x, y, sample_weight=equal_catalog_weights(kept))
            p = {n: model.predict_proba(design[n])[:, 1] for n in runs}
            accept, link_at, _ = best_thresholds(runs, fitted_on, p, args.min_precision, (1.0,))
            s = run.scores(p[held], accept, link_at)
            means[str(c)].append(s.pairwise_f1)
            cells.append(
                f"{s.pairwise_precision:.3f} / {s.pairwise_recall:.3f} / **{s.pairwise_f1:.3f}**"
            )
        print(f"| {held} | {today.pairwise_f1:.3f} | " + " | ".join(cells) + " |", flush=True)
    print("| **mean** | " + " | ".join(f"**{np.mean(v):.3f}**" for v in means.values()) + " |")


if __name__ == "__main__":
    main()
