"""pairsieve: clean contrastive training data from click logs and a listing catalog."""

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pairsieve")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

_API = ("build", "audit", "clean", "BuildResult", "AuditResult")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    """`pairsieve.build`, `pairsieve.audit` and `pairsieve.clean` (`pairsieve.api`), imported on
    first use: a bare
    `import pairsieve` stays light."""
    if name in _API:  # the top layer, re-exported by name: the package root imports nothing
        return getattr(importlib.import_module("pairsieve.api"), name)
    raise AttributeError(f"module 'pairsieve' has no attribute {name!r}")
