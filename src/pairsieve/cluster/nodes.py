"""A catalog's nodes: one per distinct normalised title (and brand), the unit clustering works on.

Listings with the same normalised title are one node, so identical text is judged once; a title
that names no product (`INFORMATIVE` false: no code, nor enough cues) keys on its own listing id
instead, as identical generic text ("washing machine") is no evidence of one product.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain

import polars as pl

from pairsieve import schemas as S
from pairsieve.cluster import candidates
from pairsieve.cluster.judge import INFORMATIVE
from pairsieve.core.parallel import in_processes
from pairsieve.errors import PairsieveError
from pairsieve.text import attributes as text

_NODE = candidates.NODE
_KEY = "_key"


def prepare(
    listings: pl.DataFrame,
    attributes: dict[str, text.Attributes] | None = None,
    rare_word_share: float | None = None,
) -> pl.DataFrame:
    """Listings sorted by id with ``title_norm`` and a node index (one per distinct title).

    ``attributes``, when given, is filled with `text.extract_attributes` of every distinct
    ``title_norm``, so the caller need not extract them again. With ``rare_word_share``
    (`cluster.rare_word_share`), a title with two words rare in this catalog is informative.

    Raises:
        PairsieveError: ``missing_column`` when ``listing_id`` or ``title`` is absent.
    """
    for column in S.CATALOG_REQUIRED:
        if column not in listings.columns:
            raise PairsieveError("missing_column", "catalog lacks a required column", column=column)
    frame = listings.with_columns(pl.col(S.LISTING_ID).cast(pl.String))
    if S.TITLE_NORM not in frame.columns:
        frame = frame.with_columns(text.normalize_expr(pl.col(S.TITLE)).alias(S.TITLE_NORM))
    frame = frame.select(S.LISTING_ID, S.TITLE, S.TITLE_NORM, text.brand_expr(frame.columns))
    frame = frame.sort(S.LISTING_ID)
    distinct = frame.select(pl.col(S.TITLE_NORM).unique())
    attributes = {} if attributes is None else attributes
    titles = [t for t in distinct[S.TITLE_NORM].to_list() if t not in attributes]
    found = in_processes(
        lambda lo, hi: [text.extract_attributes(t) for t in titles[lo:hi]], len(titles)
    )
    attributes.update(zip(titles, chain.from_iterable(found), strict=True))
    named = distinct[S.TITLE_NORM].to_list()
    informative = [attributes[t].informative for t in named]
    if rare_word_share is not None:
        rare = _rare_words([attributes[t].words for t in named], rare_word_share)
        by_words = [len(attributes[t].words & rare) >= 2 for t in named]
        informative = [a or b for a, b in zip(informative, by_words, strict=True)]
    distinct = distinct.with_columns(pl.Series(INFORMATIVE, informative, dtype=pl.Boolean))
    frame = frame.join(distinct, on=S.TITLE_NORM, how="left")
    # Low-information titles key on their own listing id: identical text is no evidence.
    key = (
        pl.when(pl.col(INFORMATIVE))
        .then(pl.concat_str([pl.col(S.TITLE_NORM), pl.col(S.BRAND)], separator="\x1f"))
        .otherwise(pl.concat_str([pl.lit("\x00"), pl.col(S.LISTING_ID)]))
    )
    frame = frame.with_columns(key.alias(_KEY))
    node_keys = frame.select(pl.col(_KEY).unique().sort()).with_row_index(_NODE)
    return frame.join(node_keys, on=_KEY, how="left").drop(_KEY).sort(S.LISTING_ID)


def _rare_words(titles: list[frozenset[str]], share: float) -> frozenset[str]:
    """The words held by at most ``share`` of the distinct titles, and by at least two: a word
    of one title alone says nothing of another."""
    df = Counter(w for words in titles for w in words)
    most = max(2, int(share * len(titles)))
    return frozenset(w for w, n in df.items() if 2 <= n <= most)


def node_table(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per node in node order: representative (smallest) listing, title, brand, count."""
    return (
        frame.group_by(_NODE)
        .agg(
            pl.col(S.LISTING_ID).first(),
            pl.col(S.TITLE).first(),
            pl.col(S.TITLE_NORM).first(),
            pl.col(S.BRAND).first(),
            pl.col(INFORMATIVE).first(),
            pl.len().alias("count"),
        )
        .sort(_NODE)
    )


def nodes_of(
    listings: pl.DataFrame, max_bucket: int, rare_word_share: float | None = None
) -> tuple[pl.DataFrame, pl.DataFrame, list[text.Attributes]]:
    """The listings with their node (`prepare`), the nodes (`node_table`) and each node's
    attributes without the codes found on more than ``max_bucket`` titles."""
    by_title: dict[str, text.Attributes] = {}
    frame = prepare(listings, by_title, rare_word_share)
    nodes = node_table(frame)
    attrs = [by_title[t] for t in nodes[S.TITLE_NORM].to_list()]
    del by_title
    common = candidates.common_codes(attrs, max_bucket)
    return frame, nodes, [a.without_codes(common) for a in attrs]
