"""docs/internals.md's import rules hold: the import-linter contracts of pyproject.toml
(``[tool.importlinter]``), imports inside functions included."""

import logging
import re
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_import_contracts_are_kept(capsys):
    # lint_imports configures logging with dictConfig, which disables every logger that
    # exists already (runner.capture's, say): the tests after this one still read them.
    loggers = [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    disabled = {lg: lg.disabled for lg in loggers}
    try:
        code = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    finally:
        for lg, was in disabled.items():
            lg.disabled = was
    report = capsys.readouterr().out
    assert code == 0 and " kept, 0 broken." in report, report


COLLECTOR = PYPROJECT.parent / "collector"
SHARED_INFRASTRUCTURE = {"collector.store", "collector.tables", "collector.settings", "collector.alert_rule"}


def _layers_contract() -> dict:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers" and c["name"].startswith("the collector's layers")]
    return layers


def test_every_collector_module_is_in_a_layer_but_the_shared_infrastructure():
    layers = _layers_contract()
    layered = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    roots = {f"collector.{p.stem}" for p in COLLECTOR.glob("*.py") if p.name != "__init__.py"}
    roots |= {f"collector.{p.name}" for p in COLLECTOR.iterdir() if (p / "__init__.py").exists()}
    assert roots, COLLECTOR
    outside = roots - layered - SHARED_INFRASTRUCTURE
    assert not outside, f"collector modules in no layer of {layers['name']!r}: {sorted(outside)}"
    # the contract's name says which root modules stand outside it
    assert all(name.split(".")[1] in layers["name"] for name in SHARED_INFRASTRUCTURE), layers["name"]


def test_the_commands_live_in_one_package():
    """Every command group registers from ``app.cli``; no collector or runner module defines a
    command but the tracer's own front (``runner.trace.cli``: ``python -m runner.trace``, which
    ``app.cli.run`` registers as ``replayscope trace``)."""
    from app.cli import COMMAND_MODULES

    assert COMMAND_MODULES and all(m.startswith("app.cli.") for m in COMMAND_MODULES), COMMAND_MODULES
    root = PYPROJECT.parent
    registering = sorted(str(p.relative_to(root)) for package in ("collector", "runner") for p in (root / package).rglob("*.py")
                         if re.search(r"\.add_(sub)?parsers?\(", p.read_text()))
    assert registering == ["runner/trace/cli.py"], registering
