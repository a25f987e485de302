"""What the trace keeps about Inductor's CUDA-graph trees in one process: the compiled functions,
how to read a call's batch, the last failed check before a replay, why a graph is recorded.
Pure bookkeeping (the hooks are ``replayscope.runner.trace.graph_trees``); nothing here imports torch."""

from __future__ import annotations

import sys
from typing import Any

# CheckInvariantStatus member -> (cause, what it means), as Inductor names them.
MISMATCH_CAUSES = {
    "StaticInputIdxMismatch": ("static_input_moved", "a static input (parameter, buffer or a tensor marked "
                                                     "static) is at another address"),
    "CudagraphManagedIdxMismatch": ("managed_input_moved", "an input that was an earlier graph's output "
                                                           "is at another address"),
    "ExpectedDeadIndicesBeforeGraphMismatch": ("output_alive", "an earlier graph's output that the "
                                                               "recording expected dead is still alive"),
}
AUTO_STEPS = ("each call of a torch.compile(mode=\"reduce-overhead\") function (Inductor's CUDA-graph "
              "trees) outside a recipe's step; batch: the first dynamic dimension of its inputs (a "
              "symbolic size, else the leading dimension of its first input that is not a parameter)")


class _Function:
    """What the trace knows of one compiled function (a Dynamo frame, all its graphs)."""

    __slots__ = ("name", "recordings", "shapes", "ids", "last_cause")

    def __init__(self, name: str):
        self.name = name
        self.recordings = 0
        self.shapes: set[tuple] = set()      # the input shapes it was recorded with
        self.ids: set[Any] = set()           # Inductor's function ids recorded so far
        self.last_cause = ""


class GraphTrees:
    """Per process: the compiled functions, how to read each one's batch, the last failed check."""

    def __init__(self):
        self.functions: dict[Any, _Function] = {}
        self.by_id: dict[Any, _Function] = {}        # Inductor's function id -> its function, once recorded
        self.frame_names: dict[Any, str] = {}        # Dynamo frame id -> its code's name
        self.batch_index: dict[Any, tuple[int, bool] | None] = {}   # function id -> (input index, is a size)
        self.mismatch: Any = None                    # the last failed check_invariants status in this call
        self.limit_probe: dict[int, bool] = {}       # limit -> does PyTorch enforce it here

    def name_frame(self, compile_id: Any, code: Any) -> None:
        frame = getattr(compile_id, "frame_id", None)
        if frame is not None and frame not in self.frame_names:
            self.frame_names[frame] = getattr(code, "co_qualname", None) or getattr(code, "co_name", "?")

    # -- which function -------------------------------------------------------
    def function_of(self, manager: Any, function_id: Any) -> _Function:
        compile_id = getattr(manager, "id_to_compile_id", {}).get(function_id)
        frame = getattr(compile_id, "frame_id", None)
        if frame is not None:
            key: Any = ("frame", frame)
            name = f"{self.frame_names.get(frame, 'compiled function')} (frame {frame})"
        else:       # PyTorch < 2.8 keeps no compile id here: one function per compiled graph
            wrapped = getattr(manager, "ids_to_funcs", {}).get(function_id)
            key = ("model", id(getattr(wrapped, "model", function_id)))
            name = f"Inductor function {getattr(function_id, 'id', function_id)}"
        found = self.functions.get(key)
        if found is None:
            found = self.functions[key] = _Function(name[:200])
        return found

    # -- the batch of a call --------------------------------------------------
    def batch(self, manager: Any, function_id: Any, inputs: Any) -> int | None:
        """The call's first dynamic dimension: its first integer input (a symbolic size, as
        Inductor passes it), else the leading dimension of its first input that is not static."""
        where = self.batch_index.get(function_id, False)
        if where is False:
            where = self.batch_index[function_id] = _batch_index(manager, function_id, inputs)
        if where is None:
            return None
        index, is_size = where
        try:
            value = inputs[index] if is_size else inputs[index].shape[0]
        except (IndexError, AttributeError, TypeError):
            return None
        return value if type(value) is int and value >= 1 else None

    # -- re-record limit ------------------------------------------------------
    def enforced_limit(self, manager: Any) -> int | None:
        """PyTorch's re-record limit if it enforces one here (probed once per limit value), else None."""
        config = sys.modules.get("torch._inductor.config")
        limit = getattr(getattr(config, "triton", None), "cudagraph_unexpected_rerecord_limit", None)
        exceed = getattr(type(manager), "exceed_rerecord_limit", None)
        if type(limit) is not int or exceed is None:
            return None
        enforced = self.limit_probe.get(limit)
        if enforced is None:
            probe = _Probe(limit + 1)
            try:
                enforced = bool(exceed(probe, None, probe.key))
            except Exception:  # noqa: BLE001
                enforced = False
            self.limit_probe[limit] = enforced
        return limit if enforced else None


