"""Every statement of the collector is in ``collector/models/`` (docs/internals.md): outside it,
``store.py`` (opening the store) and ``tables.py`` (the schema), no module imports SQLAlchemy
but for its exceptions, and none executes anything on a connection."""

import ast
from pathlib import Path

COLLECTOR = Path(__file__).resolve().parents[2] / "collector"
ALLOWED = {"store.py", "tables.py"}


def _outside_models() -> list[Path]:
    return [p for p in sorted(COLLECTOR.rglob("*.py"))
            if "models" not in p.relative_to(COLLECTOR).parts and p.name not in ALLOWED]


def _sql_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "sqlalchemy"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sqlalchemy":
            if node.module != "sqlalchemy" or any(a.name != "exc" for a in node.names):
                found.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("execute", "exec_driver_sql", "executemany"):
            found.append(f"line {node.lineno}: .{node.func.attr}(...)")
    return found


def test_no_statement_outside_models():
    uses = {str(p.relative_to(COLLECTOR)): u for p in _outside_models() if (u := _sql_uses(p))}
    assert not uses, f"SQL outside collector/models: {uses}"


def test_the_check_sees_a_statement(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import sqlalchemy as sa\nfrom sqlalchemy import exc\n\ndef f(conn):\n"
                      "    conn.execute(sa.text('SELECT 1'))\n")
    assert _sql_uses(module) == ["import sqlalchemy", "line 5: .execute(...)"]
