"""The filter half of hard-negative mining: a pure, vectorised function of a candidate table and
the positives' scores that stamps every candidate of every (query, positive) pair with the first
reason that drops it (`REASONS`, in precedence order) or keeps it.

Kept apart from retrieval (`pairsieve.mine.stage`) so that every filter and reason code can be
tested on hand-built score tables, and so that the same code judges every variant of `mine-eval`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.config import MineConfig
from pairsieve.core.hashing import avalanche64, column_keys
from pairsieve.mine import judgement
from pairsieve.text import attributes as text
from pairsieve.text import match

# Drop reasons in precedence order: a candidate gets the first that applies. Identity checks come
# first (click evidence before cluster evidence), then score filters, then the selection steps.
REASONS = (
    "same_listing",  # the pair's positive itself
    "other_positive",  # another listing clicked for the same query
    "same_product",  # a listing of the product of any of the query's positives
    "judged_copy",  # inside the margin, and judged a copy of the positive's product
    "query_cannot_tell",  # inside the margin, judged another product, but the query fits it too
    "margin",  # inside the margin, and the judgement cannot tell (or was not asked)
    "max_score",  # scores above mine.max_score
    "min_score",  # scores below mine.min_score
    "range_min",  # one of the first mine.range_min survivors, skipped on purpose
    "product_repeat",  # a second survivor of a product already represented
    "possible_duplicate",  # nothing in its title tells it apart from the positive (see config)
    "not_sampled",  # eligible, but beyond the num_negatives taken by `sampling`
)

MARGIN_LOOKAHEAD = 4  # candidates judged inside the margin per negative wanted
_PRODUCT = "_product"
_CANNOT_TELL = "_query_cannot_tell"
_POSITIVE_PRODUCT = "_positive_product"
NEGATIVE_COLUMNS = (S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID, S.RANK, S.SCORE,
                     S.POSITIVE_SCORE)  # fmt: skip
# Kept rows also carry the judgement's p_copy (null for a row it did not decide), so the stage
# writes what mining decided without judging its kept negatives again.
KEPT_COLUMNS = (*NEGATIVE_COLUMNS, S.P_COPY)


def reason_counts(dropped: pl.DataFrame) -> dict[str, int]:
    """Dropped rows per reason."""
    return dict(dropped[S.REASON].cast(pl.String).value_counts().iter_rows())


def with_ranks(candidates: pl.DataFrame) -> pl.DataFrame:
    """Add each candidate's 1-based rank in its query's list (score desc, ties by listing id)."""
    return (
        candidates.with_columns(pl.col(S.SCORE).cast(pl.Float32))
        .sort([S.QUERY, S.SCORE, S.NEGATIVE_LISTING_ID], descending=[False, True, False])
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over(S.QUERY).alias(S.RANK))
    )


def _margin_limit(weakest: pl.Expr, cfg: MineConfig) -> pl.Expr:
    """Highest score a candidate may have: the tightest of the configured margins.

    The relative margin subtracts |pos|*m, so it still lowers the limit when the weakest positive
    scores below zero (pos*(1-m) would raise it there).
    """
    limits = []
    if cfg.absolute_margin is not None:
        limits.append(weakest - cfg.absolute_margin)
    if cfg.relative_margin is not None:
        limits.append(weakest - weakest.abs() * cfg.relative_margin)
    return pl.min_horizontal(limits) if limits else pl.lit(float("inf"))


def _limits(positives: pl.DataFrame, cfg: MineConfig) -> pl.DataFrame:
    """(query, _limit): the highest score the margin lets a candidate of the query have."""
    weakest = pl.col(S.POSITIVE_SCORE).cast(pl.Float32).min()
    return positives.group_by(S.QUERY).agg(_margin_limit(weakest, cfg).alias("_limit"))


def score_ceilings(positives: pl.DataFrame, names: pl.Series, cfg: MineConfig) -> np.ndarray:
    """Per query of ``names`` (in order): the score above which no candidate can survive, the
    tighter of the margin limit and ``max_score``."""
    max_score = cfg.max_score if cfg.max_score is not None else float("inf")
    limits = names.to_frame(S.QUERY).join(
        _limits(positives, cfg), on=S.QUERY, how="left", maintain_order="left"
    )
    return np.minimum(limits["_limit"].fill_null(float("inf")).to_numpy(), max_score)


def short_queries(positives: pl.DataFrame, kept: pl.DataFrame, num_negatives: int) -> pl.Series:
    """Queries with at least one pair that kept fewer than ``num_negatives`` negatives."""
    per_pair = positives.select(S.QUERY, S.POSITIVE_LISTING_ID).join(
        kept.group_by(S.QUERY, S.POSITIVE_LISTING_ID).len("_n"),
        on=[S.QUERY, S.POSITIVE_LISTING_ID],
        how="left",
    )
    return per_pair.filter(pl.col("_n").fill_null(0) < num_negatives)[S.QUERY].unique()


def _random_keys(table: pl.DataFrame, seed: int) -> pl.Series:
    """A seeded pseudo-random uint64 per (query, positive, negative): depends on those ids and
    the seed only, so the sample does not change with input order or with other rows."""
    mixed = np.full(table.height, np.uint64(seed & 0xFFFF_FFFF_FFFF_FFFF), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for column in (S.QUERY, S.POSITIVE_LISTING_ID, S.NEGATIVE_LISTING_ID):
            mixed = avalanche64(mixed ^ column_keys(table[column]).to_numpy())
    return pl.Series("_key", mixed, dtype=pl.UInt64)


# Titles parsed by earlier calls, by normalised title: a listing is a candidate of many queries,
# and the same titles are parsed again by every partition, deepening round and duplicate check.
# Cleared when full: about 1.3 KB a title on the generated catalog's titles, ~0.35 GB full.
_PARSED: dict[str, text.Attributes] = {}
_PARSED_LIMIT = 1 << 18


def _parsed(title_norm: str) -> text.Attributes:
    """`text.extract_attributes` of a normalised title, from `_PARSED` when seen before."""
    found = _PARSED.get(title_norm)
    if found is None:
        if len(_PARSED) >= _PARSED_LIMIT:
            _PARSED.clear()
        found = _PARSED[title_norm] = text.extract_attributes(title_norm)
    return found


def _attributes_of(titles: pl.DataFrame, ids: pl.Series) -> dict[str, text.Attributes]:
    """The attributes of the titles of the listings ``ids`` (a listing without a title: those
    of ""), each extracted once. ``titles`` is (listing_id, title_norm) for the whole catalog;
    only the rows asked for become Python objects, so a call costs what it judges, not the
    catalog."""
    distinct = ids.unique()
    rows = titles.filter(pl.col(S.LISTING_ID).is_in(distinct.implode()))
    found = dict(rows.select(S.LISTING_ID, S.TITLE_NORM).iter_rows())
    return {key: _parsed(found.get(key, "")) for key in distinct.to_list()}


def _judged(
    table: pl.DataFrame, inside: pl.Expr, titles: pl.DataFrame, cfg: MineConfig
) -> tuple[pl.Series, pl.Series]:
    """``p_copy`` per row (`judgement`) of the candidates `inside` the margin, among the first
    `MARGIN_LOOKAHEAD * num_negatives` inside it of each pair by rank, null for the rest; and
    whether the judgement would keep the candidate but the query does not rule it out
    (`query_rules_out`)."""
    pair = [S.QUERY, S.POSITIVE_LISTING_ID]
    ahead = pl.int_range(pl.len()).over([*pair, inside], order_by=S.RANK)
    judged = (
        table.with_row_index("_row")
        .with_columns(ahead.alias("_ahead"))
        .filter(inside & (pl.col("_ahead") < MARGIN_LOOKAHEAD * cfg.num_negatives))
    )
    positive, negative = judged[S.POSITIVE_LISTING_ID], judged[S.NEGATIVE_LISTING_ID]
    attributes = _attributes_of(titles, pl.concat([positive, negative]))
    excess = judged.select(judgement.relative_excess(pl.col(S.SCORE), pl.col(S.POSITIVE_SCORE)))
    features = judgement.pair_features(
        [attributes[key] for key in positive],
        [attributes[key] for key in negative],
        excess.to_series().to_numpy(),
        judged["_ahead"].to_numpy(),
    )
    density = cfg.copy_density
    if density is None:  # a call outside a build: the table's own evidence
        density = judgement.smoothed_density(*_density_counts(table))
    model = judgement.load_copy_model(cfg.copy_model)
    rows, p_copy = judged["_row"].to_numpy(), model.probability(features, density)
    p = np.full(table.height, np.nan)
    p[rows] = p_copy
    cannot_tell = np.zeros(table.height, dtype=bool)
    if cfg.query_must_rule_out:  # asked only of the rows the judgement would keep
        keep = p_copy <= model.keep_below
        cannot_tell[rows[keep]] = ~query_rules_out(
            judged[S.QUERY].filter(keep), negative.filter(keep), attributes
        )
    p_series = pl.Series(S.P_COPY, p, dtype=pl.Float64).fill_nan(None)
    return p_series, pl.Series(_CANNOT_TELL, cannot_tell)


def query_rules_out(
    queries: pl.Series, candidates: pl.Series, titles: dict[str, text.Attributes]
) -> np.ndarray:
    """Per row: whether the query's own attributes conflict with the candidate's title, whose
    attributes ``titles`` holds by listing id (`match.conflict`: another model code, capacity,
    generation, number...). The titles' conflict says the candidate is another product than
    the positive; the query's says the shopper did not ask for it. Without the second, a query
    that names neither ("hp amd opteron") is answered by the candidate as well as by the
    listing it clicked, and a candidate it does not contradict is the likelier copy (10 to 20
    times as often on five labelled catalogs, benchmarks/RESULTS.md)."""
    said = {q: text.extract_attributes(text.normalize(q)) for q in queries.unique().to_list()}
    pairs = zip(queries, candidates, strict=True)
    return np.array([match.conflict(said[q], titles[c]) is not None for q, c in pairs], bool)


def _first_reason(inside: pl.Expr, cfg: MineConfig) -> pl.Expr:
    """The identity and score reasons in precedence order. A row `inside` the margin is dropped
    as a judged copy; judged another product, it is kept when the query rules it out and
    dropped as `query_cannot_tell` when not; the margin drops the undecided."""
    score = pl.col(S.SCORE)
    model = judgement.load_copy_model(cfg.copy_model)
    return (
        pl.when(pl.col(S.NEGATIVE_LISTING_ID) == pl.col(S.POSITIVE_LISTING_ID))
        .then(pl.lit("same_listing"))
        .when(pl.col("_clicked").fill_null(False))
        .then(pl.lit("other_positive"))
        .when(pl.col("_pos_product").fill_null(False))
        .then(pl.lit("same_product"))
        .when(inside & (pl.col(S.P_COPY) >= model.drop_above).fill_null(False))
        .then(pl.lit("judged_copy"))
        .when(pl.col(_CANNOT_TELL))
        .then(pl.lit("query_cannot_tell"))
        .when(inside & ~(pl.col(S.P_COPY) <= model.keep_below).fill_null(False))
        .then(pl.lit("margin"))
        .when(score > (cfg.max_score if cfg.max_score is not None else float("inf")))
        .then(pl.lit("max_score"))
        .when(score < (cfg.min_score if cfg.min_score is not None else float("-inf")))
        .then(pl.lit("min_score"))
    )


def _joined(
    candidates: pl.DataFrame, positives: pl.DataFrame, products: pl.DataFrame, cfg: MineConfig
) -> pl.DataFrame:
    """Every (pair, candidate) row with its rank, its product, the query's margin limit and
    whether the candidate is a clicked listing or of a positive's product."""
    product_of = products.select(S.LISTING_ID, pl.col(S.PRODUCT_ID).alias(_PRODUCT))
    ranked = candidates if S.RANK in candidates.columns else with_ranks(candidates)
    ranked = (
        ranked.with_columns(pl.col(S.SCORE).cast(pl.Float32))
        .join(product_of, left_on=S.NEGATIVE_LISTING_ID, right_on=S.LISTING_ID, how="left")
        .with_columns(pl.col(_PRODUCT).fill_null(pl.col(S.NEGATIVE_LISTING_ID)))
    )
    pos = positives.join(
        product_of, left_on=S.POSITIVE_LISTING_ID, right_on=S.LISTING_ID, how="left"
    ).with_columns(
        pl.col(_PRODUCT).fill_null(pl.col(S.POSITIVE_LISTING_ID)).alias(_POSITIVE_PRODUCT),
        pl.col(S.POSITIVE_SCORE).cast(pl.Float32),
    )
    clicked = pos.select(
        S.QUERY,
        pl.col(S.POSITIVE_LISTING_ID).alias(S.NEGATIVE_LISTING_ID),
        pl.lit(True).alias("_clicked"),
    ).unique()
    positive_products = pos.select(
        S.QUERY, pl.col(_POSITIVE_PRODUCT).alias(_PRODUCT), pl.lit(True).alias("_pos_product")
    ).unique()
    return (
        pos.select(S.QUERY, S.POSITIVE_LISTING_ID, S.POSITIVE_SCORE)
        .join(ranked, on=S.QUERY)
        .join(_limits(pos, cfg), on=S.QUERY)
        .join(clicked, on=[S.QUERY, S.NEGATIVE_LISTING_ID], how="left")
        .join(positive_products, on=[S.QUERY, _PRODUCT], how="left")
    )


