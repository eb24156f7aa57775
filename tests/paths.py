"""Where the tests find the repository, its bundled sample and the public benchmark data."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "data" / "sample"
SHARED_DATA = REPO.parent / "shared" / "data"
