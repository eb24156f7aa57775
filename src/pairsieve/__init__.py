"""pairsieve: clean contrastive training data from click logs and a listing catalog."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pairsieve")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0"
