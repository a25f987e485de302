"""The import contracts of pyproject.toml (``[tool.importlinter]``), linted on the installed
layout. import-linter finds a package's modules in its own folder, and in a checkout
replayscope's subpackages are the folders beside it (``replayscope/__init__.py`` adds them when
imported, which import-linter never does); so the package is laid out as the wheel installs it,
as links in a temporary folder, and linted there. By hand: ``python3 -m tests.import_rules``."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
MAPPED = ("runner", "collector", "app", "migrations")


def installed_layout(folder: Path) -> Path:
    """``folder/replayscope`` as installed: the checkout's replayscope/ files, and its mapped
    folders inside it (links). Returns ``folder``."""
    package = folder / "replayscope"
    package.mkdir()
    for entry in (ROOT / "replayscope").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for name in MAPPED:
        (package / name).symlink_to(ROOT / name, target_is_directory=True)
    return folder


@contextmanager
def on_the_path() -> Iterator[Path]:
    """The installed layout first on ``sys.path`` while inside; ``sys.modules`` as it was after."""
    # an imported replayscope answers find_spec with the checkout's folders: set it aside
    ours = {name: sys.modules.pop(name) for name in list(sys.modules)
            if name == "replayscope" or name.startswith("replayscope.")}
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="replayscope-lint-") as tmp:
        sys.path.insert(0, str(installed_layout(Path(tmp))))
        os.chdir(tmp)      # lint-imports puts the working directory first on sys.path
        try:
            yield Path(tmp)
        finally:
            os.chdir(cwd)
            sys.path[:] = [p for p in sys.path if p != tmp]
            for name in [n for n in sys.modules if n == "replayscope" or n.startswith("replayscope.")]:
                del sys.modules[name]
            sys.modules.update(ours)


def lint() -> int:
    """lint-imports' exit code, its report on stdout."""
    # lint_imports configures logging with dictConfig, which disables every logger that exists
    # already (replayscope.runner.capture's, say): whatever runs after this still reads them.
    loggers = [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    disabled = {lg: lg.disabled for lg in loggers}
    try:
        with on_the_path():
            return lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    finally:
        for lg, was in disabled.items():
            lg.disabled = was


def modules() -> set[str]:
    """The modules import-linter sees under replayscope."""
    import grimp

    with on_the_path():
        return set(grimp.build_graph("replayscope", cache_dir=None).modules)


if __name__ == "__main__":
    sys.exit(lint())
