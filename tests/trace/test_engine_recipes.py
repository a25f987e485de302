"""vLLM's and SGLang's recipes, one test per layout the engines have shipped, on stand-in modules
that carry the real module names, class names and signatures (``runner/trace/vllm_recipes.py``
and ``sglang_recipes.py`` cite the source each was read in). Each stand-in module is handed to
the installer the bootstrap registers for its name, as the import hook does; its engine code
captures fake CUDA graphs and replays them the way the engine does."""

from __future__ import annotations

import types

import pytest
import torch

from replayscope.runner.trace import sglang_recipes, vllm_recipes
from tests.trace.conftest import capture, kinds


def stand_in(name: str, *classes: type) -> types.ModuleType:
    """A module named like the engine's, defining ``classes`` (their ``__module__`` is its name)."""
    module = types.ModuleType(name)
    for cls in classes:
        cls.__module__ = name
        setattr(module, cls.__name__, cls)
    return module


def install(traced, recipes, module):
    recipes.RECIPES[module.__name__](traced.tracer, module, traced.patches)


def step_rows(events):
    return [(s["stage"], s["mode"], s["raw_bs"], s["graph_bs"], s["reason"]) for s in kinds(events, "step")]


# -- SGLang -----------------------------------------------------------------------------------------
SGLANG = "sglang.srt.model_executor"


class ForwardMode:
    def __init__(self, name):
        self.name = name

    def is_idle(self):
        return self.name == "IDLE"

    def is_decode(self):
        return self.name == "DECODE"

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"

    def is_mixed(self):
        return self.name == "MIXED"

    def is_extend(self, include_draft_extend_v2=False):
        return self.name in ("EXTEND", "MIXED")


def forward_batch(bs, mode="DECODE", tokens=None):
    return types.SimpleNamespace(batch_size=bs, forward_mode=ForwardMode(mode),
                                 input_ids=torch.zeros(tokens or bs, dtype=torch.long))


def server_args(**overrides):
    return types.SimpleNamespace(**{"disable_cuda_graph": False, "model_path": "Qwen/Qwen2-7B", **overrides})


def old_sglang_layout():
    """Until 2025: ``cuda_graph_runner.CudaGraphRunner.capture_one_batch_size(bs, forward)``;
    ``ModelRunner.forward`` replays through ``graph_runner``."""

    class CudaGraphRunner:
        def __init__(self, model_runner):
            self.model_runner = model_runner
            self.graphs = {}
            for bs in (4, 2, 1):
                self.graphs[bs] = self.capture_one_batch_size(bs, None)

        def capture_one_batch_size(self, bs: int, forward, stream_idx: int = 0):
            return [capture(bs) for _ in range(2)]

        def can_run(self, fb):
            return fb.forward_mode.is_decode() and fb.batch_size <= 4

        def replay(self, fb, skip_attn_backend_init=False, pp_proxy_tensors=None):
            self.graphs[next(s for s in sorted(self.graphs) if s >= fb.batch_size)][0].replay()

    class ModelRunner:
        def __init__(self, args=None):
            self.server_args = args or server_args()
            self.graph_runner = None if self.server_args.disable_cuda_graph else CudaGraphRunner(self)

        def forward(self, forward_batch, skip_attn_backend_init=False, pp_proxy_tensors=None):
            if self.graph_runner and self.graph_runner.can_run(forward_batch):
                return self.graph_runner.replay(forward_batch)

    return (stand_in(f"{SGLANG}.model_runner", ModelRunner), stand_in(f"{SGLANG}.cuda_graph_runner", CudaGraphRunner),
            ModelRunner)


