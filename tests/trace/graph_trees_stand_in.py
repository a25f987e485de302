"""PyTorch Inductor's CUDA-graph tree manager, run on a CPU: ``torch._inductor.cudagraph_trees``
imports without CUDA, and its decisions (warm up, record, replay, re-record when a check before
replay fails, give up past the re-record limit, skip a function that mutates its inputs) are
plain Python in ``CUDAGraphTreeManager.run`` / ``_run``. The stand-ins below are that manager
and its recorded node with only the CUDA parts replaced: the node's check before replay answers
what the test sets, its replay is a fake CUDA graph's; the manager's start-up, warm-up and
recording skip the device. Everything else, ``run``, ``_run``, ``execute_node``,
``exceed_rerecord_limit``, the mutation check and Inductor's skip message, is torch's own."""

from __future__ import annotations

import itertools
import types
import weakref
from collections import defaultdict

import torch
from torch._inductor import cudagraph_trees as trees
from torch._inductor import cudagraph_utils

try:
    from torch.utils._ordered_set import OrderedSet
except ImportError:          # older PyTorch used plain sets here
    OrderedSet = set

Status = cudagraph_utils.CheckInvariantStatus


class StandInNode(trees.CUDAGraphNode):
    """A recorded graph: Inductor's node class; its check before replay and its replay stand in."""

    def __init__(self, manager, wrapped, graph_id, parent):   # no CUDA: not the real constructor
        self.manager = manager
        self.wrapped_function = wrapped
        self.id = graph_id
        self._parent = weakref.ref(parent) if parent is not None else None
        self.children = defaultdict(list)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):      # the recording's capture (a fake graph in the tests)
            pass

    def check_invariants(self, inputs):
        status = self.manager.check_status.get(self.wrapped_function.id, Status.SUCCESS)
        return status, (lambda: f"{status}.\n")

    def run(self, new_inputs):
        self.graph.replay()
        new_inputs.clear()
        return ["replayed"]

    def all_outputs_are_dead(self):
        return True

    def clear_path_state(self):
        pass


class StandInWarmup(trees.CUDAWarmupNode):
    def __init__(self, graph_id):           # no CUDA: not the real constructor
        self.id = graph_id

    def all_outputs_are_dead(self):
        return True


class StandInManager(trees.CUDAGraphTreeManager):
    """Inductor's tree manager; what needs a device (start-up, warm-up, recording) stands in."""

    def __init__(self, device_index: int = 0):
        # The state the real constructor sets, and its empty capture that holds the pool.
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            pass
        self.roots = defaultdict(list)
        self.ids_to_funcs = {}
        self.ids_to_stack_traces = {}
        self.warmed_up_functions = OrderedSet()
        self.warned_functions = OrderedSet()
        self.warned_mutation = OrderedSet()
        self.graph_counter = itertools.count(0)
        self.func_counter = itertools.count(0)
        self.non_cudagraph_managed_mutation_hint = defaultdict(dict)
        self.warmup_node_counter = itertools.count(start=-1, step=-1)
        self.num_rerecord = defaultdict(lambda: defaultdict(lambda: 0))
        self.path_state = trees.ExecutionState.NONE
        self.device_index = device_index
        self.current_node = None
        self.current_gen = -1
        self.debug_fail_counter = 0
        self.debug_checkpointing_counter = 0
        self.id_to_mode = {}
        self.id_to_compile_id = {}
        self.running_forwards_with_pending_backwards = False
        self.mode = None
        self.disable_invalidate_aliases = False
        self.check_status = {}          # function id -> what its nodes' check before replay answers

    def add(self, static_input_idxs=(), mutated_input_idxs=(), placeholders=(), frame_id=None):
        """A compiled function (what ``add_function`` registers, without its first call)."""
        function_id = self.new_func_id()
        self.ids_to_funcs[function_id] = cudagraph_utils.WrappedFunction(
            model=lambda inputs: ["eager"], static_input_idxs=list(static_input_idxs), id=function_id,
            constants=(), placeholders=placeholders, mutated_input_idxs=tuple(mutated_input_idxs))
        self.id_to_mode[function_id] = trees.CompilationMode.INFERENCE
        self.id_to_compile_id[function_id] = (None if frame_id is None else
                                              types.SimpleNamespace(frame_id=frame_id, frame_compile_id=0))
        return function_id

    def call(self, function_id, *inputs):
        """One call from a new ``torch.compile`` invocation, as a program's step makes it."""
        trees.mark_step_begin()
        return self.run(list(inputs), function_id)

    def run_eager(self, new_inputs, function_id):
        self.warmed_up_functions.add(function_id)
        self.current_node = StandInWarmup(self.new_warmup_node_id())
        self.path_state = trees.ExecutionState.WARMUP
        self.update_generation()
        return self.ids_to_funcs[function_id].model(new_inputs)

    def record_function(self, new_inputs, function_id):
        node = StandInNode(self, self.ids_to_funcs[function_id], self.new_graph_id(), self.current_node)
        if self.current_node is None:
            self.roots[function_id].append(node)
        else:
            self.current_node.add_child(function_id, node)
        self.current_node = node
        self.path_state = trees.ExecutionState.RECORDING
        self.update_generation()
        node.graph.replay()                 # Inductor replays a graph right after recording it
        new_inputs.clear()
        return ["recorded"]

    def apply_checkpoint_execution_state_in_allocator(self):
        pass

    def dealloc_current_path_weakrefs(self):
        pass


def module():
    """What the tracer's graph-tree hooks are installed on: torch's module, its classes stood in."""
    return types.SimpleNamespace(CUDAGraphTreeManager=StandInManager, CUDAGraphNode=StandInNode,
                                 CheckInvariantStatus=Status)
