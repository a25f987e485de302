"""Step recipes: which call of a program is one step, what batch it received, and which
captures are of which size.

A step is one call of the program's step function. ``--step MODULE:QUALNAME`` names it; the
built-in recipes name it for the engines, and switch on when the program imports them:

| engine | step | batch | capture of one size |
| --- | --- | --- | --- |
| vLLM (V1, and the model runner V2) | ``GPUModelRunner.execute_model`` (not its dummy runs) | scheduled tokens (vLLM's graphs are keyed by tokens) | ``GPUModelRunner._dummy_run(num_tokens)``; V2: the capturing frame's ``num_tokens`` |
| SGLang | ``ModelRunner.forward`` | ``forward_batch.batch_size`` | ``CudaGraphRunner.capture_one_batch_size(bs)`` |
| transformers | one forward of ``generate``: from ``prepare_inputs_for_generation`` to ``_update_model_kwargs_for_generation`` | the new tokens' rows | (Inductor: the step's shape) |

Each recipe reads the engine's objects with ``getattr`` and defaults: a symbol that is
missing in the installed version is a warning on the run, never an error in the program.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, NamedTuple

from runner.trace.causes import Cause
from runner.trace.hooks import Patches
from runner.trace.tracer import Tracer, describe_error


class StepBatch(NamedTuple):
    stage: str
    raw_bs: int | None
    num_tokens: int | None = None
    hint: Cause | None = None     # the cause to give if the step runs eager without a replay


BatchOf = Callable[[tuple, dict], "StepBatch | None"]
SizeOf = Callable[[tuple, dict], "tuple[int, str, str] | None"]


def _recipe_failed(tracer: Tracer, recipe: str, error: BaseException) -> None:
    tracer.warn("recipe_failed", f"the {recipe} recipe could not read a step or capture "
                                 f"({describe_error(error)}); those are recorded without it",
                once=f"recipe_failed:{recipe}")


def step_wrapper(tracer: Tracer, original: Callable, batch_of: BatchOf, recipe: str) -> Callable:
    """``original`` with each outermost call recorded as one step."""
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


def _arg(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _size(value: Any) -> int | None:
    try:
        size = int(value)
    except (TypeError, ValueError):
        return None
    return size if size >= 1 else None


def _incomplete(tracer: Tracer, recipe: str, missing: str) -> None:
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


def tensor_batch(args: tuple, kwargs: dict) -> StepBatch:
    """The batch of a step named with --step: the leading dimension of its first tensor argument
    (looked for in the arguments, then one level into dicts, lists and tuples)."""
    global _TENSOR
    if _TENSOR is None:
        import torch
        _TENSOR = torch.Tensor
    tensor = _first_tensor(args + tuple(kwargs.values()) if kwargs else args, _TENSOR)
    if tensor is not None and tensor.dim() >= 1 and tensor.shape[0] >= 1:
        rows = tensor.shape[0]
        per_row = tensor.shape[1] if tensor.dim() == 2 and not tensor.is_floating_point() else 1
        return StepBatch("decode", rows, rows * max(per_row, 1))
    return StepBatch("decode", None)


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
        tracer.warn("step_missing", f"--step {spec}: {module.__name__} has no {qualname}; no steps are "
                                    f"recorded", once="step_missing")
        return
    if isinstance(raw, (staticmethod, classmethod)):
        kind = type(raw)
        patches.replace(owner, name, lambda original: kind(
            step_wrapper(tracer, original.__func__, tensor_batch, "--step")))
    else:
        patches.replace(owner, name, lambda original: step_wrapper(tracer, original, tensor_batch, "--step"))
    tracer.recipes.append(f"--step {spec}")


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
            _incomplete(tracer, "transformers", f"GenerationMixin.{name}")
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


# -- vLLM -------------------------------------------------------------------------------------
def _vllm_graphs_off(runner: Any) -> bool:
    if getattr(getattr(runner, "model_config", None), "enforce_eager", False) is True:
        return True
    config = getattr(runner, "compilation_config", None) or getattr(
        getattr(runner, "vllm_config", None), "compilation_config", None)
    mode = getattr(config, "cudagraph_mode", None)
    return mode is not None and getattr(mode, "name", str(mode)) == "NONE"


def vllm_batch(tracer: Tracer) -> BatchOf:
    known: dict[str, Any] = {}

    def batch(args: tuple, kwargs: dict) -> StepBatch | None:
        if kwargs.get("dummy_run") or kwargs.get("is_profile"):
            return None                       # the V2 runner's warm-up and capture runs
        runner, scheduled = args[0], _arg(args, kwargs, 1, "scheduler_output")
        tokens = _size(getattr(scheduled, "total_num_scheduled_tokens", None))
        if tokens is None:
            return None                       # nothing scheduled: no forward
        if "off" not in known:
            known["off"] = _vllm_graphs_off(runner)
            tracer.set_model(getattr(getattr(runner, "model_config", None), "model", None))
        per_request = getattr(scheduled, "num_scheduled_tokens", None)
        requests = len(per_request) if isinstance(per_request, dict) and per_request else tokens
        if tokens == requests:
            hint = Cause("graphs_disabled", "vLLM runs with enforce_eager or cudagraph_mode NONE") \
                if known["off"] else None
            return StepBatch("decode", tokens, tokens, hint)
        if getattr(scheduled, "scheduled_spec_decode_tokens", None):
            return StepBatch("verify", tokens, tokens)
        return StepBatch("mixed", tokens, tokens,
                         Cause("prefill", f"{requests} requests with {tokens} tokens: a batch with prompt tokens"))
    return batch


def vllm_capture_size(tracer: Tracer) -> SizeOf:
    def size_of(args: tuple, kwargs: dict) -> tuple[int, str, str] | None:
        size = _size(_arg(args, kwargs, 1, "num_tokens"))
        if size is None:
            return None
        tracer.set_model(getattr(getattr(args[0], "model_config", None), "model", None))
        mode = kwargs.get("cudagraph_runtime_mode")
        label = f"vllm {getattr(mode, 'name', mode)}" if mode is not None else "vllm"
        return size, "decode", label
    return size_of


def install_vllm(tracer: Tracer, module: Any, patches: Patches) -> None:
    runner = getattr(module, "GPUModelRunner", None)
    if runner is None or not callable(getattr(runner, "execute_model", None)):
        _incomplete(tracer, "vLLM", "GPUModelRunner.execute_model")
        return
    patches.replace(runner, "execute_model",
                    lambda original: step_wrapper(tracer, original, vllm_batch(tracer), "vLLM"))
    if callable(getattr(runner, "_dummy_run", None)):
        patches.replace(runner, "_dummy_run",
                        lambda original: capture_wrapper(tracer, original, vllm_capture_size(tracer), "vLLM"))
    tracer.recipes.append("vllm")


# -- SGLang -----------------------------------------------------------------------------------
def _mode_is(mode: Any, name: str) -> bool:
    check = getattr(mode, name, None)
    return bool(check()) if callable(check) else False


def sglang_batch(tracer: Tracer) -> BatchOf:
    known: dict[str, Any] = {}

    def batch(args: tuple, kwargs: dict) -> StepBatch | None:
        runner, forward_batch = args[0], _arg(args, kwargs, 1, "forward_batch")
        rows = _size(getattr(forward_batch, "batch_size", None))
        mode = getattr(forward_batch, "forward_mode", None)
        if rows is None or _mode_is(mode, "is_idle"):
            return None
        if "off" not in known:
            server_args = getattr(runner, "server_args", None)
            known["off"] = getattr(server_args, "disable_cuda_graph", False) is True
            tracer.set_model(getattr(server_args, "model_path", None))
        ids = getattr(forward_batch, "input_ids", None)
        tokens = _size(ids.shape[0]) if getattr(ids, "shape", None) else None
        tokens = tokens or rows
        if _mode_is(mode, "is_decode"):
            hint = Cause("graphs_disabled", "SGLang runs with --disable-cuda-graph") if known["off"] else None
            return StepBatch("decode", rows, tokens, hint)
        if _mode_is(mode, "is_target_verify"):
            return StepBatch("verify", rows, tokens)
        stage = "mixed" if _mode_is(mode, "is_mixed") else "prefill"
        return StepBatch(stage, rows, tokens, Cause("prefill", f"{stage} batch of {rows} requests, {tokens} tokens"))
    return batch


def sglang_capture_size(tracer: Tracer) -> SizeOf:
    def size_of(args: tuple, kwargs: dict) -> tuple[int, str, str] | None:
        size = _size(_arg(args, kwargs, 1, "bs"))
        if size is None:
            return None
        server_args = getattr(getattr(args[0], "model_runner", None), "server_args", None)
        tracer.set_model(getattr(server_args, "model_path", None))
        return size, "decode", "sglang"
    return size_of


def install_sglang_runner(tracer: Tracer, module: Any, patches: Patches) -> None:
    runner = getattr(module, "ModelRunner", None)
    if runner is None or not callable(getattr(runner, "forward", None)):
        _incomplete(tracer, "SGLang", "ModelRunner.forward")
        return
    patches.replace(runner, "forward",
                    lambda original: step_wrapper(tracer, original, sglang_batch(tracer), "SGLang"))
    tracer.recipes.append("sglang")


def install_sglang_capture(tracer: Tracer, module: Any, patches: Patches) -> None:
    """Every graph runner class of the module with ``capture_one_batch_size(bs, ...)``; without
    one, the captures' sizes are read from the capturing frames (SGLang names it ``bs``)."""
    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__ \
                and callable(value.__dict__.get("capture_one_batch_size")):
            patches.replace(value, "capture_one_batch_size",
                            lambda original: capture_wrapper(tracer, original, sglang_capture_size(tracer), "SGLang"))


# module imported -> installer; the bootstrap registers these as post-import hooks
RECIPES = {
    "transformers.generation.utils": install_transformers,
    "vllm.v1.worker.gpu_model_runner": install_vllm,
    "vllm.v1.worker.gpu.model_runner": install_vllm,      # vLLM's model runner V2
    "sglang.srt.model_executor.model_runner": install_sglang_runner,
    "sglang.srt.model_executor.cuda_graph_runner": install_sglang_capture,
}
