"""The PyTorch entry points the tracer hooks, each installed when its module is imported.

- ``torch.cuda.CUDAGraph``: ``capture_begin`` / ``capture_end`` / ``replay`` (every CUDA graph
  PyTorch makes goes through them: ``torch.cuda.graph``, ``make_graphed_callables``,
  Inductor's graph trees, vLLM's and SGLang's runners), and ``torch.cuda.graph.__exit__`` for
  an error raised inside a capture;
- Inductor: ``log_cudagraph_skip_and_bump_counter`` (its "skipping cudagraphs due to ..."; also
  heard from Inductor's cudagraphs logger, for a caller that holds the function under a name
  we did not replace); its graph trees are ``replayscope.runner.trace.graph_trees``;
- Dynamo: ``convert_frame._compile``, timed as the ``compile`` phase.

Every hook calls the original whatever happens to its own bookkeeping; an entry point that is
missing is a warning on the run, and that part of the program runs untraced.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import time
from typing import Any, Callable

from replayscope.runner.trace.no_graph import asked_for_graphs, skip_count
from replayscope.runner.trace.step_core import compiled_for
from replayscope.runner.trace.tracer import Tracer

MARK = "__replayscope_original__"


class Patches:
    """Attributes replaced on classes and modules, so they can be put back."""

    def __init__(self):
        self._done: list[tuple[Any, str, Any, bool]] = []
        self._undo: list[Callable[[], Any]] = []

    def on_remove(self, undo: Callable[[], Any]) -> None:
        """Something else to undo on ``remove`` (a logging handler taken off)."""
        self._undo.append(undo)

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> bool:
        """Put ``make(original)`` in place of ``owner.name``; False when there is no such attribute.
        On a class, the attribute as the class holds it (an inherited one is wrapped on the
        class itself). The wrapper looks like the original to ``inspect`` (``__wrapped__``)."""
        original = inspect.getattr_static(owner, name, None) if isinstance(owner, type) \
            else getattr(owner, name, None)
        if original is None or getattr(original, MARK, None) is not None:
            return original is not None
        wrapper = make(original)
        if callable(original) and not isinstance(wrapper, (staticmethod, classmethod)):
            try:
                functools.update_wrapper(wrapper, original)
            except (AttributeError, TypeError):
                pass
        setattr(wrapper, MARK, original)
        setattr(owner, name, wrapper)
        self._done.append((owner, name, original, isinstance(owner, type) and name not in owner.__dict__))
        return True

    def remove(self) -> None:
        while self._undo:
            self._undo.pop()()
        while self._done:
            owner, name, original, inherited = self._done.pop()
            if inherited:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def _missing(tracer: Tracer, what: str, consequence: str) -> None:
    version = getattr(sys.modules.get("torch"), "__version__", "unknown")
    tracer.warn("hook_missing", f"{what} is not in PyTorch {version}: {consequence}", once=f"missing:{what}")


# -- torch.cuda.CUDAGraph ---------------------------------------------------------------------
def install_cuda_graph_hooks(tracer: Tracer, graphs_module: Any, patches: Patches) -> bool:
    cls = getattr(graphs_module, "CUDAGraph", None)
    names = ("capture_begin", "capture_end", "replay")
    if cls is None or not all(callable(getattr(cls, n, None)) for n in names):
        _missing(tracer, "torch.cuda.CUDAGraph (capture_begin, capture_end, replay)",
                 "CUDA graph captures and replays are not traced")
        return False
    for name in names:
        if name not in cls.__dict__:   # defined on the C++ base only: wrap it on the Python class
            setattr(cls, name, getattr(cls, name))
    patches.replace(cls, "capture_begin", lambda original: _capture_begin(tracer, original))
    patches.replace(cls, "capture_end", lambda original: _capture_end(tracer, original))
    patches.replace(cls, "replay", lambda original: _replay(tracer, original))
    context = getattr(graphs_module, "graph", None)
    if context is None or not callable(getattr(context, "__exit__", None)):
        _missing(tracer, "torch.cuda.graph.__exit__", "errors raised inside a capture are not attributed")
    else:
        patches.replace(context, "__exit__", lambda original: _graph_exit(tracer, original))
    tracer.hooks.append("torch.cuda.CUDAGraph")
    return True


def _capture_begin(tracer: Tracer, original: Callable) -> Callable:
    def capture_begin(self, *args, **kwargs):
        try:
            tracer.capture_begin(self)
        except Exception as error:  # noqa: BLE001
            tracer.hook_error("capture_begin", error)
        try:
            return original(self, *args, **kwargs)
        except BaseException as error:
            _safely(tracer, "capture_end", tracer.capture_end, self, error)
            raise
    return capture_begin


def _capture_end(tracer: Tracer, original: Callable) -> Callable:
    def capture_end(self, *args, **kwargs):
        try:
            result = original(self, *args, **kwargs)
        except BaseException as error:
            _safely(tracer, "capture_end", tracer.capture_end, self, error)
            raise
        _safely(tracer, "capture_end", tracer.capture_end, self, None)
        return result
    return capture_end


def _replay(tracer: Tracer, original: Callable) -> Callable:
    # The hot path: a counter, and inside a step the graph appended to the step's list (its size
    # is read once, at the step's end). The compiled core's ReplayHook does the same in C.
    core = compiled_for(tracer)
    if core is not None:
        return core.ReplayHook(tracer, original)

    def replay(self, *args, **kwargs):
        tracer.total_replays += 1
        if tracer.in_step:
            tracer.step_graphs.append(self)
        return original(self, *args, **kwargs)
    return replay


def _graph_exit(tracer: Tracer, original: Callable) -> Callable:
    def __exit__(self, exc_type=None, exc=None, tb=None, *rest):
        if exc is not None:
            _safely(tracer, "capture", tracer.capture_body_error, getattr(self, "cuda_graph", None), exc)
        return original(self, exc_type, exc, tb, *rest)
    return __exit__


def _safely(tracer: Tracer, where: str, fn: Callable, *args: Any) -> None:
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001
        tracer.hook_error(where, error)


# -- Inductor ---------------------------------------------------------------------------------
SKIP_LOG_USERS = ("torch._inductor.cudagraph_trees", "torch._inductor.compile_fx", "torch._inductor.codecache",
                  "torch._inductor.output_code", "torch._dynamo.backends.cudagraphs")


def install_inductor_skip_hook(tracer: Tracer, utils_module: Any, patches: Patches) -> bool:
    original = getattr(utils_module, "log_cudagraph_skip_and_bump_counter", None)
    if original is None:
        _missing(tracer, "torch._inductor.cudagraph_utils.log_cudagraph_skip_and_bump_counter",
                 "Inductor's reasons for skipping CUDA graphs are not recorded (eager steps may read unknown)")
        return False
    inside = [False]     # the wrapper is running: its message is not taken again from the log

    def make(original: Callable) -> Callable:
        def log_cudagraph_skip_and_bump_counter(msg, *args, **kwargs):
            _safely(tracer, "Inductor skip", tracer.inductor_skip, str(msg))
            inside[0] = True
            try:
                return original(msg, *args, **kwargs)
            finally:
                inside[0] = False
        return log_cudagraph_skip_and_bump_counter

    patches.replace(utils_module, "log_cudagraph_skip_and_bump_counter", make)
    wrapped = utils_module.log_cudagraph_skip_and_bump_counter
    for name in SKIP_LOG_USERS:     # modules that imported the name before we got here
        module = sys.modules.get(name)
        if module is not None and getattr(module, "log_cudagraph_skip_and_bump_counter", None) is original:
            patches.replace(module, "log_cudagraph_skip_and_bump_counter", lambda _original: wrapped)
    _watch_skip_log(tracer, getattr(utils_module, "cudagraphs_log", None), inside, patches)
    tracer.hooks.append("inductor skips")
    return True


def _watch_skip_log(tracer: Tracer, logger: Any, inside: list[bool], patches: Patches) -> None:
    """Inductor's skip messages also as its logger writes them: a module holding the function under
    a name we did not replace (imported in a way or a place we do not know) is still heard."""
    if not isinstance(logger, logging.Logger):
        return

    class SkipMessages(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if inside[0] or record.levelno < logging.WARNING:
                return
            message = record.getMessage()
            if message.lower().startswith("skipping cudagraphs"):
                _safely(tracer, "Inductor skip (log)", tracer.inductor_skip, message)

    handler = SkipMessages()
    logger.addHandler(handler)
    patches.on_remove(lambda: logger.removeHandler(handler))


# -- Dynamo -----------------------------------------------------------------------------------
def install_compile_hook(tracer: Tracer, convert_frame: Any, patches: Patches) -> bool:
    if not callable(getattr(convert_frame, "_compile", None)):
        _missing(tracer, "torch._dynamo.convert_frame._compile", "the compile phase is not timed")
        return False

    def make(original: Callable) -> Callable:
        def _compile(*args, **kwargs):
            if tracer.compile_depth:
                return original(*args, **kwargs)
            tracer.compile_depth += 1
            started_ts, started = time.time(), time.perf_counter()
            skips, heard = skip_count(), tracer.skip_messages
            _safely(tracer, "compile", tracer.graph_trees.name_frame, kwargs.get("compile_id"),
                    args[0] if args else kwargs.get("code"))
            try:
                return original(*args, **kwargs)
            finally:
                tracer.compile_depth -= 1
                _safely(tracer, "compile", tracer.compile_done, started_ts, time.perf_counter() - started,
                        skips, heard)
        return _compile

    patches.replace(convert_frame, "_compile", make)
    tracer.hooks.append("dynamo compile")
    return True


# -- Inductor's compile config ---------------------------------------------------------------
def install_compile_fx_hook(tracer: Any, compile_fx_module: Any, patches: Patches) -> bool:
    if not callable(getattr(compile_fx_module, "compile_fx", None)):
        _missing(tracer, "torch._inductor.compile_fx.compile_fx",
                 "a process without CUDA graphs cannot say whether Inductor's config turned them off")
        return False
    depth = [0]      # compile_fx calls itself once its config patches are applied: the outermost counts

    def make(original: Callable) -> Callable:
        def compile_fx(model_, example_inputs_, *args, **kwargs):
            if depth[0]:
                return original(model_, example_inputs_, *args, **kwargs)
            patches_given = kwargs.get("config_patches", args[1] if len(args) > 1 else None)
            _safely(tracer, "Inductor compile", tracer.inductor_compiled, asked_for_graphs(patches_given))
            depth[0] += 1
            try:
                return original(model_, example_inputs_, *args, **kwargs)
            finally:
                depth[0] -= 1
        return compile_fx

    patches.replace(compile_fx_module, "compile_fx", make)
    tracer.hooks.append("inductor compile config")
    return True


# module imported -> installer; the bootstrap registers these as post-import hooks
TORCH_HOOKS = {
    "torch.cuda.graphs": install_cuda_graph_hooks,
    "torch._inductor.cudagraph_utils": install_inductor_skip_hook,
    "torch._dynamo.convert_frame": install_compile_hook,
    "torch._inductor.compile_fx": install_compile_fx_hook,
}
