"""The folder tree is the architecture: layers import downwards only, and no module imports itself
back through others. Every import counts, including the ones inside functions."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGE = REPO / "src" / "pairsieve"

# Lower numbers are lower layers; a module may import its own layer or lower ones.
LAYERS = {
    "pairsieve": 0,  # the package's __init__ (its version)
    "pairsieve.errors": 0,
    "pairsieve.schemas": 0,
    "pairsieve.config": 0,
    "pairsieve.config_docs": 0,
    "pairsieve.config_overrides": 0,
    "pairsieve.core": 1,
    "pairsieve.text": 2,
    "pairsieve.vectors": 2,
    "pairsieve.datasets": 2,
    "pairsieve.pair_model": 2,
    "pairsieve.labels": 2,  # the label file and its estimates, shared by cluster and report
    "pairsieve.ingest": 3,
    "pairsieve.cluster": 3,
    "pairsieve.mine": 3,
    "pairsieve.shards": 3,
    "pairsieve.report": 3,
    "pairsieve.audits": 4,  # a composite: ingest, cluster and report over a dataset made elsewhere
    "pairsieve.cleaning": 4,  # a composite: the audit and the miner repair a dataset made elsewhere
    "pairsieve.training": 4,
    "pairsieve.experiment": 5,
    "pairsieve.orchestration": 4,
    "pairsieve.cli": 6,
    "pairsieve.api": 6,  # build, audit and clean from Python: the same flows as the CLI
    "pairsieve.terminal": 6,
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    """The layer of a module: its longest prefix in LAYERS."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The pairsieve modules ``path`` imports (``from pairsieve.x import y`` counts as
    ``pairsieve.x.y`` when that is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("pairsieve")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not node.module.startswith("pairsieve"):
                continue
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
    return found & modules


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) - {module_name(p)} for p in paths}


def test_every_module_is_in_a_layer_and_imports_only_downwards(graph):
    upward = [
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer(target) > layer(module)
    ]
    assert upward == []


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_no_import_cycle(graph):
    assert find_cycle(graph) is None


def test_the_cycle_finder_finds_a_planted_cycle():
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(planted) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _compiled(node: ast.FunctionDef) -> bool:
    """A numba kernel: a flat loop is its clearest form, so it is exempt from the length limit."""
    return any("njit" in ast.unparse(d) or "numba" in ast.unparse(d) for d in node.decorator_list)


def test_modules_and_functions_stay_small():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{module_name(path)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _compiled(node):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{module_name(path)}.{node.name}: {length} lines")
    assert too_long == []


def package_of(module: str) -> str:
    """The top-level package (or module) of a pairsieve module: `pairsieve.cluster.judge` is in
    `pairsieve.cluster`."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_packages(graph):
    """Modules may avoid a cycle while their packages form one (cluster imports labels, labels
    imports cluster): the packages then cannot be read, tested or layered apart."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        here = package_of(module)
        packages.setdefault(here, set()).update(package_of(t) for t in targets)
        packages[here].discard(here)
    assert find_cycle(packages) is None


STAGE_PACKAGES = {"pairsieve.ingest", "pairsieve.cluster", "pairsieve.mine", "pairsieve.shards",
                  "pairsieve.report"}  # fmt: skip


def stage_crossings(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(module, target) imports from one stage package into another."""
    return {
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if package_of(module) in STAGE_PACKAGES
        and package_of(target) in STAGE_PACKAGES
        and package_of(module) != package_of(target)
    }


def test_stages_meet_only_through_their_files_and_the_layers_below(graph):
    """A stage reads what another wrote from the build folder; what two stages share (the pair
    model, the label file, the schemas) sits in a layer below both."""
    assert stage_crossings(graph) == set()


def test_the_stage_check_sees_a_planted_crossing(graph):
    planted = {**graph, "pairsieve.shards.x": {"pairsieve.cluster.stage", "pairsieve.core.io"}}
    assert stage_crossings(planted) - stage_crossings(graph) == {
        ("pairsieve.shards.x", "pairsieve.cluster.stage")
    }


def modules_in_tree(page: str) -> set[str]:
    """The modules the tree on docs/architecture.md names, as paths under src/pairsieve: a
    top-level entry, or a package's child (several on one line when they share a description)."""
    named, package = set(), None
    for line in page.splitlines():
        found = re.match(r"^([│ ]*)[├└]── (.*)$", line)
        if not found:
            continue
        depth, words = len(found.group(1)) // 4, found.group(2).split()
        files = list(itertools.takewhile(lambda w: w.endswith(".py"), words))
        if depth == 0:
            package = words[0].rstrip("/") if words[0].endswith("/") else None
            named.update(files)
        elif depth == 1 and package:
            named.update(f"{package}/{name}" for name in files)
    return named


def test_the_architecture_page_names_every_module_and_no_other():
    page = (REPO / "docs" / "architecture.md").read_text()
    modules = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    }
    named = modules_in_tree(page)
    assert sorted(modules - named) == [], "modules missing from docs/architecture.md's tree"
    assert sorted(named - modules) == [], "docs/architecture.md names modules that do not exist"


def test_the_tree_reader_sees_a_missing_module():
    page = "├── cli/   the command line\n│   ├── app.py   the app\n├── errors.py   errors\n"
    assert modules_in_tree(page) == {"cli/app.py", "errors.py"}
    assert "cli/experiment.py" not in modules_in_tree(page)
