"""The package's layout: its parts, and imports that point one way, down the layers.

Every ``import`` of a graphpickle module in ``src/graphpickle`` counts, at module
level or inside a function (a lazy import is still a dependency); only imports
under ``if TYPE_CHECKING:`` do not, as they never run.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parent.parent / "src" / "graphpickle"

# Each part of the package, lowest first: a module may import modules of its own
# part and of lower layers, never of a higher one. Parts on one layer do not
# import each other.
LAYERS: list[dict[str, tuple[str, ...]]] = [
    {"foundation": ("errors", "_version", "_native", "_switches", "_cloudpickle_internals")},
    {"determinism": ("determinism",), "restricted": ("restricted",)},
    {"core": ("core",)},
    {"wire": ("wire",), "diagnostics": ("diagnostics",)},
    {"integrations": ("integrations",)},
    {"public API": ("",)},  # graphpickle/__init__.py
    {"command line": ("cli", "__main__")},
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)  # "" for graphpickle itself


MODULES = {_module_name(path): path for path in SOURCE.rglob("*.py")}
# Compiled from C, beside the Python they accelerate (their sources: *.c).
EXTENSIONS = {_module_name(path) for path in SOURCE.rglob("*.c")}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(importer: str, node: ast.ImportFrom) -> list[str]:
    """The graphpickle modules an ``from ... import ...`` statement imports."""
    if node.level == 0:
        if not (node.module or "").startswith("graphpickle"):
            return []
        base = (node.module or "").removeprefix("graphpickle").lstrip(".")
    else:
        package = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
        package = [p for p in package if p]
        if node.level > 1:
            package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([node.module] if node.module else [])])
    found = []
    for alias in node.names:
        submodule = f"{base}.{alias.name}".lstrip(".")
        found.append(submodule if submodule in MODULES or submodule in EXTENSIONS else base)
    return found


def _under_type_checking(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            for child in node.body:
                skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _imports() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _under_type_checking(tree)
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.ImportFrom):
                targets.update(_resolve(name, node))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("graphpickle."):
                        targets.add(alias.name.removeprefix("graphpickle."))
        targets.discard(name)
        graph[name] = {t for t in targets if t in MODULES or t in EXTENSIONS}
    return graph


GRAPH = _imports()


def _part(module: str) -> tuple[int, str]:
    top = module.split(".")[0]
    for level, parts in enumerate(LAYERS):
        for part, prefixes in parts.items():
            if top in prefixes:
                return level, part
    raise AssertionError(f"graphpickle.{module} belongs to no part of LAYERS: add it there")


@pytest.mark.once  # reads the sources: the same in every CI stage
def test_every_module_belongs_to_a_part():
    for module in MODULES:
        _part(module)


@pytest.mark.once  # reads the sources: the same in every CI stage
def test_imports_point_down_the_layers():
    wrong = []
    for module, targets in GRAPH.items():
        level, part = _part(module)
        for target in sorted(targets):
            target_level, target_part = _part(target)
            if target_part != part and target_level >= level:
                wrong.append(
                    f"graphpickle.{module} ({part}) imports graphpickle.{target} ({target_part})"
                )
    assert not wrong, "imports that do not point down the layers:\n" + "\n".join(wrong)


@pytest.mark.once  # reads the sources: the same in every CI stage
def test_no_import_cycle():
    # Depth-first search; a module met again while it is on the path closes a cycle.
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(GRAPH.get(module, ())):
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target]
                pytest.fail("import cycle: " + " -> ".join(f"graphpickle.{m}" for m in cycle))
            if state.get(target) is None:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)


@pytest.mark.once  # reads the sources: the same in every CI stage
def test_the_check_sees_lazy_imports_and_cycles(tmp_path):
    # The walk above must see an import inside a function, and a cycle.
    tree = ast.parse("def f():\n    from ..core import pickler\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    assert _resolve("determinism.canonical", node) == ["core.pickler"]
    saved = dict(GRAPH)
    try:
        GRAPH["core.policy"] = {*GRAPH["core.policy"], "core.pickler"}
        with pytest.raises(pytest.fail.Exception, match="import cycle"):
            test_no_import_cycle()
    finally:
        GRAPH.clear()
        GRAPH.update(saved)


def test_importing_the_library_loads_no_command_line_code():
    code = (
        "import sys, graphpickle, graphpickle.wire, graphpickle.integrations.dask_distributed, "
        "graphpickle.integrations.dask_tokenize, graphpickle.integrations.futures, "
        "graphpickle.integrations.ray\n"
        "print(sorted(m for m in sys.modules if m.startswith('graphpickle.cli')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
