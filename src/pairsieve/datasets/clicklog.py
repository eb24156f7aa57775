"""Derive a realistic (query, clicked listing) log from a labelled catalog.

Public benchmarks (PriceRunner, Abt-Buy) have products but no searches; the synthetic marketplace
needs the same click model. The model, documented in docs/data.md:

* popularity: product weights ``u ** -zipf_exponent`` (u uniform) follow Zipf's rank-frequency law
  with that exponent, capped at ``max_popularity``; search sessions per product are overdispersed
  (geometric) counts whose mean is ``queries_per_product * weight / E[weight]``;
* queries: each product has up to ``max_variants`` query strings derived from its canonical name the
  way shoppers type (lower case, brand or colour words dropped, truncated, reordered, "64gb" vs
  "64 gb", brand+model only, one typo); the plain name is the most frequent variant;
* clicks: a session shows the product's offers in a session-specific rotation (behind 0-2 other
  results) and clicks 1+ positions with examination probability falling as 1/position
  (position-based model, Craswell et al. 2008); repeated clicks on one listing add to ``clicks``.

Every random draw is a hash of (seed, product id, draw index), not a stream, so the log of a product
does not depend on which other products are in the catalog: generating a catalog in chunks gives the
same rows as generating it at once, and row order never changes the result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import polars as pl

from pairsieve import schemas as S
from pairsieve.core.hashing import seeded_keys, splitmix64
from pairsieve.errors import PairsieveError

log = logging.getLogger(__name__)

# English colour -> how sellers write it in German, French and Swedish (PriceRunner is Nordic/UK).
COLOURS: dict[str, tuple[str, str, str]] = {
    "black": ("schwarz", "noir", "svart"),
    "white": ("weiß", "blanc", "vit"),
    "silver": ("silber", "argent", "silver"),
    "space grey": ("spacegrau", "gris sidéral", "rymdgrå"),
    "blue": ("blau", "bleu", "blå"),
    "red": ("rot", "rouge", "röd"),
    "gold": ("gold", "or", "guld"),
    "green": ("grün", "vert", "grön"),
    "purple": ("lila", "violet", "lila"),
    "graphite": ("graphit", "graphite", "grafit"),
}
COLOUR_WORDS = sorted(
    {w for en, other in COLOURS.items() for name in (en, *other) for w in name.split()}
    | {"grey", "gray", "colour", "color"}
)
_UNITS = r"(gb|tb|mb|go|mah|w|mp|inch|zoll|cm|l|kg|ghz)"
_EPOCH = 1_704_067_200  # 2024-01-01 UTC: logs span the 90 days after it


# --- counter-based randomness: splitmix64 (Steele et al. 2014), vectorised over uint64 keys ----
def subkeys(keys: np.ndarray, index: np.ndarray | int) -> np.ndarray:
    """Independent child keys ``(key, index)``, e.g. the j-th session of a product."""
    index = np.broadcast_to(np.asarray(index, dtype=np.uint64), np.shape(keys))
    return splitmix64(np.asarray(keys, dtype=np.uint64) ^ splitmix64(index + np.uint64(1)))


def uniform(keys: np.ndarray, stream: int) -> np.ndarray:
    """One float64 in (0, 1) per key for draw ``stream``: (n,) float64."""
    salt = np.array([stream], dtype=np.uint64) * np.uint64(0x632BE59BD9B4E019)  # wraps
    bits = subkeys(keys, salt[0]) >> np.uint64(11)
    return (bits.astype(np.float64) + 0.5) / float(1 << 53)


def geometric(mean: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Geometric counts (support 0, 1, ...) with the given mean, by inversion: (n,) int64."""
    p = 1.0 / (1.0 + np.asarray(mean, dtype=np.float64))
    return np.floor(np.log(u) / np.log1p(-np.minimum(p, 1 - 1e-12))).astype(np.int64)


@dataclass(frozen=True)
class ClickModel:
    """Knobs of the click model; the defaults give ~1.5 clicks (~1.2 rows) per search session.

    ``zipf_exponent`` ~1 matches query-frequency laws in web and product search logs;
    ``position_shift_max`` other results may sit above the product's first offer.
    """

    zipf_exponent: float = 1.0
    max_popularity: float = 1_000.0
    max_variants: int = 4
    extra_clicks_mean: float = 0.5
    page_size: int = 10
    position_shift_max: int = 2
    days: int = 90


