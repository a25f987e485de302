"""One place for each piece of code: no two functions of app/, collector/ and runner/ of
four statements or more have the same body (docstrings aside): the second copy is an import
of the first. (Below four: idioms such as a module's lazy ``_torch()`` loader, not logic.)"""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("app", "collector", "runner")


def _body_without_docstring(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = node.body
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        body = body[1:]
    return body


def test_no_function_is_written_twice():
    copies = defaultdict(list)
    functions = 0
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    functions += 1
                    body = _body_without_docstring(node)
                    if len(body) >= 4:
                        key = ast.dump(node.args) + "".join(ast.dump(statement) for statement in body)
                        copies[key].append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert functions > 1000, functions                     # the walk saw the tree
    twice = [places for places in copies.values() if len(places) > 1]
    assert not twice, twice
