"""What the benchmark loaders share: finding a data set's files and turning match lists into
product ids."""

from __future__ import annotations

from pathlib import Path

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