_OTHER_CLICK = (pl.col(S.NEGATIVE_LISTING_ID) == pl.col(S.POSITIVE_LISTING_ID)) | pl.col(
    "_clicked"
).fill_null(False)
_ABOVE_LIMIT = pl.col(S.SCORE) > pl.col("_limit")


def _density_counts(table: pl.DataFrame) -> tuple[int, int]:
    """(candidates of the positive's product by the ids, candidates) above the margin limit of
    a `_joined` table; the clicked listings are not candidates."""
    above = table.filter(_ABOVE_LIMIT & ~_OTHER_CLICK)
    return int(above["_pos_product"].fill_null(False).sum()), above.height


def density_counts(
    candidates: pl.DataFrame, positives: pl.DataFrame, products: pl.DataFrame, cfg: MineConfig
) -> tuple[int, int]:
    """How many of the candidates inside the margin the product ids already know as copies of
    the positive's product, and how many there are: the build's evidence of how many copies
    its margin guards against (`judgement.smoothed_density`). Arguments as `filter_candidates`'s."""
    return _density_counts(_joined(candidates, positives, products, cfg))


def _stamp_filters(
    candidates: pl.DataFrame,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: MineConfig,
    titles: pl.DataFrame | None,
) -> pl.DataFrame:
    """Every (pair, candidate) row with the first score/identity reason that drops it, or null,
    and the ``p_copy`` of those the judgement decides (`cfg.judge_margin`, with `titles`)."""
    table = _joined(candidates, positives, products, cfg)
    identity = _OTHER_CLICK | pl.col("_pos_product").fill_null(False)
    inside = ~identity & _ABOVE_LIMIT
    if cfg.judge_margin and titles is not None:
        table = table.with_columns(*_judged(table, inside, titles, cfg))
    else:
        table = table.with_columns(
            pl.lit(None, pl.Float64).alias(S.P_COPY), pl.lit(False).alias(_CANNOT_TELL)
        )
    return table.with_columns(_first_reason(inside, cfg).alias(S.REASON)).drop(
        "_limit", "_clicked", "_pos_product", _CANNOT_TELL
    )