def test_sglang_until_2025_one_capture_per_batch_size_and_a_step_per_forward(traced):
    runner_module, graphs_module, ModelRunner = old_sglang_layout()
    install(traced, sglang_recipes, graphs_module)
    install(traced, sglang_recipes, runner_module)
    runner = ModelRunner()
    for batch in (forward_batch(3), forward_batch(2), forward_batch(9), forward_batch(2, "EXTEND", 40),
                  forward_batch(2, "IDLE")):
        runner.forward(batch)
    events = traced.finish()
    assert [(c["graph_bs"], c["variant"].split(",")[0]) for c in kinds(events, "capture")] == \
        [(4, "sglang"), (2, "sglang"), (1, "sglang")]
    assert traced.sinks[0].run["model"] == "Qwen/Qwen2-7B"
    assert step_rows(events) == [("decode", "padded", 3, 4, None), ("decode", "graph", 2, 2, None),
                                 ("decode", "eager", 9, None, "batch_too_large"),
                                 ("prefill", "eager", 40, None, "prefill")]
    assert kinds(events, "step")[3]["evidence"] == "prefill batch of 2 requests, 40 tokens"


def test_sglang_with_cuda_graphs_disabled_steps_say_so(traced):
    runner_module, _graphs, ModelRunner = old_sglang_layout()
    install(traced, sglang_recipes, runner_module)
    ModelRunner(server_args(disable_cuda_graph=True)).forward(forward_batch(2))
    [step] = kinds(traced.finish(), "step")
    assert step["reason"] == "graphs_disabled" and step["evidence"] == "SGLang runs with --disable-cuda-graph"


class FullCudaGraphBackend:
    """``runner_backend``: one torch.cuda.CUDAGraph per shape."""

    pieces = 1

    def __init__(self):
        self.graphs = {}

    def capture_one(self, shape_key, run_once, capture_inputs=None, post_warmup_hook=None):
        run_once()                                     # the warm-up runs before the capture
        self.graphs[shape_key.size] = [capture(0) for _ in range(self.pieces)]

    def replay(self, shape_key, forward_batch=None):
        for graph in self.graphs[shape_key.size]:
            graph.replay()


class BreakableCudaGraphBackend(FullCudaGraphBackend):
    """Segmented capture: several graphs per shape."""

    pieces = 3


class TcPiecewiseCudaGraphBackend(FullCudaGraphBackend):
    """The pieces of a torch.compile'd graph, one graph each."""

    pieces = 2


