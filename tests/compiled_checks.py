"""What the tests of each compiled part check alike: built with gcc alone, every file compiles without a
warning and the module exports its init function and nothing else (a process that loads libraries
RTLD_GLOBAL sees no other name of it); run for many steps, it holds no memory it did not hold before."""

import shutil
import subprocess
import sysconfig
import tracemalloc
from pathlib import Path
from typing import Callable

import pytest

HEADERS = Path(sysconfig.get_paths()["include"]) / "Python.h"

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or not HEADERS.is_file(),
                               reason="no gcc or Python headers here")
needs_gcc_and_nm = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None
                                      or not HEADERS.is_file(), reason="no gcc, nm or Python headers here")


def compile_each_without_warnings(sources: list[Path], folder: Path) -> None:
    """Each source compiled alone with -Wall -Werror."""
    for source in sources:
        done = subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-fPIC", "-c", f"-I{HEADERS.parent}", str(source),
                               "-o", str(folder / f"{source.stem}.o")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{source.name}: {done.stderr}"


def exported_names(sources: list[Path], built: Path) -> set[str]:
    """The names a shared object built from ``sources`` (as docs/trace.md's gcc line builds one) exports."""
    done = subprocess.run(["gcc", "-O2", "-Wall", "-shared", "-fPIC", f"-I{HEADERS.parent}", *map(str, sources),
                           "-o", str(built)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(built)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in symbols.stdout.splitlines() if line.split()[1:2] != ["A"]}


def memory_growth(steps: Callable[[int], object], count: int = 10_000) -> int:
    """Bytes the Python allocator holds after a second ``count`` steps that it did not after the first."""
    tracemalloc.start()
    try:
        steps(count)
        first, _ = tracemalloc.get_traced_memory()
        steps(count)
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return second - first