def possible_duplicates(
    positives: pl.Series, candidates: pl.Series, titles: pl.DataFrame, min_jaccard: float
) -> list[bool]:
    """Per (positive, candidate) listing id: True when no extracted attribute tells the two
    titles apart (`match.conflict`) and their word Jaccard reaches ``min_jaccard``."""
    attributes = _attributes_of(titles, pl.concat([positives, candidates]))
    flags = []
    for positive, candidate in zip(positives, candidates, strict=True):
        a, b = attributes[positive], attributes[candidate]
        flags.append(match.conflict(a, b) is None and match.jaccard(a, b) >= min_jaccard)
    return flags


def _guard_taken(table: pl.DataFrame, titles: pl.DataFrame, cfg: MineConfig) -> pl.DataFrame:
    """Stamp `possible_duplicate` on candidates about to be taken, refilling until each pair has
    num_negatives unflagged ones or runs out. Lazy because the check costs ~100 us per pair in
    Python: only ~num_negatives candidates per pair are ever checked, not all range_max. Each
    refill looks only at the unchecked survivors of pairs that lost one to the last check, so a
    round costs what it checks, not the whole table. ``table`` is sorted by pair."""
    pair = pl.struct(S.QUERY, S.POSITIVE_LISTING_ID).rle_id().alias("_pair")
    pending = (
        table.select(pair, pl.col(S.REASON).is_null().alias("_alive"))
        .with_row_index("_row")
        .filter("_alive")
        .select("_row", "_pair", pl.lit(cfg.num_negatives, pl.UInt32).alias("_need"))
    )
    flagged = np.zeros(table.height, dtype=bool)
    positives, candidates = table[S.POSITIVE_LISTING_ID], table[S.NEGATIVE_LISTING_ID]
    while pending.height:
        pending = pending.with_columns(
            (pl.int_range(pl.len(), dtype=pl.UInt32).over("_pair") < pl.col("_need")).alias("_todo")
        )
        todo = pending.filter("_todo")
        rows = todo["_row"]
        flags = pl.Series(
            possible_duplicates(
                positives.gather(rows),
                candidates.gather(rows),
                titles,
                cfg.duplicate_guard_jaccard or 0.0,
            )
        )
        flagged[rows.filter(flags).to_numpy()] = True
        lost = todo.filter(flags).group_by("_pair").len("_need")  # each needs that many more
        pending = (
            pending.filter(~pl.col("_todo"))
            .drop("_need", "_todo")
            .join(lost, on="_pair", maintain_order="left")
        )
    return table.with_columns(
        pl.when(pl.Series(flagged))
        .then(pl.lit("possible_duplicate"))
        .otherwise(pl.col(S.REASON))
        .alias(S.REASON)
    )