def new_sglang_layout(decode_backend=FullCudaGraphBackend, decode_name="DecodeCudaGraphRunner",
                      capture_method="capture_one_shape", decode_module="decode_cuda_graph_runner",
                      decode_sizes=(4, 2, 1)):
    """2026: ``runner/decode_cuda_graph_runner.py`` ``DecodeCudaGraphRunner.capture`` →
    ``_capture_one_stream`` → ``capture_one_shape(size, forward, stream_idx, variant_label)``;
    ``runner/prefill_cuda_graph_runner.py`` ``PrefillCudaGraphRunner.capture_one_shape(size, *,
    prefix_num_chunks=0)`` in tokens; ``ModelRunner.forward`` → ``_forward_raw``."""

    class ShapeKey(types.SimpleNamespace):
        pass

    class BaseCudaGraphRunner:
        def __init__(self, model_runner):
            self.model_runner = model_runner

    class DecodeRunner(BaseCudaGraphRunner):
        def __init__(self, model_runner):
            super().__init__(model_runner)
            self.capture_bs = sorted(decode_sizes)
            self.backend = decode_backend()
            self.capture()

        def capture(self):
            self._capture_one_stream()

        def _capture_one_stream(self, stream_idx=None):
            for bs in reversed(self.capture_bs):
                getattr(self, capture_method)(bs, forward=None, stream_idx=stream_idx, variant_label=None)

        def can_run_graph(self, fb):
            return fb.forward_mode.is_decode() and fb.batch_size <= max(self.capture_bs)

        def execute(self, fb, pp_proxy_tensors=None):
            size = next(s for s in self.capture_bs if s >= fb.batch_size)
            self.backend.replay(ShapeKey(size=size), fb)

    def capture_one_shape(self, size: int, forward, stream_idx=None, variant_label=None):
        self.backend.capture_one(ShapeKey(size=size), lambda: None, capture_inputs=None, post_warmup_hook=None)

    setattr(DecodeRunner, capture_method, capture_one_shape)
    DecodeRunner.__name__ = DecodeRunner.__qualname__ = decode_name

    class PrefillCudaGraphRunner(BaseCudaGraphRunner):
        def __init__(self, model_runner):
            super().__init__(model_runner)
            self.capture_num_tokens = [64, 128]
            self.backend = TcPiecewiseCudaGraphBackend()
            for num_tokens in reversed(self.capture_num_tokens):
                self.capture_one_shape(num_tokens)

        def capture_one_shape(self, size: int, *, prefix_num_chunks: int = 0) -> None:
            self.backend.capture_one(ShapeKey(size=size), lambda: None, capture_inputs=None)

        def can_run_graph(self, fb):
            return fb.input_ids.shape[0] <= max(self.capture_num_tokens)

        def execute(self, fb, **kwargs):
            size = next(s for s in self.capture_num_tokens if s >= fb.input_ids.shape[0])
            self.backend.replay(ShapeKey(size=size), fb)

    class ModelRunner:
        def __init__(self, args=None):
            self.server_args = args or server_args()
            self.decode_cuda_graph_runner = DecodeRunner(self)
            self.prefill_cuda_graph_runner = PrefillCudaGraphRunner(self)

        def forward(self, forward_batch, skip_attn_backend_init=None, pp_proxy_tensors=None,
                    reinit_attn_backend=False, split_forward_count=1):
            return self._forward_raw(forward_batch, pp_proxy_tensors, reinit_attn_backend, split_forward_count)

        def _forward_raw(self, forward_batch, pp_proxy_tensors, reinit_attn_backend=False, split_forward_count=1):
            if forward_batch.forward_mode.is_decode() and self.decode_cuda_graph_runner.can_run_graph(forward_batch):
                return self.decode_cuda_graph_runner.execute(forward_batch, pp_proxy_tensors=pp_proxy_tensors)
            if forward_batch.forward_mode.is_extend() and self.prefill_cuda_graph_runner.can_run_graph(forward_batch):
                return self.prefill_cuda_graph_runner.execute(forward_batch)
            return None                                  # the eager runner

    modules = (stand_in(f"{SGLANG}.model_runner", ModelRunner),
               stand_in(f"{SGLANG}.runner.{decode_module}", BaseCudaGraphRunner, DecodeRunner),
               stand_in(f"{SGLANG}.runner.prefill_cuda_graph_runner", PrefillCudaGraphRunner))
    return modules, ModelRunner


def test_sglang_2026_runner_package_captures_each_shape_once_labelled_with_its_backend(traced):
    modules, ModelRunner = new_sglang_layout(decode_backend=BreakableCudaGraphBackend)
    for module in modules:
        install(traced, sglang_recipes, module)
    runner = ModelRunner()
    for batch in (forward_batch(3), forward_batch(4), forward_batch(6), forward_batch(2, "EXTEND", 100),
                  forward_batch(3, "EXTEND", 500)):
        runner.forward(batch)
    events = traced.finish()
    captures = [(c["graph_bs"], c["stage"], c["variant"].rsplit(", pool", 1)[0]) for c in kinds(events, "capture")]
    assert captures == [(4, "decode", "sglang breakable, 3 graphs"), (2, "decode", "sglang breakable, 3 graphs"),
                        (1, "decode", "sglang breakable, 3 graphs"), (128, "prefill", "sglang tc_piecewise, 2 graphs"),
                        (64, "prefill", "sglang tc_piecewise, 2 graphs")]
    assert step_rows(events) == [("decode", "padded", 3, 4, None), ("decode", "graph", 4, 4, None),
                                 ("decode", "eager", 6, None, "batch_too_large"),
                                 ("prefill", "padded", 100, 128, None),
                                 ("prefill", "eager", 500, None, "batch_too_large")]
    assert kinds(events, "step")[4]["evidence"] == "batch of 500; largest captured graph holds 128"
    recipes = traced.sinks[0].run["config"]["trace"]["recipes"]
    assert {"sglang", "sglang decode_cuda_graph_runner", "sglang prefill_cuda_graph_runner"} <= set(recipes)


