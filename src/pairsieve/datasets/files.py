"""What the benchmark loaders share: finding a data set's files and turning match lists into
product ids."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pairsieve import schemas as S
from pairsieve.errors import PairsieveError


def find_file(root: Path, name: str, folder: str) -> Path:
    """``root/name`` or ``root/folder/name`` (root may be the data root or the data set folder).

    Raises:
        PairsieveError: ``missing_file`` when neither exists.
    """
    for candidate in (Path(root) / name, Path(root) / folder / name):
        if candidate.is_file():
            return candidate
    raise PairsieveError(
        "missing_file", f"{name} not found under {root} (or {folder}/ below it)", file=str(root)
    )


def components(nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, str]:
    """Union-find: each node -> the smallest node id of its connected component (a match list
    names pairs; a product is every record its matches connect)."""
    parent = {node: node for node in nodes}

    def root(node: str) -> str:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return {node: root(node) for node in nodes}


def with_match_products(catalog: pl.DataFrame, left: pl.Series, right: pl.Series) -> pl.DataFrame:
    """``catalog`` with ``true_product_id``: the smallest listing id of each listing's component
    in the graph of matched pairs (``left[i]``, ``right[i]``); a pair naming a listing the
    catalog lacks is left out, and an unmatched listing is its own product."""
    ids = catalog[S.LISTING_ID].to_list()
    known = set(ids)
    edges = [
        (a, b)
        for a, b in zip(left.to_list(), right.to_list(), strict=True)
        if a in known and b in known
    ]
    product_of = components(ids, edges)
    return catalog.with_columns(
        pl.Series(S.TRUE_PRODUCT_ID, [product_of[i] for i in ids], dtype=pl.String)
    )