class _Probe:
    """Stands for a manager in ``exceed_rerecord_limit``: does PyTorch apply its limit here?"""

    key = "replayscope-probe"

    def __init__(self, count: int):
        self.num_rerecord = {None: {self.key: count}}


def _batch_index(manager: Any, function_id: Any, inputs: Any) -> tuple[int, bool] | None:
    try:
        for index, value in enumerate(inputs):
            if type(value) is int:
                return index, True
        wrapped = getattr(manager, "ids_to_funcs", {}).get(function_id)
        static = set(getattr(wrapped, "static_input_idxs", ()) or ())
        for index, value in enumerate(inputs):
            if index not in static and getattr(value, "shape", None) is not None and len(value.shape) >= 1:
                return index, False
    except Exception:  # noqa: BLE001
        pass
    return None


def limit_message(trees: GraphTrees, function_id: Any, message: str) -> str:
    """The warning when Inductor gives up recording a function: what, how often, why, what now."""
    function = trees.by_id.get(function_id)
    name = function.name if function is not None else f"compiled function {getattr(function_id, 'id', function_id)}"
    head = message.splitlines()[0] if message else ""
    limit = head.split("(=", 1)[1].split(")", 1)[0] if "(=" in head else "?"
    seen = (f" after {function.recordings} recordings (the last: {function.last_cause.replace('_', ' ')})"
            if function is not None else "")
    return (f"Inductor re-recorded {name} past PyTorch's re-record limit of {limit} "
            f"(torch._inductor.config.triton.cudagraph_unexpected_rerecord_limit){seen}: it runs without "
            f"CUDA graphs from now on")


def input_shapes(inputs: Any) -> tuple:
    try:
        return tuple(tuple(v.shape) if hasattr(v, "shape") else v for v in inputs
                     if hasattr(v, "shape") or type(v) is int)
    except Exception:  # noqa: BLE001
        return ()


def rerecords(manager: Any, function_id: Any) -> int | None:
    counts = getattr(manager, "num_rerecord", None)
    if counts is None:
        return None
    try:
        return max((per_node.get(function_id, 0) for per_node in list(counts.values())), default=0)
    except Exception:  # noqa: BLE001
        return None


def _describe_shape(shapes: tuple) -> str:
    return ", ".join(str(s) for s in shapes[:4]) + (" …" if len(shapes) > 4 else "")


def cause_of(trees: GraphTrees, function: _Function, function_id: Any, shapes: tuple) -> tuple[str, str]:
    """Why Inductor records a graph of this function now, and what was seen."""
    if function_id in function.ids:
        status = trees.mismatch
        name = getattr(status, "name", None)
        if name in MISMATCH_CAUSES:
            cause, what = MISMATCH_CAUSES[name]
            return cause, f"Inductor's check before replay failed: {what} (PyTorch: {status})"
        if status is False:
            return "unknown", "Inductor's check before replay failed (this PyTorch does not say which check)"
        return "new_path", ("no graph of this function was recorded after the graph that ran before it "
                            "(CUDA-graph trees record one per path)")
    if not function.recordings:
        return "first", f"inputs {_describe_shape(shapes)}"
    if shapes not in function.shapes:
        earlier = sorted(function.shapes, key=str)[:2]
        return "new_shape", (f"inputs {_describe_shape(shapes)}; recorded before with "
                             + "; ".join(_describe_shape(s) for s in earlier))
    return "recompiled", f"a new compiled graph for inputs seen before ({_describe_shape(shapes)})"
