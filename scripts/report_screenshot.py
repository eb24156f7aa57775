"""Screenshot of a build's report as a reader first sees it (1280 x 900 px), for the README.

    .venv/bin/python scripts/report_screenshot.py runs/demo docs/report.png

Uses Debian's headless Chromium (`make test` installs it); the page needs no network.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build", type=Path, help="A published build folder (pairsieve demo).")
    parser.add_argument("png", type=Path, help="Where to write the screenshot.")
    args = parser.parse_args()
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    page = (args.build / "report" / "report.html").resolve()
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(  # noqa: S603 - a local browser on a local file
            [
                chromium,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--window-size=1280,900",
                f"--screenshot={args.png.resolve()}",
                page.as_uri(),
            ],
            check=True,
            capture_output=True,
        )


if __name__ == "__main__":
    main()
