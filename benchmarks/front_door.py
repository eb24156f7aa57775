"""Measure a command as a user runs it, usually `pairsieve build`: wall time, CPU time and peak
memory of its whole process tree (the CLI, Prefect's ephemeral API server, forked or Dask
workers), plus the per-stage times the build folder records.

The tree is sampled every ``--interval`` seconds (`harness.process_tree`, which says what the
memory and CPU figures mean).

    .venv/bin/python benchmarks/front_door.py --json FILE [--build DIR] -- pairsieve build ...

With ``--build``, the stage times recorded in ``DIR/*/stage.json`` are added to the figures.
Every line the command prints is passed through, prefixed with the seconds since its start.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.process_tree import measure
from harness.stages import stage_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, required=True, help="Where to write the figures.")
    parser.add_argument("--build", type=Path, help="The build folder, for its stage times.")
    parser.add_argument("--interval", type=float, default=0.5, help="Seconds between samples.")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    figures = measure(command, args.interval)
    if args.build is not None and args.build.exists():
        figures["stage_s"] = stage_seconds(args.build)
    args.json.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))
    sys.exit(figures["returncode"])


if __name__ == "__main__":
    main()