def _select(
    table: pl.DataFrame, titles: pl.DataFrame | None, cfg: MineConfig, seed: int
) -> pl.DataFrame:
    """Among survivors of each pair: skip range_min, one per product, guard against unclustered
    copies, then take num_negatives."""
    pair = [S.QUERY, S.POSITIVE_LISTING_ID]
    alive = pl.col(S.REASON).is_null()
    table = table.sort([*pair, S.RANK])
    table = table.with_columns(
        pl.when(alive & (pl.int_range(pl.len()).over([*pair, alive]) < cfg.range_min))
        .then(pl.lit("range_min"))
        .otherwise(pl.col(S.REASON))
        .alias(S.REASON)
    )
    table = table.with_columns(
        pl.when(alive & (pl.int_range(pl.len()).over([*pair, _PRODUCT, alive]) > 0))
        .then(pl.lit("product_repeat"))
        .otherwise(pl.col(S.REASON))
        .alias(S.REASON)
    )
    if cfg.sampling == "random":
        order = _random_keys(table, seed)
    else:
        order = table[S.RANK].cast(pl.UInt64)
    table = table.with_columns(order.alias("_order")).sort([*pair, "_order", S.NEGATIVE_LISTING_ID])
    if titles is not None and cfg.duplicate_guard_jaccard is not None:
        table = _guard_taken(table, titles, cfg)
    taken = pl.int_range(pl.len()).over([*pair, alive])
    return table.with_columns(
        pl.when(alive & (taken >= cfg.num_negatives))
        .then(pl.lit("not_sampled"))
        .otherwise(pl.col(S.REASON))
        .alias(S.REASON)
    ).drop("_order")