# --- products: offers and canonical names -------------------------------------------------------


def product_table(catalog: pl.DataFrame, truth_column: str) -> tuple[pl.DataFrame, pl.Series]:
    """Products sorted by id with ``start``/``offers`` into the returned sorted listing ids and a
    canonical ``name`` (see `canonical_names`).

    Raises:
        PairsieveError: ``missing_column`` when the catalog lacks the truth, id or title column.
    """
    for column in (truth_column, S.LISTING_ID, S.TITLE):
        if column not in catalog.columns:
            raise PairsieveError(
                "missing_column", "a labelled catalog is needed to derive clicks", column=column
            )
    listings = catalog.select(truth_column, S.LISTING_ID, S.TITLE).sort(truth_column, S.LISTING_ID)
    products = (
        listings.with_row_index("row")
        .group_by(truth_column, maintain_order=True)
        .agg(pl.col("row").first().alias("start"), pl.len().alias("offers"))
    )
    names = canonical_names(catalog, truth_column)
    return products.join(names, on=truth_column, how="left"), listings[S.LISTING_ID]


def canonical_names(catalog: pl.DataFrame, truth_column: str) -> pl.DataFrame:
    """(truth id, ``name``): the ``true_product_name`` column where given (PriceRunner's cluster
    label, the synthetic product name), else the product's most frequent title, ties going to
    the shortest, then the alphabetically first: what a shopper would call the product."""
    if S.TRUE_PRODUCT_NAME in catalog.columns and catalog[S.TRUE_PRODUCT_NAME].null_count() == 0:
        return catalog.group_by(truth_column).agg(pl.col(S.TRUE_PRODUCT_NAME).min().alias("name"))
    titled = (
        catalog.drop_nulls(S.TITLE)
        .group_by(truth_column, S.TITLE)
        .len()
        .sort(
            truth_column,
            "len",
            pl.col(S.TITLE).str.len_chars(),
            S.TITLE,
            descending=[False, True, False, False],
        )
        .group_by(truth_column, maintain_order=True)
        .agg(pl.col(S.TITLE).first().alias("name"))
    )
    if S.TRUE_PRODUCT_NAME not in catalog.columns:
        return titled
    given = catalog.group_by(truth_column).agg(pl.col(S.TRUE_PRODUCT_NAME).min().alias("given"))
    return given.join(titled, on=truth_column, how="full", coalesce=True).select(
        truth_column, pl.coalesce("given", "name").alias("name")
    )


# --- queries -------------------------------------------------------------------------------------


def query_variants(names: pl.Series, keys: np.ndarray, plain: np.ndarray) -> pl.Series:
    """A shopper-style query per (canonical name, variant key): (n,) String.

    ``plain`` rows (a product's most frequent query) are only lower-cased and unit-respaced; the
    others get each edit with its own probability, so one query may be truncated, typo'd and
    reordered at once.
    """
    tok = pl.col("name").str.split(" ")
    n_tok = tok.list.len()
    is_digit = tok.list.eval(pl.element().str.contains(r"\d"))
    brand_model = tok.list.head(
        pl.when(is_digit.list.any()).then(is_digit.list.arg_max() + 1).otherwise(2)
    )
    no_colour = tok.list.eval(
        pl.element().filter(~pl.element().str.to_lowercase().is_in(COLOUR_WORDS))
    )
    steps = [
        ("brand_model", brand_model),
        ("no_colour", no_colour),
        ("no_brand", pl.when(n_tok >= 3).then(tok.list.slice(1)).otherwise(tok)),
        ("truncate", tok.list.head(2 + (pl.col("u_cut") * (n_tok - 2).clip(0)).cast(pl.Int64))),
        ("reorder", pl.concat_list(tok.list.tail(1), tok.list.head(n_tok - 1))),
    ]
    out = _edit_frame(names, keys, plain)
    for flag, tokens in steps:
        out = out.with_columns(
            pl.when(pl.col(flag))
            .then(tokens.list.join(" "))
            .otherwise(pl.col("name"))
            .alias("name")
        )
    text = pl.col("name")
    out = out.with_columns(
        pl.when(pl.col("lower")).then(text.str.to_lowercase()).otherwise(text).alias("name")
    ).with_columns(
        pl.when(pl.col("glue"))
        .then(text.str.replace_all(rf"(?i)(\d)\s+{_UNITS}\b", "${1}${2}"))
        .when(pl.col("split"))
        .then(text.str.replace_all(rf"(?i)(\d){_UNITS}\b", "${1} ${2}"))
        .otherwise(text)
        .alias("name")
    )
    slipped = typo(text, pl.col("typo"), pl.col("u_typo"), pl.col("u_kind"))
    out = out.select(slipped.str.replace_all(r"\s+", " ").str.strip_chars().alias(S.QUERY))
    return out[S.QUERY]