def test_sglang_2026_full_backend_is_one_graph_per_shape_and_a_subclass_capture_counts_once(traced):
    modules, ModelRunner = new_sglang_layout()
    decode = modules[1].DecodeCudaGraphRunner

    class DraftDecodeCudaGraphRunner(decode):         # a speculative runner: super().capture_one_shape
        def capture_one_shape(self, size, forward, stream_idx=None, variant_label=None):
            return super().capture_one_shape(size, forward, stream_idx, variant_label)

    DraftDecodeCudaGraphRunner.__module__ = modules[1].__name__
    modules[1].DraftDecodeCudaGraphRunner = DraftDecodeCudaGraphRunner
    for module in modules:
        install(traced, sglang_recipes, module)
    DraftDecodeCudaGraphRunner(types.SimpleNamespace(server_args=server_args()))
    captures = [(c["graph_bs"], c["variant"].rsplit(", pool", 1)[0]) for c in kinds(traced.finish(), "capture")]
    assert captures == [(4, "sglang full"), (2, "sglang full"), (1, "sglang full")]


def test_sglang_runner_package_first_form_decode_runner_is_traced_too(traced):
    modules, ModelRunner = new_sglang_layout(decode_name="DecodeRunner", decode_module="decode_runner")
    for module in modules:
        install(traced, sglang_recipes, module)
    ModelRunner().forward(forward_batch(2))
    events = traced.finish()
    assert [c["graph_bs"] for c in kinds(events, "capture") if c["stage"] == "decode"] == [4, 2, 1]
    assert step_rows(events) == [("decode", "graph", 2, 2, None)]


def test_sglang_2026_decode_backend_disabled_steps_say_so(traced):
    modules, ModelRunner = new_sglang_layout()
    install(traced, sglang_recipes, modules[0])
    args = server_args(cuda_graph_config=types.SimpleNamespace(decode=types.SimpleNamespace(backend="disabled")))
    runner = ModelRunner.__new__(ModelRunner)
    runner.server_args = args
    runner.decode_cuda_graph_runner = types.SimpleNamespace(can_run_graph=lambda fb: False)
    runner.prefill_cuda_graph_runner = types.SimpleNamespace(can_run_graph=lambda fb: False)
    runner.forward(forward_batch(2))
    [step] = kinds(traced.finish(), "step")
    assert (step["reason"], step["evidence"]) == ("graphs_disabled",
                                                  "SGLang's decode CUDA-graph backend is disabled (cuda_graph_config)")


def test_an_sglang_layout_the_recipe_does_not_know_is_a_warning_naming_the_symbol(traced):
    modules, _runner = new_sglang_layout(capture_method="capture_shape")
    install(traced, sglang_recipes, modules[1])
    capture(4)
    [warning] = [w for w in kinds(traced.finish(), "warning") if w["code"] == "recipe_incomplete"]
    assert warning["message"] == ("the SGLang recipe found no DecodeCudaGraphRunner.capture_one_shape in "
                                  "sglang.srt.model_executor.runner.decode_cuda_graph_runner (a layout it does not "
                                  "know): captures are sized from the capturing frames")


# -- vLLM -------------------------------------------------------------------------------------------
class Mode:
    def __init__(self, name):
        self.name = name


