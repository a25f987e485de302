"""docs/internals.md's import rules hold: the import-linter contracts of pyproject.toml
(``[tool.importlinter]``), imports inside functions included."""

from pathlib import Path

from importlinter.cli import lint_imports

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_import_contracts_are_kept(capsys):
    code = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    report = capsys.readouterr().out
    assert code == 0 and " kept, 0 broken." in report, report
