"""Post-import hooks: a callback runs after the module's body and before importers get it."""

import sys
import textwrap

import pytest

from replayscope.runner.trace.imports import PostImportHooks


@pytest.fixture()
def package(tmp_path, monkeypatch):
    (tmp_path / "tracedpkg").mkdir()
    (tmp_path / "tracedpkg" / "__init__.py").write_text("")
    (tmp_path / "tracedpkg" / "engine.py").write_text(textwrap.dedent("""
        def step(x):
            return x + 1

        def run(x):
            return step(x)          # a global lookup: sees a wrapped step
    """))
    (tmp_path / "tracedpkg" / "user.py").write_text("from tracedpkg.engine import step\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m.startswith("tracedpkg")]:
        del sys.modules[name]


@pytest.fixture()
def hooks():
    errors = []
    h = PostImportHooks(on_error=lambda name, error: errors.append((name, error)))
    h.errors = errors
    h.install()
    yield h
    h.remove()


def wrap_step(module):
    original = module.step
    module.step = lambda x: original(x) * 10


def test_the_callback_runs_when_the_module_is_imported_and_not_before(package, hooks):
    seen = []
    hooks.watch("tracedpkg.engine", seen.append)
    assert seen == []
    import tracedpkg.engine
    assert seen == [tracedpkg.engine]


def test_a_name_imported_from_the_module_elsewhere_is_the_wrapped_one(package, hooks):
    hooks.watch("tracedpkg.engine", wrap_step)
    import tracedpkg.engine
    import tracedpkg.user
    assert tracedpkg.user.step(1) == 20
    assert tracedpkg.engine.run(1) == 20


def test_a_module_already_imported_gets_its_callback_at_once(package, hooks):
    import tracedpkg.engine
    seen = []
    hooks.watch("tracedpkg.engine", seen.append)
    assert seen == [tracedpkg.engine]


def test_a_failing_callback_never_breaks_the_import(package, hooks):
    hooks.watch("tracedpkg.engine", lambda module: 1 / 0)
    import tracedpkg.engine
    assert tracedpkg.engine.step(1) == 2
    [(name, error)] = hooks.errors
    assert name == "tracedpkg.engine" and isinstance(error, ZeroDivisionError)


def test_other_imports_go_straight_past(package, hooks):
    hooks.watch("tracedpkg.engine", wrap_step)
    import tracedpkg.user  # imports engine too
    import json
    assert json.dumps([1]) == "[1]" and tracedpkg.user.step(1) == 20
