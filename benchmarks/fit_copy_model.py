"""Fit the judgement of mined candidates (src/pairsieve/mine/copy_model.json) and measure it
leave-one-catalog-out.

The rows: from a default build of each labelled catalog (`benchmarks/experiment.py`'s work
folders), every candidate inside the margin that mining would judge (the first
`MARGIN_LOOKAHEAD * num_negatives` of a pair), labelled a copy when its true product is the
positive's. Its features are `mine.judgement.FEATURES`; its offset the logit of the build's
copy density (`mine.filters.density_counts` over the build's first-round candidates). A logistic
regression (L2 1e-3; each catalog weighs the same in the fit) gives the weights.

`keep_below` is chosen on the fitted catalogs alone: the largest probability on the grid at which
the first kept candidate of a pair (the one a row with one negative trains on) is a copy at
most `TARGET` of the time on every one of them. `drop_above` is 0.5: a
candidate more likely a copy than not.

Leave-one-out: for each catalog, the model and `keep_below` from the other four, measured on it
(how many candidates it keeps, and the share of them that are copies), and written to
`--loo-dir/copy_model-without-NAME.json` for that catalog's experiment
(`--build-set mine.copy_model=...`).

Usage: python benchmarks/fit_copy_model.py --work /tmp/ps-exp [--loo-dir DIR] [--write]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import polars as pl
from scipy.optimize import minimize

from pairsieve import schemas as S
from pairsieve.config import MineConfig
from pairsieve.mine import filters, judgement
from pairsieve.mine.stage import listing_products
from pairsieve.text import attributes as text

CATALOGS = ("pricerunner", "abt-buy", "walmart-amazon", "altosight", "alaska-cameras")
GRID = (0.005, 0.01, 0.02, 0.03, 0.05, 0.08, 0.12)
TARGET = 0.02  # copies among the candidates the judgement keeps
DROP_ABOVE = 0.5
L2 = 1e-3
_PAIR = [S.QUERY, S.POSITIVE_LISTING_ID]


def mined_inputs(build: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What mining filtered in a build, from its files: (candidates, positives, listing
    products with titles, listings)."""
    listings = pl.read_parquet(build / "ingest" / S.LISTINGS_FILE)
    products = pl.read_parquet(build / "cluster" / S.PRODUCTS_FILE)
    kept = pl.read_parquet(build / "mine" / S.NEGATIVES_FILE)
    dropped = pl.read_parquet(build / "mine" / S.NEGATIVES_DROPPED_FILE).drop(S.REASON)
    rows = pl.concat([kept, dropped])
    positives = rows.select(S.QUERY, S.POSITIVE_LISTING_ID, S.POSITIVE_SCORE).unique().sort(_PAIR)
    candidates = rows.select(S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK).unique()
    candidates = candidates.sort(S.QUERY, S.RANK)
    return candidates, positives, listing_products(listings, products), listings


def build_rows(build: Path, cfg: MineConfig) -> tuple[pl.DataFrame, float]:
    """The judged candidates of one build with features and labels, and its copy density."""
    candidates, positives, info, listings = mined_inputs(build)
    first_round = candidates.filter(pl.col(S.RANK) <= cfg.search_depth)
    density = judgement.smoothed_density(*filters.density_counts(first_round, positives, info, cfg))
    table = filters._joined(candidates, positives, info, cfg)
    identity = filters._OTHER_CLICK | pl.col("_pos_product").fill_null(False)
    inside = ~identity & filters._ABOVE_LIMIT
    ahead = pl.int_range(pl.len()).over([S.QUERY, S.POSITIVE_LISTING_ID, inside], order_by=S.RANK)
    judged = table.with_columns(ahead.alias("_ahead")).filter(
        inside & (pl.col("_ahead") < filters.MARGIN_LOOKAHEAD * cfg.num_negatives)
    )
    title = dict(info.select(S.LISTING_ID, S.TITLE_NORM).iter_rows())
    truth = dict(listings.select(S.LISTING_ID, S.TRUE_PRODUCT_ID).iter_rows())
    attrs: dict[str, text.Attributes] = {}

    def of(key: str) -> text.Attributes:
        if key not in attrs:
            attrs[key] = text.extract_attributes(title.get(key) or "")
        return attrs[key]

    pos, neg = judged[S.POSITIVE_LISTING_ID].to_list(), judged[S.NEGATIVE_LISTING_ID].to_list()
    excess = judged.select(judgement.relative_excess(pl.col(S.SCORE), pl.col(S.POSITIVE_SCORE)))
    features = judgement.pair_features(
        [of(k) for k in pos],
        [of(k) for k in neg],
        excess.to_series().to_numpy(),
        judged["_ahead"].to_numpy(),
    )
    first = judged["_ahead"] == 0
    frame = pl.DataFrame(features).with_columns(
        pl.Series("copy", [truth[a] == truth[b] for a, b in zip(pos, neg, strict=True)]),
        first.alias("first"),
    )
    return frame, density


