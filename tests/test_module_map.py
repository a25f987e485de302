"""docs/internals.md's module map is the tree: every module of app/, collector/, runner/ and replayscope/
has a row (its own, or its package's), and every module a row names exists. The C files (the
compiled cores) have rows too, and stay under the project's 450 lines as a module does."""

import re
import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INTERNALS = ROOT / "docs" / "internals.md"
PACKAGES = ("app", "collector", "runner", "replayscope")
MAX_LINES = 450


def _module_rows() -> list[list[str]]:
    """The backticked names of the first cell of each row of the "## Modules" table."""
    text = INTERNALS.read_text()
    table = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        if line.startswith("| ") and not line.startswith("| module") and not line.startswith("| ---"):
            first_cell = line.split("|")[1]
            rows.append(re.findall(r"`([^`]+)`", first_cell))
    return rows


def _named_paths() -> set[str]:
    """Each row's names as paths: the first one whole, the others beside it (``a/b.py``,
    ``c.py`` is ``a/b.py`` and ``a/c.py``); a name ending in ``/`` is a package, one with ``*``
    a pattern (``app/pages/*.py``)."""
    paths = set()
    for names in _module_rows():
        folder = ""
        for name in names:
            if "/" in name.rstrip("/"):
                folder = name.rstrip("/").rsplit("/", 1)[0] + "/"
                paths.add(name)
            else:
                paths.add(folder + name)
    return paths


def _covered(module: str, named: set[str]) -> bool:
    return module in named or any(p.endswith("/") and module.startswith(p) or "*" in p and fnmatch(module, p)
                                  for p in named)


def test_every_module_has_a_row():
    named = _named_paths()
    modules = [str(p.relative_to(ROOT)) for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
               if p.name != "__init__.py" and "assets" not in p.parts]
    missing = [m for m in modules if not _covered(m, named)]
    assert not missing, f"modules without a row in docs/internals.md: {missing}"


def test_every_row_names_a_module_that_exists():
    gone = [p for p in _named_paths() if p.startswith(tuple(f"{pkg}/" for pkg in PACKAGES))
            and not ((ROOT / p).exists() or "*" in p and any(ROOT.glob(p)))]
    assert not gone, f"docs/internals.md names modules that are not in the tree: {gone}"


def test_every_path_the_page_names_exists():
    """The fact table and the prose too: a backticked path of the tree names a file or folder
    that is there (a moved module is not left behind in the page)."""
    text = INTERNALS.read_text()
    folders = tuple(f"{top}/" for top in (*PACKAGES, "tests", "benchmarks", "migrations", "deploy", "docs"))
    paths = {m for m in re.findall(r"`([\w./*-]+)`", text) if m.startswith(folders)}
    gone = sorted(p for p in paths if not any(ROOT.glob(p.rstrip("/"))))
    assert not gone, f"docs/internals.md names paths that are not in the tree: {gone}"


def _c_files() -> list[str]:
    """Every .c and .h file of the repository: git's (tracked, and new ones not ignored), or
    without git the package folders' own."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", "--", "*.c", "*.h"], cwd=ROOT,
                            capture_output=True) if shutil.which("git") else None
    if listed is not None and listed.returncode == 0:
        return sorted(name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file())
    return sorted(str(p.relative_to(ROOT)) for pkg in PACKAGES for suffix in ("*.c", "*.h")
                  for p in (ROOT / pkg).rglob(suffix))


def test_every_c_file_is_under_450_lines_and_has_a_row():
    files = _c_files()
    assert {"runner/trace/_stepcore.c", "runner/_runcore.c"} <= set(files), "the compiled cores' files were not found"
    long = {name: lines for name in files if (lines := len((ROOT / name).read_text().splitlines())) >= MAX_LINES}
    assert not long, f"C files of {MAX_LINES} lines or more (split them, one job a file): {long}"
    named = _named_paths()
    missing = [name for name in files if not _covered(name, named)]
    assert not missing, f"C files without a row in docs/internals.md: {missing}"
