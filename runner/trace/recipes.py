"""Step recipes: which call of a program is one step, what batch it received, and which
captures are of which size.

A step is one call of the program's step function. ``--step MODULE:QUALNAME`` names it; the
built-in recipes name it for the engines, and switch on when the program imports them: here
transformers ``generate`` (one forward: from ``prepare_inputs_for_generation`` to
``_update_model_kwargs_for_generation``, its batch the new tokens' rows) and the pieces every
recipe is made of; vLLM's and SGLang's layouts are ``replayscope.runner.trace.vllm_recipes`` and
``replayscope.runner.trace.sglang_recipes``. Without ``--step``, a call of a torch.compile
(reduce-overhead) function outside a recipe's step is a step of its own
(``replayscope.runner.trace.graph_trees``).

Each recipe reads the engine's objects with ``getattr`` and defaults: a symbol that is
missing in the installed version is a warning on the run naming it, never an error in the
program.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, NamedTuple

from replayscope.contract.errors import describe_error
from replayscope.runner.trace.causes import Cause
from replayscope.runner.trace.hooks import Patches
from replayscope.runner.trace.step_core import compiled_for
from replayscope.runner.trace.tracer import Tracer


class StepBatch(NamedTuple):
    stage: str
    raw_bs: int | None
    num_tokens: int | None = None
    hint: Cause | None = None     # the cause to give if the step runs eager without a replay


BatchOf = Callable[[tuple, dict], "StepBatch | None"]
SizeOf = Callable[[tuple, dict], "tuple[int, str, str] | None"]


def note_engine_version(tracer: Tracer, package: str) -> None:
    """The traced engine's version for its run (the record's ``version``): the package's
    ``__version__``, else its installed distribution's; nothing when neither says."""
    if tracer.engine_version is not None:
        return
    version = getattr(sys.modules.get(package), "__version__", None)
    if not isinstance(version, str) or not version:
        try:
            from importlib.metadata import version as installed_version
            version = installed_version(package)
        except Exception:  # noqa: BLE001 (not installed as a distribution: the version stays unknown)
            return
    tracer.engine_version = version[:64]


def _recipe_failed(tracer: Tracer, recipe: str, error: BaseException) -> None:
    tracer.warn("recipe_failed", f"the {recipe} recipe could not read a step or capture "
                                 f"({describe_error(error)}); those are recorded without it",
                once=f"recipe_failed:{recipe}")


def step_wrapper(tracer: Tracer, original: Callable, batch_of: BatchOf, recipe: str) -> Callable:
    """``original`` with each outermost call recorded as one step. The compiled core's StepWrapper
    does the same in C (reading ``tensor_batch``'s cache itself when that is the recipe's batch)."""
    core = compiled_for(tracer)
    if core is not None:
        cached = batch_of is tensor_batch
        wrapper = core.StepWrapper(tracer, original, batch_of, recipe, _recipe_failed,
                                   _BATCHES if cached else None, _tensor_type if cached else None)
        try:
            functools.update_wrapper(wrapper, original)     # its name and doc, as a function's would be
        except (AttributeError, TypeError):
            pass
        return wrapper

    def step(*args, **kwargs):
        if tracer.in_step:
            return original(*args, **kwargs)
        try:
            batch = batch_of(args, kwargs)
        except Exception as error:  # noqa: BLE001
            _recipe_failed(tracer, recipe, error)
            batch = None
        if batch is None or not tracer.step_begin(*batch):
            return original(*args, **kwargs)
        try:
            result = original(*args, **kwargs)
        except BaseException:
            tracer.step_abort()
            raise
        tracer.step_end()
        return result
    step.__wrapped__ = original
    return step


def capture_wrapper(tracer: Tracer, original: Callable, size_of: SizeOf, recipe: str) -> Callable:
    """``original`` with the graphs captured during a call reported as one capture of a size."""
    def capture(*args, **kwargs):
        try:
            spec = size_of(args, kwargs)
        except Exception as error:  # noqa: BLE001
            _recipe_failed(tracer, recipe, error)
            spec = None
        if spec is None:
            return original(*args, **kwargs)
        with tracer.capture_context(*spec):
            return original(*args, **kwargs)
    capture.__wrapped__ = original
    return capture