def fit(parts: dict[str, tuple[pl.DataFrame, float]]) -> judgement.CopyModel:
    """The weighted, offset logistic regression over the catalogs in ``parts``."""
    names = list(judgement.FEATURES)
    x = np.vstack([frame.select(names).to_numpy() for frame, _ in parts.values()])
    y = np.concatenate([frame["copy"].to_numpy() for frame, _ in parts.values()]).astype(float)
    offset = np.concatenate([
        np.full(frame.height, np.log(d / (1 - d))) for frame, d in parts.values()
    ])  # fmt: skip
    w = np.concatenate([np.full(f.height, 1.0 / max(f.height, 1)) for f, _ in parts.values()])
    w /= w.sum()

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = offset + theta[0] + x @ theta[1:]
        p = 1.0 / (1.0 + np.exp(-z))
        eps = 1e-12
        value = -np.sum(w * (y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))
        grad_z = w * (p - y)
        grad = np.concatenate([[grad_z.sum()], x.T @ grad_z])
        value += L2 * np.sum(theta[1:] ** 2)
        grad[1:] += 2 * L2 * theta[1:]
        return value, grad

    theta = minimize(loss, np.zeros(len(names) + 1), jac=True, method="L-BFGS-B").x
    model = judgement.CopyModel(float(theta[0]), dict(zip(names, theta[1:].tolist(), strict=True)),
                                GRID[0], DROP_ABOVE)  # fmt: skip
    keep = choose_keep_below(model, parts)
    return judgement.CopyModel(model.intercept, model.weights, keep, DROP_ABOVE)


def kept_share(model: judgement.CopyModel, frame: pl.DataFrame, density: float, t: float):
    """(candidates kept at threshold t, share of them copies, kept first candidates' copies)."""
    p = model.probability({k: frame[k].to_numpy() for k in judgement.FEATURES}, density)
    keep = p <= t
    copies = frame["copy"].to_numpy()
    first = frame["first"].to_numpy() & keep
    share = float(copies[keep].mean()) if keep.any() else 0.0
    first_share = float(copies[first].mean()) if first.any() else 0.0
    return int(keep.sum()), share, first_share


def choose_keep_below(model: judgement.CopyModel, parts: dict) -> float:
    """The largest grid probability at which the first kept candidates of the pairs are at most
    `TARGET` copies on every catalog in ``parts``."""
    best = GRID[0]
    for t in GRID:
        if all(kept_share(model, f, d, t)[2] <= TARGET for f, d in parts.values()):
            best = t
    return best


def leave_one_out(parts: dict[str, tuple[pl.DataFrame, float]]) -> dict[str, judgement.CopyModel]:
    """Per catalog, the model and `keep_below` fitted and chosen on the other catalogs alone."""
    return {name: fit({k: v for k, v in parts.items() if k != name}) for name in parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="experiment.py work folders")
    parser.add_argument("--loo-dir", type=Path, default=None)
    parser.add_argument("--write", action="store_true", help="write copy_model.json")
    args = parser.parse_args()
    cfg = MineConfig()
    parts = {}
    for name in CATALOGS:
        build = args.work / name / "build"
        if not (build / "mine" / S.NEGATIVES_FILE).exists():
            print(f"skipped {name}: no build under {build}")
            continue
        parts[name] = build_rows(build, cfg)
    print("| held out | density | judged | copies among them | keep_below (from the others) "
          "| kept | copies among kept | among kept first candidates |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for name, model in leave_one_out(parts).items():
        frame, density = parts[name]
        kept, share, first = kept_share(model, frame, density, model.keep_below)
        print(f"| {name} | {density:.4f} | {frame.height:,} | {frame['copy'].mean():.4f} "
              f"| {model.keep_below} | {kept:,} | {share:.4f} | {first:.4f} |")  # fmt: skip
        if args.loo_dir is not None:
            args.loo_dir.mkdir(parents=True, exist_ok=True)
            path = args.loo_dir / f"copy_model-without-{name}.json"
            path.write_text(json.dumps(model.as_json(), indent=1) + "\n")
    model = fit(parts)
    print("\nall catalogs:", json.dumps(model.as_json()))
    if args.write:
        judgement.MODEL_FILE.write_text(json.dumps(model.as_json(), indent=1) + "\n")


if __name__ == "__main__":
    main()
