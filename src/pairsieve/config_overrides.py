"""How a dotted override lands in a config tree, and how a rejected config names its key.

A user sets a knob as ``cluster.knn_k=30`` (``--set``, or a deployment's parameters) or in a TOML
file; when validation rejects it, the error names the dotted key, where it was set (the file or
the option) and, for a renamed key, its new name.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from pairsieve.errors import PairsieveError


def set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``value`` at the dotted key ``dotted`` of the nested ``tree``, making sections."""
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise PairsieveError("bad_config", f"{part!r} is not a section", knob=dotted)
        node = child
    node[parts[-1]] = value


# Renamed keys: a config still using the old name is told the new one.
RENAMED = {"cluster.verifier": "cluster.judge", "knn.shard_vectors": "knn.slice_vectors"}


def validation_error(
    exc: ValidationError, source: str, overrides: dict[str, Any], changes_from: str
) -> PairsieveError:
    """The first error, naming its key and where it was set (in ``overrides`` or ``source``)."""
    first = exc.errors()[0]
    key = ".".join(str(p) for p in first["loc"])
    source = changes_from if key in overrides else source
    message = "unknown key" if first["type"] == "extra_forbidden" else first["msg"]
    if key in RENAMED:
        message = f"renamed: use {RENAMED[key]}"
    return PairsieveError(
        "bad_config", f"{message} (value {first.get('input')!r})", file=source, knob=key
    )
