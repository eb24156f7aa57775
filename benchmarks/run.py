"""Every benchmark from one command: what each measures, and a way to run it.

    .venv/bin/python benchmarks/run.py              # lists the benchmarks, one line each
    .venv/bin/python benchmarks/run.py NAME ARGS    # runs benchmarks/NAME.py with ARGS

A benchmark run this way runs exactly as `python benchmarks/NAME.py ARGS` (its folder on the path,
its own options and `--help`), so the commands written in RESULTS.md hold either way.
"""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benchmarks() -> dict[str, str]:
    """Each benchmark script's name and the first line of its docstring (what it measures)."""
    found = {}
    for path in sorted(HERE.glob("*.py")):
        if path.stem == Path(__file__).stem:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        found[path.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return found


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    known = benchmarks()
    if not argv or argv[0] in ("-h", "--help"):
        width = max(map(len, known))
        print(__doc__.splitlines()[0], end="\n\n")
        for name, line in known.items():
            print(f"{name:<{width}}  {line}")
        return
    name, rest = argv[0], argv[1:]
    if name not in known:
        raise SystemExit(f"no benchmark {name!r}: `python benchmarks/run.py` lists them")
    script = HERE / f"{name}.py"
    sys.argv = [str(script), *rest]
    sys.path.insert(0, str(HERE))
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