def arg(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def size_value(value: Any) -> int | None:
    try:
        size = int(value)
    except (TypeError, ValueError):
        return None
    return size if size >= 1 else None


def incomplete(tracer: Tracer, recipe: str, missing: str) -> None:
    tracer.warn("recipe_incomplete", f"the {recipe} recipe found no {missing} in this version: "
                                     f"its steps are not traced (name one with --step)",
                once=f"recipe_incomplete:{recipe}:{missing}")


# -- --step MODULE:QUALNAME -------------------------------------------------------------------
_TENSOR: Any = None
_CONTAINERS = (dict, list, tuple)


def _first_tensor(values: Any, tensor_type: type) -> Any:
    for value in values:
        if isinstance(value, tensor_type):
            return value
    for value in values:
        if isinstance(value, _CONTAINERS):
            items = value.values() if isinstance(value, dict) else value[:16]
            for item in items:
                if isinstance(item, tensor_type):
                    return item
    return None


_NO_BATCH = StepBatch("decode", None)
_BATCHES: dict[tuple, StepBatch] = {}      # (shape, dtype) of the tensor read -> its StepBatch, made once
_BATCHES_KEPT = 4096


def _tensor_type() -> type:
    global _TENSOR
    import torch
    _TENSOR = torch.Tensor
    return _TENSOR


def tensor_batch(args: tuple, kwargs: dict) -> StepBatch:
    """The batch of a step named with --step: the leading dimension of its first tensor argument
    (looked for in the arguments, then one level into dicts, lists and tuples). A 2-D integer
    tensor (token ids) counts rows x columns tokens; anything else one token per row. Kept per
    shape and dtype: a step reads two attributes of its tensor and one dictionary."""
    tensor_type = _TENSOR or _tensor_type()
    for value in args:
        if isinstance(value, tensor_type):
            tensor = value
            break
    else:
        tensor = _first_tensor(args + tuple(kwargs.values()) if kwargs else args, tensor_type)
        if tensor is None:
            return _NO_BATCH
    key = (tensor.shape, tensor.dtype)
    batch = _BATCHES.get(key)
    if batch is None:
        batch = _batch_of(key[0], tensor.is_floating_point())
        if len(_BATCHES) < _BATCHES_KEPT:
            _BATCHES[key] = batch
    return batch


def _batch_of(shape: Any, floating: bool) -> StepBatch:
    if not shape or shape[0] < 1:
        return _NO_BATCH
    rows = shape[0]
    tokens = rows * shape[1] if len(shape) == 2 and shape[1] > 1 and not floating else rows
    return StepBatch("decode", rows, tokens)


def resolve(owner: Any, qualname: str) -> tuple[Any, str]:
    """(the object that holds the attribute, its name) for a dotted qualified name."""
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def wrap_step_function(tracer: Tracer, module: Any, qualname: str, patches: Patches, spec: str) -> None:
    try:
        owner, name = resolve(module, qualname)
        raw = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    except (AttributeError, KeyError):
        why = f"--step {spec}: {module.__name__} has no {qualname}"
        tracer.warn("step_missing", f"{why}; no steps are recorded", once="step_missing")
        tracer.step_target(False, why)
        return
    if isinstance(raw, (staticmethod, classmethod)):
        kind = type(raw)
        patches.replace(owner, name, lambda original: kind(
            step_wrapper(tracer, original.__func__, tensor_batch, "--step")))
    else:
        patches.replace(owner, name, lambda original: step_wrapper(tracer, original, tensor_batch, "--step"))
    tracer.recipes.append(f"--step {spec}")
    tracer.step_target(True)


class _Globals:
    """A module's global namespace seen as an object (what ``Patches`` and ``resolve`` take)."""

    def __init__(self, namespace: dict):
        object.__setattr__(self, "_namespace", namespace)
        object.__setattr__(self, "__name__", namespace.get("__name__", "__main__"))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._namespace[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._namespace[name] = value


MAIN_NAMES = ("__main__", "__mp_main__")   # the script, and the script as multiprocessing's spawned workers load it


def catch_main_step(tracer: Tracer, qualname: str, patches: Patches, spec: str) -> None:
    """A step function in the program's main module (a script, or ``python -m``) is defined while
    the program runs, after any import hook could wrap it: a profile function catches its first
    call (recorded as a step), wraps it in place for the next calls, and steps aside."""
    name = qualname.rsplit(".", 1)[-1]

    def catcher(frame, event, arg):
        if event != "call" or frame.f_code.co_name != name \
                or frame.f_globals.get("__name__") not in MAIN_NAMES:
            return
        if getattr(frame.f_code, "co_qualname", qualname) != qualname:
            return
        sys.setprofile(None)
        # The function's own globals: a spawned worker runs the script in a namespace of its
        # own, not the __mp_main__ module's dictionary.
        wrap_step_function(tracer, _Globals(frame.f_globals), qualname, patches, spec)
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        batch = tensor_batch(tuple(frame.f_locals.get(n) for n in names), {})
        if tracer.step_begin(*batch):
            def finish(f, event, arg):
                if f is frame and event == "return":
                    sys.setprofile(None)
                    tracer.step_end()
            sys.setprofile(finish)

    sys.setprofile(catcher)


# -- transformers generate --------------------------------------------------------------------
_PREPARE, _UPDATE = "prepare_inputs_for_generation", "_update_model_kwargs_for_generation"


def _generation_batch(model_inputs: Any) -> StepBatch | None:
    get = getattr(model_inputs, "get", None)
    if get is None:
        return None
    tensor = get("input_ids")
    if tensor is None:
        tensor = get("inputs_embeds")
    shape = getattr(tensor, "shape", None)
    if shape is None or len(shape) < 2 or shape[0] < 1:
        return None
    rows, new = int(shape[0]), int(shape[1])
    if new > 1:
        return StepBatch("prefill", rows, rows * new, Cause("prefill", f"{new} new tokens per sequence"))
    return StepBatch("decode", rows, rows)


def install_transformers(tracer: Tracer, module: Any, patches: Patches) -> None:
    mixin = getattr(module, "GenerationMixin", None)
    for name in ("generate", _PREPARE, _UPDATE):
        if mixin is None or not callable(getattr(mixin, name, None)):
            incomplete(tracer, "transformers", f"GenerationMixin.{name}")
            return

    def make_prepare(original: Callable) -> Callable:
        def prepare_inputs_for_generation(self, *args, **kwargs):
            inputs = original(self, *args, **kwargs)
            if not tracer.in_step:
                try:
                    batch = _generation_batch(inputs)
                except Exception as error:  # noqa: BLE001
                    _recipe_failed(tracer, "transformers", error)
                    batch = None
                if batch is not None:
                    tracer.step_begin(*batch)
            return inputs
        return prepare_inputs_for_generation

    def make_update(original: Callable) -> Callable:
        def _update_model_kwargs_for_generation(self, *args, **kwargs):
            try:
                result = original(self, *args, **kwargs)
            except BaseException:
                tracer.step_abort()
                raise
            tracer.step_end()
            return result
        return _update_model_kwargs_for_generation

    makers = {_PREPARE: make_prepare, _UPDATE: make_update}

    def wrap_overrides(cls: type) -> None:
        for name, make in makers.items():
            for klass in cls.__mro__:
                if name in klass.__dict__:
                    if klass is not mixin:
                        patches.replace(klass, name, make)
                    break

    def make_generate(original: Callable) -> Callable:
        def generate(self, *args, **kwargs):
            try:
                wrap_overrides(type(self))
                config = getattr(self, "config", None)
                tracer.set_model(getattr(config, "_name_or_path", None) or type(self).__name__)
            except Exception as error:  # noqa: BLE001
                _recipe_failed(tracer, "transformers", error)
            try:
                return original(self, *args, **kwargs)
            finally:
                tracer.step_abort()    # a forward without its update (the loop stopped mid-way)
        return generate

    for name, make in makers.items():
        patches.replace(mixin, name, make)
    patches.replace(mixin, "generate", make_generate)
    tracer.recipes.append("transformers generate")


# module imported -> installer; the bootstrap registers these as post-import hooks
RECIPES = {"transformers.generation.utils": install_transformers}