def filter_candidates(
    candidates: pl.DataFrame,
    positives: pl.DataFrame,
    products: pl.DataFrame,
    cfg: MineConfig,
    seed: int,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split every (pair, candidate) into kept negatives and dropped rows with a reason.

    Args:
        candidates: (query, negative_listing_id, score): the listings retrieved for each query.
        positives: (query, positive_listing_id, positive_score): one row per clicked pair; a query
            with several rows is one query with several positives.
        products: (listing_id, product_id[, title_norm]); a listing without a row is its own
            product. With `title_norm`, `cfg.duplicate_guard_jaccard` compares the titles of a
            positive and the candidates about to be taken.
        cfg: the `mine` section; seed: for `sampling = "random"`.

    Returns:
        (kept, dropped): kept has `KEPT_COLUMNS`, dropped `NEGATIVE_COLUMNS` plus `reason`; both
        sorted by (query, positive_listing_id, rank), where rank is the candidate's 1-based
        position in its query's retrieval list (score descending, ties by listing id).
    """
    titles = products if S.TITLE_NORM in products.columns else None
    stamped = _stamp_filters(candidates, positives, products, cfg, titles)
    table = _select(stamped, titles, cfg, seed)
    order = [S.QUERY, S.POSITIVE_LISTING_ID, S.RANK]
    kept = table.filter(pl.col(S.REASON).is_null()).select(KEPT_COLUMNS).sort(order)
    dropped = (
        table.filter(pl.col(S.REASON).is_not_null())
        .select(*NEGATIVE_COLUMNS, pl.col(S.REASON).cast(pl.Enum(REASONS)))
        .sort(order)
    )
    return kept, dropped
