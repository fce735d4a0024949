"""The module structure the build enforces beyond .importlinter: no import circle between modules, and no
module importing another app inside a function (the way to hide an upward or circular dependency from
the linter and the reader). Pure static checks: no database."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "portal", "quotas", "scheduling", "codespaces", "dashboards")


def production_files() -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).parts
            if "tests" in parts or "migrations" in parts:
                continue
            yield path


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _app_of(module: str) -> str:
    """The Django app a module belongs to (scheduling.telemetry is an app of its own)."""
    if module == "scheduling.telemetry" or module.startswith("scheduling.telemetry."):
        return "scheduling.telemetry"
    return module.split(".")[0]


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:  # relative: same package by definition
        return []
    return [node.module or ""]


def function_level_imports_of_other_apps(source: str, module: str, filename: str) -> list[str]:
    """`filename:line function() imports other.module` for each import of another app inside a function
    of `module` (AppConfig.ready in an apps.py excepted: Django's place to wire apps together once the
    models exist)."""
    own = _app_of(module)
    found = []
    for function in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if module.endswith(".apps") and function.name == "ready":
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for imported in _imported_modules(node):
                if imported.split(".")[0] in PACKAGES and _app_of(imported) != own:
                    found.append(f"{filename}:{node.lineno} {function.name}() imports {imported}")
    return found


def test_no_function_imports_another_app() -> None:
    found = [
        line
        for path in production_files()
        for line in function_level_imports_of_other_apps(
            path.read_text(), module_of(path), str(path.relative_to(ROOT))
        )
    ]
    assert found == [], "import these at module level (or invert the dependency):\n" + "\n".join(
        found
    )


def test_the_check_sees_an_import_of_another_app_inside_a_function() -> None:
    source = (
        "from scheduling.models import Node\n"
        "def f():\n"
        "    from scheduling.models import Workload\n"
        "    from quotas.resources import Side\n"
        "    return Workload, Side\n"
        "class QuotasConfig:\n"
        "    def ready(self):\n"
        "        from scheduling.observers import register_workload_observer\n"
    )
    assert function_level_imports_of_other_apps(source, "quotas.usage", "u.py") == [
        "u.py:3 f() imports scheduling.models",
        "u.py:8 ready() imports scheduling.observers",
    ]
    assert function_level_imports_of_other_apps(source, "quotas.apps", "a.py") == [
        "a.py:3 f() imports scheduling.models"
    ]


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import each other, directly or through others (Tarjan's strongly
    connected components with more than one module), each sorted, production modules only."""
    modules = sorted(m for m in graph.modules if ".tests" not in m and ".migrations" not in m)
    wanted = set(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:  # iterative, so deep import chains cannot overflow the stack
        nonlocal counter
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root) & wanted)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    imported = graph.find_modules_directly_imported_by(child) & wanted
                    work.append((child, iter(sorted(imported))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_import_cycle_between_modules() -> None:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_circle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "a.one", "a.two", "a.three"):
        graph.add_module(module)
    graph.add_import(importer="a.one", imported="a.two")
    graph.add_import(importer="a.two", imported="a.one")
    graph.add_import(importer="a.three", imported="a.one")
    assert import_cycles(graph) == [["a.one", "a.two"]]
