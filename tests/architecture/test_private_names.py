"""No product module uses another module's private name (`from x import _y`, `x._y`): what two modules
share is public (named without the underscore, with a docstring), so a private helper can change without
breaking a caller its author cannot see. Pure static check: no database."""

from __future__ import annotations

import ast

from tests.architecture.test_imports import PACKAGES, ROOT, module_of, production_files

DJANGO_MODEL_API = frozenset({"_meta", "_default_manager", "_base_manager", "_state"})
"""Underscore names that are Django's public model API (`Model._meta` is documented), not private."""


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in DJANGO_MODEL_API


def _resolved(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute module a `from ... import` names (relative ones resolved against `module`)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def cross_module_private_uses(source: str, module: str, filename: str) -> list[str]:
    """`filename:line name` for each private name of another of our modules that `module` imports
    (`from x import _y`) or reads off an imported name (`x._y`)."""
    is_package = filename.endswith("__init__.py")
    tree = ast.parse(source, filename=filename)
    imported: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source_module = _resolved(node, module, is_package)
            if source_module.split(".")[0] not in PACKAGES or source_module == module:
                continue
            for alias in node.names:
                if _is_private(alias.name):
                    found.append(
                        f"{filename}:{node.lineno} from {source_module} import {alias.name}"
                    )
                imported.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    imported.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported
            and _is_private(node.attr)
        ):
            found.append(f"{filename}:{node.lineno} {node.value.id}.{node.attr}")
    return sorted(found)


def test_no_product_module_uses_another_modules_private_name() -> None:
    found = [
        line
        for path in production_files()
        for line in cross_module_private_uses(
            path.read_text(), module_of(path), str(path.relative_to(ROOT))
        )
    ]
    assert found == [], "make these public (or move them where they are used):\n" + "\n".join(found)


def test_the_check_sees_private_imports_and_attributes_of_other_modules() -> None:
    source = (
        "from quotas.services import _audit, create_quota\n"
        "from . import _helpers\n"
        "from .planner import _order\n"
        "from scheduling.telemetry import synthetic\n"
        "import quotas.services as qs\n"
        "from quotas.models import Quota\n"
        "def _own(): return 1\n"
        "x = synthetic._unit('a') + qs._notify + _own() + synthetic.unit_draw('b')\n"
        "fields = Quota._meta.fields\n"
        "name = create_quota.__name__\n"
    )
    assert cross_module_private_uses(source, "core.placement.replay", "r.py") == [
        "r.py:1 from quotas.services import _audit",
        "r.py:2 from core.placement import _helpers",
        "r.py:3 from core.placement.planner import _order",
        "r.py:8 qs._notify",
        "r.py:8 synthetic._unit",
    ]
    same_module = "from quotas.services import _audit\n"
    assert cross_module_private_uses(same_module, "quotas.services", "s.py") == []
