"""Fitting the shipped judgement of mined candidates (`copy_model.json`) from labelled builds.

The rows: from a default build of each labelled catalog, every candidate inside the margin that
mining would judge (the first `filters.MARGIN_LOOKAHEAD * num_negatives` of a pair), labelled a
copy when its true product is the positive's. Its features are `judgement.FEATURES`; its offset
the logit of the build's copy density (`filters.density_counts` over the build's first-round
candidates). A logistic regression (L2 1e-3; each catalog weighs the same in the fit) gives the
weights.

`keep_below` is chosen on the fitted catalogs alone: the largest probability on a fine grid up to
which the first kept candidate of a pair (the one a row with one negative trains on) is a copy at
most `TARGET` of the time on every one of them, at that step and every step below it. The grid is
fine because one step decides how many of a catalog's hard negatives survive; the steps below must
pass too because a small catalog's share swings by one candidate, and a threshold that passes above
one that failed is such a swing, not evidence. `drop_above` is 0.5: a candidate more likely a copy
than not. `leave_one_out` fits each catalog's model on the others alone, so a catalog is never
judged by a model that saw it (`benchmarks/fit_copy_model.py` measures and writes them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MineConfig
from pairsieve.core import logistic
from pairsieve.mine import filters, judgement
from pairsieve.mine.stage import listing_products
from pairsieve.text import attributes as text

GRID = tuple(round(0.0025 * step, 4) for step in range(1, 49))  # 0.0025 to 0.12
TARGET = 0.02  # copies among the candidates the judgement keeps
DROP_ABOVE = 0.5
L2 = 1e-3  # the loss adds L2 * sum(weight ** 2) over the features' weights


def candidates_and_positives(rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What mining filtered, from its kept and dropped rows together: (candidates, positives),
    each once, candidates in (query, rank) order and positives in (query, positive) order, as
    the filters take them."""
    candidates = rows.select(S.QUERY, S.NEGATIVE_LISTING_ID, S.SCORE, S.RANK).unique()
    positives = rows.select(S.QUERY, S.POSITIVE_LISTING_ID, S.POSITIVE_SCORE).unique()
    return candidates.sort(S.QUERY, S.RANK), positives.sort(S.QUERY, S.POSITIVE_LISTING_ID)


def mined_inputs(build: Path) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What mining filtered in a build, from its files: (candidates, positives, listing
    products with titles, listings)."""
    listings = pl.read_parquet(build / "ingest" / S.LISTINGS_FILE)
    products = pl.read_parquet(build / "cluster" / S.PRODUCTS_FILE)
    kept = pl.read_parquet(build / "mine" / S.NEGATIVES_FILE)
    dropped = pl.read_parquet(build / "mine" / S.NEGATIVES_DROPPED_FILE).drop(S.REASON)
    candidates, positives = candidates_and_positives(pl.concat([kept, dropped]))
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
    theta = logistic.fit(x, y, w, logistic.Penalty.ridge(len(names), 2 * L2), offset)
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
    """The largest grid probability up to which the first kept candidates of the pairs are at most
    `TARGET` copies on every catalog in ``parts``, at it and at every step below."""
    best = GRID[0]
    for t in GRID:
        if not all(kept_share(model, f, d, t)[2] <= TARGET for f, d in parts.values()):
            break
        best = t
    return best


def leave_one_out(parts: dict[str, tuple[pl.DataFrame, float]]) -> dict[str, judgement.CopyModel]:
    """Per catalog, the model and `keep_below` fitted and chosen on the other catalogs alone."""
    return {name: fit({k: v for k, v in parts.items() if k != name}) for name in parts}
