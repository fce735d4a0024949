"""Issue 16: redirect after POST everywhere. A view that shows a success message redirects (so a reload
does not post again and the message shows once, on the page it leads to; `static/portal/js/app.js`
keeps it through a page's own auto-refresh). Checked on the source: after every `messages.success(...)`
in a view module, the next `return` of its block (or the view's last statement) is `redirect(...)`."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("portal", "quotas", "codespaces", "scheduling", "dashboards")


def _view_modules() -> list[Path]:
    return sorted(
        path
        for app in APPS
        for path in (ROOT / app).rglob("*.py")
        if "tests" not in path.parts and path.name != "admin.py" and "views" in path.name
    )


def _is_call_to(node: ast.AST, name: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == name) or (
        isinstance(func, ast.Attribute) and func.attr == name
    )


def _returns_redirect(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Return) and bool(
        statement.value and _is_call_to(statement.value, "redirect")
    )


def _success_without_redirect(tree: ast.AST) -> list[int]:
    """Line numbers of `messages.success(...)` not followed by `return redirect(...)`: the next
    `return` of its block, or (a block without one) the function's last statement."""
    bad = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef):
            continue
        ends_in_redirect = bool(function.body) and _returns_redirect(function.body[-1])
        for node in ast.walk(function):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(node, field, None)
                if not isinstance(block, list):
                    continue
                for index, statement in enumerate(block):
                    if not (
                        isinstance(statement, ast.Expr) and _is_call_to(statement.value, "success")
                    ):
                        continue
                    later = [s for s in block[index + 1 :] if isinstance(s, ast.Return)]
                    if later[:1] and _returns_redirect(later[0]):
                        continue
                    if not later and ends_in_redirect:
                        continue
                    bad.append(statement.lineno)
    return sorted(set(bad))


def test_the_check_finds_a_success_message_that_renders() -> None:
    source = (
        "def view(request):\n"
        "    messages.success(request, 'saved')\n"
        "    return render(request, 't.html')\n"
    )
    assert _success_without_redirect(ast.parse(source)) == [2]
    redirected = (
        "def view(request):\n"
        "    if ok:\n"
        "        messages.success(request, 'saved')\n"
        "    return redirect('home')\n"
    )
    assert _success_without_redirect(ast.parse(redirected)) == []


def test_every_success_message_is_followed_by_a_redirect() -> None:
    modules = _view_modules()
    assert len(modules) >= 6
    found = {
        str(path.relative_to(ROOT)): lines
        for path in modules
        if (lines := _success_without_redirect(ast.parse(path.read_text())))
    }
    assert found == {}