def scheduled(*per_request, spec=None):
    return types.SimpleNamespace(total_num_scheduled_tokens=sum(per_request),
                                 num_scheduled_tokens={f"r{i}": n for i, n in enumerate(per_request)},
                                 scheduled_spec_decode_tokens=spec or {})


def v1_layout(enforce_eager=False):
    """``v1/worker/gpu_model_runner.py``: ``execute_model`` and ``_dummy_run(num_tokens,
    cudagraph_runtime_mode=None, ...)`` per captured size."""

    class GPUModelRunner:
        def __init__(self):
            self.model_config = types.SimpleNamespace(model="meta-llama/Llama-3.1-8B", enforce_eager=enforce_eager)
            self.graphs = {}

        def _dummy_run(self, num_tokens: int, cudagraph_runtime_mode=None, force_attention=False,
                       uniform_decode=False, allow_microbatching=True, skip_eplb=False, is_profile=False):
            if cudagraph_runtime_mode is not None:
                self.graphs[num_tokens] = [capture(0) for _ in range(3)]      # piecewise: 3 pieces

        def capture_model(self):
            for num_tokens in (8, 4, 2, 1):
                self._dummy_run(num_tokens, cudagraph_runtime_mode=Mode("PIECEWISE"))

        def execute_model(self, scheduler_output, intermediate_tensors=None):
            tokens = scheduler_output.total_num_scheduled_tokens
            size = next((s for s in sorted(self.graphs) if s >= tokens), None)
            if size is not None and len(scheduler_output.num_scheduled_tokens) == tokens:
                for piece in self.graphs[size]:
                    piece.replay()

    return stand_in("vllm.v1.worker.gpu_model_runner", GPUModelRunner), GPUModelRunner


def test_vllm_v1_one_capture_per_size_and_a_step_per_execute_model(traced):
    module, GPUModelRunner = v1_layout()
    install(traced, vllm_recipes, module)
    runner = GPUModelRunner()
    runner._dummy_run(8, is_profile=True)        # a profile run: no capture, no event
    runner.capture_model()
    for batch in (scheduled(1, 1, 1), scheduled(1, 1, 1, 1), scheduled(7, 1), scheduled()):
        runner.execute_model(batch)
    events = traced.finish()
    captures = kinds(events, "capture")
    assert [c["graph_bs"] for c in captures] == [8, 4, 2, 1]
    assert all(c["variant"].startswith("vllm PIECEWISE, 3 graphs") for c in captures)
    assert step_rows(events) == [("decode", "padded", 3, 4, None), ("decode", "graph", 4, 4, None),
                                 ("mixed", "eager", 8, None, "prefill")]
    assert traced.sinks[0].run["model"] == "meta-llama/Llama-3.1-8B"


def test_vllm_with_enforce_eager_steps_are_graphs_disabled(traced):
    module, GPUModelRunner = v1_layout(enforce_eager=True)
    install(traced, vllm_recipes, module)
    GPUModelRunner().execute_model(scheduled(1, 1))
    [step] = kinds(traced.finish(), "step")
    assert step["reason"] == "graphs_disabled"