# Probability of each edit for a non-plain query variant.
EDIT_RATES = {
    "brand_model": 0.15,
    "no_colour": 0.6,
    "no_brand": 0.3,
    "truncate": 0.2,
    "reorder": 0.12,
    "typo": 0.12,
}


def _edit_frame(names: pl.Series, keys: np.ndarray, plain: np.ndarray) -> pl.DataFrame:
    """The name plus, per row, which edits apply and the uniforms that parameterise them."""
    edits = {
        flag: (uniform(keys, i + 1) < rate) & ~plain
        for i, (flag, rate) in enumerate(EDIT_RATES.items())
    }
    return pl.DataFrame(
        {
            "name": names,
            **edits,
            "u_cut": uniform(keys, 20),
            "u_typo": uniform(keys, 21),
            "u_kind": uniform(keys, 22),
            "lower": uniform(keys, 23) < 0.85,
            "glue": uniform(keys, 24) < 0.25,
            "split": uniform(keys, 25) < 0.25,
        }
    )


def typo(text: pl.Expr, apply: pl.Expr, u_pos: pl.Expr, u_kind: pl.Expr) -> pl.Expr:
    """One keyboard slip where ``apply``: a swapped, dropped or doubled letter at an inner
    position chosen by ``u_pos`` in [0, 1). Digits are never touched: a slip in "S21" or "256"
    would name another real product and corrupt the ground truth."""
    n = text.str.len_chars()
    pos = (1 + u_pos * (n - 3).clip(0)).cast(pl.Int64)
    head, here, nxt = text.str.slice(0, pos), text.str.slice(pos, 1), text.str.slice(pos + 1, 1)
    swapped = pl.concat_str(head, nxt, here, text.str.slice(pos + 2))
    dropped = pl.concat_str(head, text.str.slice(pos + 1))
    doubled = pl.concat_str(head, here, text.str.slice(pos))
    slip = pl.when(u_kind < 0.4).then(swapped).when(u_kind < 0.7).then(dropped).otherwise(doubled)
    letters = here.str.contains(r"^\pL$") & ((u_kind >= 0.4) | nxt.str.contains(r"^\pL$"))
    return pl.when(apply & (n >= 5) & letters).then(slip).otherwise(text)


# --- sessions and clicks -------------------------------------------------------------------------


def _mean_popularity(exponent: float, cap: float) -> float:
    """E[min(u ** -exponent, cap)] for u ~ U(0, 1), so mean sessions equal queries_per_product."""
    a = cap ** (-1.0 / exponent)
    if abs(exponent - 1.0) < 1e-9:
        return float(np.log(cap) + 1.0)
    return float((1.0 - a ** (1.0 - exponent)) / (1.0 - exponent) + a * cap)


def expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(parent index, index within parent) for ``counts[i]`` children of each parent i."""
    parent = np.repeat(np.arange(counts.size), counts)
    starts = np.cumsum(counts) - counts
    return parent, np.arange(parent.size) - starts[parent]


def _log_uniform_int(n: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Integers in 1..n with P(i) = ln((i+1)/i) / ln(n+1): a 1/rank (Zipf-like) preference."""
    return np.minimum(np.floor(np.exp(u * np.log(n + 1.0))), n).astype(np.int64)


