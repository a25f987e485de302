"""docs/internals.md's import rules hold: the import-linter contracts of pyproject.toml
(``[tool.importlinter]``), imports inside functions included."""

import logging
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