def v2_layout(with_capture_graph=True):
    """Model runner V2: ``v1/worker/gpu/model_runner.py`` ``GPUModelRunner.execute_model(
    scheduler_output, intermediate_tensors=None, dummy_run=False, skip_attn_for_dummy_run=False,
    is_profile=False)``; ``gpu/cudagraph/manager.py`` ``CudaGraphManager.capture_graph(cudagraph_key,
    model, ...)`` per size, keyed by ``CudaGraphKey(is_full_graph, num_reqs, total_num_tokens,
    is_uniform)``."""

    class CudaGraphKey(types.SimpleNamespace):
        pass

    class CudaGraphManager:
        def __init__(self):
            self.full_graphs, self.pw_graphs = {}, {}

        def capture_graph(self, cudagraph_key, model, model_state, input_buffers, block_tables, attn_groups,
                          kv_cache_config):
            store = self.full_graphs if cudagraph_key.is_full_graph else self.pw_graphs
            pieces = 1 if cudagraph_key.is_full_graph else 3
            store[cudagraph_key.total_num_tokens] = [capture(0) for _ in range(pieces)]

        def capture(self, model, model_state, input_buffers, block_tables, attn_groups, kv_cache_config):
            for size in (8, 4):                                      # mixed batches: piecewise
                key = CudaGraphKey(is_full_graph=False, num_reqs=size, total_num_tokens=size, is_uniform=False)
                self.capture_graph(key, model, model_state, input_buffers, block_tables, attn_groups,
                                   kv_cache_config)
            for num_reqs in (4, 2, 1):                               # uniform decode: FULL
                key = CudaGraphKey(is_full_graph=True, num_reqs=num_reqs, total_num_tokens=num_reqs,
                                   is_uniform=True)
                self.capture_graph(key, model, model_state, input_buffers, block_tables, attn_groups,
                                   kv_cache_config)

    if not with_capture_graph:
        del CudaGraphManager.capture_graph

    class GPUModelRunner:
        def __init__(self):
            self.model_config = types.SimpleNamespace(model="Qwen/Qwen3-8B", enforce_eager=False)
            self.cudagraph_manager = CudaGraphManager()

        def capture_model(self):
            self.cudagraph_manager.capture(None, None, None, None, None, None)

        def execute_model(self, scheduler_output, intermediate_tensors=None, dummy_run=False,
                          skip_attn_for_dummy_run=False, is_profile=False):
            if dummy_run:
                return None
            tokens = scheduler_output.total_num_scheduled_tokens
            graphs = self.cudagraph_manager.full_graphs
            size = next((s for s in sorted(graphs) if s >= tokens), None)
            if size is not None and len(scheduler_output.num_scheduled_tokens) == tokens:
                for graph in graphs[size]:
                    graph.replay()

    return (stand_in("vllm.v1.worker.gpu.model_runner", GPUModelRunner),
            stand_in("vllm.v1.worker.gpu.cudagraph.manager", CudaGraphKey, CudaGraphManager), GPUModelRunner)


def test_vllm_model_runner_v2_its_cudagraph_manager_captures_one_size_per_key(traced):
    runner_module, manager_module, GPUModelRunner = v2_layout()
    install(traced, vllm_recipes, runner_module)
    install(traced, vllm_recipes, manager_module)
    runner = GPUModelRunner()
    runner.capture_model()
    runner.execute_model(scheduled(1, 1), dummy_run=True)          # its dummy run: not a step
    runner.execute_model(scheduled(1, 1, 1))
    runner.execute_model(scheduled(1, 1))
    events = traced.finish()
    assert [(c["graph_bs"], c["variant"].rsplit(", pool", 1)[0]) for c in kinds(events, "capture")] == [
        (8, "vllm PIECEWISE, 3 graphs"), (4, "vllm PIECEWISE, 3 graphs"), (4, "vllm FULL"), (2, "vllm FULL"),
        (1, "vllm FULL")]
    assert step_rows(events) == [("decode", "padded", 3, 4, None), ("decode", "graph", 2, 2, None)]
    assert "vllm cudagraph manager" in traced.sinks[0].run["config"]["trace"]["recipes"]


def test_vllm_v2_cudagraph_utils_captures_are_sized_from_the_capturing_frames(traced):
    """``gpu/cudagraph_utils.py``: ``CudaGraphManager.capture(create_forward_fn)`` loops over its
    ``BatchExecutionDescriptor``s (``desc``) and captures each under ``torch.cuda.graph``."""

    class CudaGraphManager:
        def capture(self, create_forward_fn, progress_bar_desc="Capturing CUDA graphs"):
            for desc in [types.SimpleNamespace(num_tokens=n, num_reqs=n) for n in (8, 2)]:
                forward_fn = create_forward_fn(desc, warmup=False)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, None):
                    forward_fn(None)

    CudaGraphManager().capture(lambda desc, warmup: (lambda mode: None))
    assert [c["graph_bs"] for c in kinds(traced.finish(), "capture")] == [8, 2]


