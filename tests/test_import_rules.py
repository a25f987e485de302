"""docs/internals.md's import rules hold: the import-linter contracts of pyproject.toml
(``[tool.importlinter]``), imports inside functions included, on the installed layout
(``tests.import_rules``)."""

from tests.import_rules import lint, modules


def test_the_import_contracts_are_kept(capsys):
    code = lint()
    report = capsys.readouterr().out
    assert code == 0 and " kept, 0 broken." in report, report


def test_the_contracts_see_every_package_of_the_checkout():
    """Linted on the checkout's folders, not on whatever an install maps: a contract about
    replayscope.runner that found no replayscope.runner would pass by finding nothing."""
    seen = modules()
    for module in ("replayscope.runner.graphs", "replayscope.collector.ingest", "replayscope.app.pages.run",
                   "replayscope.contract.wire.schema", "replayscope.migrations.env"):
        assert module in seen, sorted(seen)[:20]