def derive_clicks(
    catalog: pl.DataFrame,
    truth_column: str = S.TRUE_PRODUCT_ID,
    seed: int = 0,
    queries_per_product: float = 4.0,
    model: ClickModel | None = None,
) -> pl.DataFrame:
    """A click log for a labelled catalog: one row per (session, clicked listing).

    Columns ``query``, ``listing_id``, ``clicks`` (>= 1), ``position`` (1-based rank shown),
    ``session_id``, ``ts`` (UTC datetime). ``queries_per_product`` is the mean number of search
    sessions per product; the Zipf popularity spreads them very unevenly (most products get none).
    Every clicked listing belongs to the product whose name the query came from.
    Same catalog (in any row order) and seed -> same rows.
    """
    model = model or ClickModel()
    products, listing_ids = product_table(catalog, truth_column)
    keys = seeded_keys(products[truth_column].to_list(), seed)
    n_sessions = _session_counts(keys, model, queries_per_product)
    n_variants = np.minimum(model.max_variants, 1 + np.floor(np.log2(1 + n_sessions)))
    product, j = expand(n_sessions)
    skeys = subkeys(keys[product], j)
    variant = _log_uniform_int(n_variants[product], uniform(skeys, 1)) - 1
    queries = _queries(products["name"], keys, product, variant)
    offers = products["offers"].to_numpy().astype(np.int64)[product]
    n_clicks = 1 + geometric(np.full(skeys.size, model.extra_clicks_mean), uniform(skeys, 2))
    session, c = expand(n_clicks)
    ckeys = subkeys(skeys[session], c)
    rank = _log_uniform_int(np.minimum(offers, model.page_size)[session], uniform(ckeys, 1))
    offset = np.floor(uniform(skeys, 3) * offers).astype(np.int64)
    shift = (
        _log_uniform_int(np.full(skeys.size, model.position_shift_max + 1), uniform(skeys, 4)) - 1
    )
    starts = products["start"].to_numpy().astype(np.int64)[product]
    row = starts[session] + (offset[session] + rank - 1) % offers[session]
    ts = _EPOCH + np.floor(uniform(skeys, 5) * model.days * 86_400).astype(np.int64)
    events = pl.DataFrame(
        {
            "session": session,
            S.QUERY: queries[session],
            S.LISTING_ID: listing_ids.gather(row),
            S.POSITION: rank + shift[session],
            S.SESSION_ID: pl.Series(skeys[session]).cast(pl.String),
            S.TS: ts[session] + 20 * c,
        }
    )
    clicks = _aggregate(events)
    log.info(
        "derived %d click rows (%d clicks in %d sessions)", clicks.height, events.height, skeys.size
    )
    return clicks


def _session_counts(keys: np.ndarray, model: ClickModel, queries_per_product: float) -> np.ndarray:
    """(n,) search sessions of each product: geometric around its Zipf popularity, scaled so the
    mean over products is ``queries_per_product``."""
    weight = np.minimum(uniform(keys, 100) ** -model.zipf_exponent, model.max_popularity)
    mean = (
        queries_per_product * weight / _mean_popularity(model.zipf_exponent, model.max_popularity)
    )
    return geometric(mean, uniform(keys, 101))


def _queries(
    names: pl.Series, keys: np.ndarray, product: np.ndarray, variant: np.ndarray
) -> pl.Series:
    """Query text per session: each distinct (product, variant) is generated once."""
    pairs = pl.DataFrame({"p": product, "v": variant})
    distinct = pairs.unique(maintain_order=True)
    p, v = distinct["p"].to_numpy(), distinct["v"].to_numpy()
    texts = query_variants(names.gather(p), subkeys(keys[p], v + 1_000), v == 0)
    return pairs.join(
        distinct.with_columns(texts), on=["p", "v"], how="left", maintain_order="left"
    )[S.QUERY]


def _aggregate(events: pl.DataFrame) -> pl.DataFrame:
    """Repeated clicks on one listing within a session become one row with a count."""
    return (
        events.group_by("session", S.LISTING_ID, maintain_order=True)
        .agg(
            pl.col(S.QUERY).first(),
            pl.len().cast(pl.Int64).alias(S.CLICKS),
            pl.col(S.POSITION).first().cast(pl.Int64),
            pl.col(S.SESSION_ID).first(),
            pl.col(S.TS).min(),
        )
        .sort("session", S.TS, S.POSITION, maintain_order=True)
        .select(
            S.QUERY,
            S.LISTING_ID,
            S.CLICKS,
            S.POSITION,
            S.SESSION_ID,
            pl.from_epoch(S.TS, time_unit="s").dt.replace_time_zone("UTC").alias(S.TS),
        )
    )