def test_a_vllm_layout_the_recipe_does_not_know_is_a_warning_naming_the_symbol(traced):
    runner_module, manager_module, _runner = v2_layout(with_capture_graph=False)
    install(traced, vllm_recipes, manager_module)
    install(traced, vllm_recipes, stand_in("vllm.v1.worker.gpu_model_runner"))
    capture(4)
    warnings = [w["message"] for w in kinds(traced.finish(), "warning") if w["code"] == "recipe_incomplete"]
    assert warnings == [
        "the vLLM recipe found no CudaGraphManager.capture_graph in vllm.v1.worker.gpu.cudagraph.manager (a layout "
        "it does not know): captures are sized from the capturing frames",
        "the vLLM recipe found no GPUModelRunner.execute_model in this version: its steps are not traced (name one "
        "with --step)"]


@pytest.mark.parametrize("recipes, names", [
    (sglang_recipes, {"sglang.srt.model_executor.model_runner", "sglang.srt.model_executor.cuda_graph_runner",
                      "sglang.srt.model_executor.runner.decode_cuda_graph_runner",
                      "sglang.srt.model_executor.runner.prefill_cuda_graph_runner",
                      "sglang.srt.model_executor.runner.decode_runner",
                      "sglang.srt.model_executor.runner.prefill_runner",
                      "sglang.srt.managers.scheduler_components.output_streamer",
                      "sglang.srt.entrypoints.engine"}),
    (vllm_recipes, {"vllm.v1.worker.gpu_model_runner", "vllm.v1.worker.gpu.model_runner",
                    "vllm.v1.worker.gpu.cudagraph.manager", "vllm.v1.worker.gpu.cudagraph_utils",
                    "vllm.v1.worker.gpu_worker"})])
def test_every_layout_is_registered_under_the_engines_module_name(recipes, names):
    assert set(recipes.RECIPES) == names
    from replayscope.runner.trace import bootstrap, graph_trees, hooks
    from replayscope.runner.trace import recipes as base
    assert names <= {**hooks.TORCH_HOOKS, **graph_trees.GRAPH_TREE_HOOKS, **base.RECIPES,
                     **bootstrap.SGLANG_RECIPES, **bootstrap.VLLM_RECIPES}.keys()


@pytest.mark.parametrize("package, recipes, layout", [("vllm", vllm_recipes, "vllm"), ("sglang", sglang_recipes, "sglang")])
def test_a_traced_engines_run_carries_the_engines_version_from_its_package(traced, monkeypatch, package, recipes,
                                                                          layout):
    """The run record's ``version`` is the engine's own (its package's ``__version__``): the advisor
    names "SGLang 0.5.17" rather than "version not in the log", the fleet groups by it."""
    monkeypatch.setitem(__import__("sys").modules, package, types.SimpleNamespace(__version__="0.5.17"))
    if layout == "vllm":
        module, runner_class = v1_layout()
        install(traced, recipes, module)
        runner_class().capture_model()
    else:
        modules, runner_class = new_sglang_layout()
        for module in modules:
            install(traced, recipes, module)
        runner_class().forward(forward_batch(3))
    traced.finish()
    assert traced.sinks[0].run["version"] == "0.5.17"


def test_an_engine_whose_version_cannot_be_read_leaves_the_runs_version_out(traced, monkeypatch):
    import importlib.metadata
    monkeypatch.setitem(__import__("sys").modules, "vllm", types.SimpleNamespace())      # no __version__

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    module, runner_class = v1_layout()
    install(traced, vllm_recipes, module)
    runner_class().capture_model()
    traced.finish()
    assert "version" not in traced.sinks[0].run
