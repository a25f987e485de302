"""Post-import hooks: run a function right after a named module has been executed.

A finder at the front of ``sys.meta_path`` answers only for the watched names: it finds the
module's spec the usual way and wraps the loader's ``exec_module`` so the callback runs after
the module body and before anyone that imported it gets it back (so a ``from m import f``
elsewhere binds the wrapped ``f``). Every other import goes straight past it. A module that
is already imported gets its callback at once.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
import time
from typing import Any, Callable

Callback = Callable[[Any], None]


class PostImportHooks(importlib.abc.MetaPathFinder):
    def __init__(self, on_error: Callable[[str, BaseException], None] | None = None,
                 on_timed: Callable[[str, float], None] | None = None):
        self._callbacks: dict[str, list[Callback]] = {}
        self._finding = threading.local()
        self._on_error = on_error
        self._on_timed = on_timed           # (module name, seconds its callback took), when asked for

    def watch(self, name: str, callback: Callback) -> None:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__spec__", None) is not None \
                and not getattr(getattr(module, "__spec__", None), "_initializing", False):
            self._call(name, callback, module)
            return
        self._callbacks.setdefault(name, []).append(callback)

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    # -- MetaPathFinder -------------------------------------------------------
    def find_spec(self, fullname: str, path: Any = None, target: Any = None):
        if fullname not in self._callbacks:
            return None
        busy = getattr(self._finding, "names", None)
        if busy is None:
            busy = self._finding.names = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = _find_with_others(self, fullname, path, target)
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        callbacks = self._callbacks.pop(fullname, [])
        self._wrap(spec, fullname, callbacks)
        return spec

    def _wrap(self, spec: Any, name: str, callbacks: list[Callback]) -> None:
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module):
            original(module)
            for callback in callbacks:
                self._call(name, callback, module)
        try:
            loader.exec_module = exec_module     # this loader instance serves this module only
        except (AttributeError, TypeError):
            spec.loader = _Loader(loader, exec_module)

    def _call(self, name: str, callback: Callback, module: Any) -> None:
        started = time.perf_counter() if self._on_timed is not None else 0.0
        try:
            callback(module)
        except Exception as error:  # noqa: BLE001 (a hook never breaks the program's import)
            if self._on_error is not None:
                self._on_error(name, error)
        if self._on_timed is not None:
            self._on_timed(name, time.perf_counter() - started)


class _Loader(importlib.abc.Loader):
    """A loader that delegates everything but ``exec_module`` (for loaders we cannot patch)."""

    def __init__(self, loader: Any, exec_module: Callable[[Any], None]):
        self._loader = loader
        self._exec_module = exec_module

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._exec_module(module)

    def __getattr__(self, name):
        return getattr(self._loader, name)


def _find_with_others(me: PostImportHooks, fullname: str, path: Any, target: Any):
    """The spec the rest of ``sys.meta_path`` would give."""
    for finder in sys.meta_path:
        if finder is me:
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            return spec
    return None

