"""pairsieve: clean contrastive training data from click logs and a listing catalog."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pairsieve")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"

_API = ("build", "audit", "BuildResult", "AuditResult")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    """`pairsieve.build` and `pairsieve.audit` (`pairsieve.api`), imported on first use: a bare
    `import pairsieve` stays light."""
    if name in _API:
        from pairsieve import api

        return getattr(api, name)
    raise AttributeError(f"module 'pairsieve' has no attribute {name!r}")
