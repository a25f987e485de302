"""Why a step ran eager: one explanation per fallback reason.

Every entry of ``replayscope.contract.wire.REASONS`` has an explanation here (a test enforces it):
what happened, why a graph cannot serve it, and what to change — this runner's flags
and the vLLM / SGLang equivalents, from the engines' public docs (vLLM: "CUDA Graphs",
https://docs.vllm.ai/en/latest/design/cuda_graphs/; SGLang: "Server Arguments",
https://docs.sglang.io/docs/advanced_features/server_arguments). Custom reasons
(``custom:<text>``) are a caller's own words and are explained as such. What a reason cost on a
run: ``replayscope.collector.analysis.explanations``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Callable

from replayscope.contract.wire import CUSTOM_REASON_PREFIX, stages_of


@dataclass(frozen=True)
class Explanation:
    reason: str
    title: str
    what: str                     # what happened
    why: str                      # why a captured graph cannot serve it
    change: tuple[str, ...]       # this runner's flags
    vllm: tuple[str, ...]         # vLLM equivalents
    sglang: tuple[str, ...]       # SGLang equivalents

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


EXPLANATIONS: dict[str, Explanation] = {
    "prefill": Explanation(
        reason="prefill",
        title="Prefill (variable-length input)",
        what="The batch carried prompt tokens, so it ran the eager forward.",
        why="A graph records fixed tensor shapes and addresses; prompt lengths differ per "
            "request, so no recorded graph has this input's shape. Decode steps (one token "
            "per request) are what graphs serve.",
        change=(
            "Expected for prefill; it only matters when it dominates. Keep prompts in "
            "fixed-size chunks if you want them graph-able.",
        ),
        vllm=(
            "Piecewise graphs cover mixed prefill-decode batches: "
            "compilation_config={\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"} (or \"PIECEWISE\").",
            "Under \"FULL_DECODE_ONLY\" every mixed batch runs NONE (eager).",
            "Chunked prefill with a fixed chunk (--max-num-batched-tokens) keeps shapes capturable.",
        ),
        sglang=(
            "--cuda-graph-backend-prefill tc_piecewise (or breakable) captures fixed-chunk "
            "extend batches; 'disabled' leaves prefill eager.",
        ),
    ),
    "batch_too_large": Explanation(
        reason="batch_too_large",
        title="Batch larger than the largest captured size",
        what="The batch size was above every captured graph, so there was nothing to pad up to.",
        why="A graph replays exactly the batch size it was captured with (or a smaller batch "
            "padded up to it); a larger batch would need a graph that was never recorded.",
        change=(
            "Raise --max-bs, or add a larger size to --capture-sizes (see the Advisor page "
            "for which sizes pay off).",
            "Or cap the scheduler's batch at the largest captured size (--max-running).",
        ),
        vllm=(
            "--cudagraph-capture-sizes with a larger last size, or raise "
            "compilation_config max_cudagraph_capture_size.",
            "--max-num-seqs caps the running batch (the default capture list ends near "
            "min(max_num_seqs x 2, 512)).",
        ),
        sglang=(
            "--cuda-graph-max-bs (decode: --cuda-graph-max-bs-decode) raises the largest size.",
            "--cuda-graph-bs lists sizes explicitly; --max-running-requests caps the batch.",
        ),
    ),
    "not_captured": Explanation(
        reason="not_captured",
        title="Size not captured and padding off",
        what="Padding was off and no graph was captured for this exact batch size.",
        why="Without padding, only a graph of exactly this batch size can run it; padding "
            "would have replayed the next larger graph and sliced the output.",
        change=(
            "Turn padding back on: drop --no-padding (padding is the default; on an H200, bs 5 "
            "padded onto the bs-8 graph ran 3.0-4.8x faster than eager, docs/gpu-results.md).",
            "Or add the sizes you see to --capture-sizes.",
        ),
        vllm=(
            "vLLM pads to the next captured size by default; list the sizes you need with "
            "--cudagraph-capture-sizes.",
        ),
        sglang=(
            "Remove --disable-cuda-graph-padding (padding is on by default).",
            "Or list every size with --cuda-graph-bs.",
        ),
    ),
    "lora_not_captured": Explanation(
        reason="lora_not_captured",
        title="LoRA adapter without a captured graph",
        what="The batch used a LoRA adapter for which no graph variant was captured.",
        why="The adapter's weights and indices are part of the recorded kernels; a graph "
            "captured without them (or with another adapter slot layout) cannot run them.",
        change=(
            "Hold more adapters in the captured graphs: --lora-graph-adapters K (adapters 1..K "
            "replay; the rest run eager).",
            "Check the eager share first: capturing LoRA variants lengthens startup.",
        ),
        vllm=(
            "Graphs are captured with LoRA when --enable-lora is set; --max-loras sets the "
            "slots (capture with many LoRAs is slow: vLLM #16716).",
        ),
        sglang=(
            "Verify the eager share with sglang:cuda_graph_passes_total before deciding to "
            "split LoRA traffic or turn graphs off; --max-loras-per-batch bounds it.",
        ),
    ),
    "grammar_switch": Explanation(
        reason="grammar_switch",
        title="Constrained decoding switched grammar",
        what="The grammar (structured output) state of the batch changed on this step.",
        why="The grammar mask metadata is not held inside the recorded graph, so a step "
            "whose mask layout changed runs the eager path.",
        change=(
            "Apply the grammar mask on the logits after replay, outside the graph, so the "
            "graph never sees grammar state.",
        ),
        vllm=(
            "vLLM applies the structured-output bitmask outside the graph; "
            "choose the backend with --structured-outputs-config / --guided-decoding-backend.",
        ),
        sglang=(
            "--grammar-backend xgrammar applies masks outside the graph; keep grammar "
            "requests in their own server if they still fall back.",
        ),
    ),
    "spec_shape": Explanation(
        reason="spec_shape",
        title="Speculative verify shape not captured",
        what="The speculative draft tree / tokens per request differed from the captured width.",
        why="Tree attention's shape is baked into the verify graph; a different number of "
            "draft tokens per request is a different shape.",
        change=(
            "Keep the draft width fixed, or capture verify graphs for each width you use.",
        ),
        vllm=(
            "Fix num_speculative_tokens in --speculative-config; verify batches are sized "
            "num_seqs x (k+1) tokens, so include those sizes in --cudagraph-capture-sizes.",
        ),
        sglang=(
            "Fix --speculative-num-draft-tokens / --speculative-eagle-topk so the captured "
            "tokens-per-request width matches.",
        ),
    ),
    "capture_failed": Explanation(
        reason="capture_failed",
        title="The graph for this size failed to capture",
        what="The graph that would serve this batch failed at startup and was dropped "
             "(degradation ladder), so its batches ran eager.",
        why="There is no graph to replay. Capture fails on out-of-memory, or on a host sync "
            "(.item(), synchronize) or an unsupported op inside the captured region.",
        change=(
            "Open the Startup page for the error of the failed capture.",
            "Fewer or smaller --capture-sizes (lower --max-bs) needs less pool memory.",
            "--backend disabled confirms whether graphs are the problem at all; --fail-capture "
            "SIZES reproduces the degradation on purpose.",
        ),
        vllm=(
            "Run with --enforce-eager to confirm it is a graph problem, "
            "then shrink --cudagraph-capture-sizes or lower --gpu-memory-utilization.",
            "An inductor/dynamo stack means compile: compilation_config level 0 / mode none.",
        ),
        sglang=(
            "Lower --cuda-graph-max-bs or --mem-fraction-static (OOM during capture), or "
            "--disable-cuda-graph while debugging.",
        ),
    ),
    "graphs_disabled": Explanation(
        reason="graphs_disabled",
        title="Graphs are off for this run",
        what="The run had CUDA graphs turned off, so every step ran eager.",
        why="Nothing was captured: the backend is eager by choice (debugging, cold-start "
            "sensitive, or after degradation removed every graph).",
        change=(
            "--backend cuda (or auto on a GPU host); --backend compile adds torch.compile.",
        ),
        vllm=(
            "Remove --enforce-eager; compilation_config cudagraph_mode must not be \"NONE\".",
        ),
        sglang=(
            "Remove --disable-cuda-graph; --cuda-graph-backend-decode full (not disabled).",
        ),
    ),
    "graph_warmup": Explanation(
        reason="graph_warmup",
        title="Warm-up or recording of a compiled function (no graph replayed yet)",
        what="A function compiled with torch.compile(mode=\"reduce-overhead\") ran its warm-up or "
             "recording call: PyTorch Inductor runs the first call for each input shape eagerly and "
             "records the graph on the next one (a capture, with synchronisations); only the calls "
             "after that replay it.",
        why="Inductor's CUDA-graph trees record a graph only after a warm-up run has settled the "
            "memory the function allocates; until then there is nothing to replay.",
        change=(
            "Expected for the first steps and for every new shape; it only matters when it keeps "
            "happening. Keep input shapes fixed (a static KV cache, padded batches) so each shape "
            "warms up once.",
            "Warm the compiled function up before serving, at the batch sizes you will use.",
        ),
        vllm=(
            "vLLM captures its own graphs for every size in --cudagraph-capture-sizes at startup, "
            "so serving steps do not warm up; Inductor's graph trees are not used there.",
        ),
        sglang=(
            "SGLang captures every size in --cuda-graph-bs at startup (with --enable-torch-compile "
            "the compiled model is captured too), so serving steps do not warm up.",
        ),
    ),
    "mutated_inputs": Explanation(
        reason="mutated_inputs",
        title="Compiled code mutates an input (Inductor skipped graphs)",
        what="PyTorch Inductor logged \"skipping cudagraphs due to mutated inputs\": the compiled "
             "function writes into an input tensor that is neither a parameter nor a buffer it knows "
             "stays at one address, so it runs without a CUDA graph.",
        why="A graph replays fixed addresses; an input that is mutated in place (a KV cache passed "
            "in as an argument, a counter tensor) may live elsewhere on the next call, and replaying "
            "would write to the old place.",
        change=(
            "Mark persistent buffers the function mutates with torch._dynamo.mark_static_address "
            "(Hugging Face's StaticCache does this when its prefill runs uncompiled), or make them "
            "module buffers.",
            "Compile only the decode step, not the prefill that allocates the cache; keep the "
            "in-place update outside the compiled region otherwise.",
        ),
        vllm=(
            "vLLM keeps its KV cache as static tensors bound before capture, so its own graphs "
            "do not hit this; it appears with custom torch.compile code around a vLLM model.",
        ),
        sglang=(
            "SGLang's KV pool is allocated once before capture; it appears with custom "
            "torch.compile code, not with --enable-torch-compile's captured graphs.",
        ),
    ),
    "cpu_device": Explanation(
        reason="cpu_device",
        title="Work on the CPU",
        what="The step ran on the CPU: the process has no usable CUDA device, never initialised "
             "CUDA, or PyTorch Inductor skipped graphs because the compiled graph holds CPU tensors "
             "(\"skipping cudagraphs due to cpu device\").",
        why="CUDA graphs record GPU work only; a graph that reads or writes a CPU tensor cannot be "
            "replayed without the host.",
        change=(
            "Move the tensors named in the evidence to the GPU (an index or a scalar created on the "
            "CPU is the usual one), or keep them out of the compiled function.",
            "On a CPU-only host this is expected: there is nothing to capture.",
        ),
        vllm=(
            "The CPU backend (--device cpu) runs without CUDA graphs; on a GPU host check that "
            "CUDA is visible to the worker (CUDA_VISIBLE_DEVICES).",
        ),
        sglang=(
            "--device cpu uses SGLang's CPU graph runner, not CUDA graphs; on a GPU host check "
            "that CUDA is visible to the scheduler process.",
        ),
    ),
    "dynamic_shapes": Explanation(
        reason="dynamic_shapes",
        title="Dynamic shapes (Inductor skipped graphs)",
        what="PyTorch Inductor skipped CUDA graphs for a graph compiled with dynamic (symbolic) "
             "shapes (torch._inductor.config.triton.cudagraph_skip_dynamic_graphs).",
        why="A graph records one shape; a function compiled for many shapes would need a graph per "
            "shape, which this setting declines.",
        change=(
            "Pad inputs to a few fixed sizes and compile with dynamic=False, or leave "
            "cudagraph_skip_dynamic_graphs off so Inductor records one graph per size seen.",
        ),
        vllm=(
            "vLLM compiles one dynamic-shape graph and captures it per size in "
            "--cudagraph-capture-sizes; sizes outside the list run without a graph.",
        ),
        sglang=(
            "SGLang pads decode batches to --cuda-graph-bs sizes, so each size has its own graph.",
        ),
    ),
    "incompatible_op": Explanation(
        reason="incompatible_op",
        title="An op that cannot be captured (Inductor skipped graphs)",
        what="PyTorch Inductor disabled CUDA graphs for a compiled graph because it holds an op that "
             "cannot be captured (a host sync, data-dependent output shapes, a CPU-side op).",
        why="Capture records GPU work without running the host; an op that needs the host "
            "mid-graph (.item(), nonzero, a Python callback) cannot be part of the recording.",
        change=(
            "Move the op named in the evidence out of the compiled function, or replace it with a "
            "shape-static equivalent (masking instead of nonzero, tensors instead of .item()).",
        ),
        vllm=(
            "vLLM splits its graph around ops it cannot capture (piecewise graphs, "
            "compilation_config splitting_ops); custom ops should be registered as such.",
        ),
        sglang=(
            "SGLang's piecewise graphs (--cuda-graph-backend-prefill tc_piecewise) split around such "
            "ops; in your own code keep them outside the captured step.",
        ),
    ),
    "non_tensor_inputs": Explanation(
        reason="non_tensor_inputs",
        title="Inputs that are not tensors (Inductor skipped graphs)",
        what="PyTorch Inductor skipped CUDA graphs because the compiled graph takes inputs that are "
             "not tensors (Python objects it cannot copy into static buffers).",
        why="A graph replays from static input buffers; an input that is not a tensor cannot be "
            "copied into one before each replay.",
        change=(
            "Pass tensors (or plain ints Dynamo can specialise on) into the compiled function; keep "
            "other objects out of its signature.",
        ),
        vllm=(
            "vLLM's compiled model takes tensors only; this appears with custom torch.compile code.",
        ),
        sglang=(
            "SGLang's captured forward takes static tensors only; this appears with custom "
            "torch.compile code.",
        ),
    ),
    "rerecord_limit": Explanation(
        reason="rerecord_limit",
        title="Re-recorded too often (Inductor gave up on the graph)",
        what="PyTorch Inductor re-recorded a function's graph more often than "
             "cudagraph_unexpected_rerecord_limit allows and now runs it eagerly.",
        why="A graph must be re-recorded when an input it treats as static moves to a new address "
            "(a parameter or buffer re-allocated between calls); past the limit re-recording costs "
            "more than it saves.",
        change=(
            "Keep the tensors the evidence names at one address: allocate them once and update "
            "them in place instead of replacing them.",
        ),
        vllm=(
            "vLLM binds its persistent buffers before capture; re-recording appears with custom "
            "torch.compile code, not with vLLM's own graphs.",
        ),
        sglang=(
            "SGLang's graph input buffers are allocated once per runner; re-recording appears with "
            "custom torch.compile code.",
        ),
    ),
    "unknown": Explanation(
        reason="unknown",
        title="Cause not reported by the engine",
        what="The engine counted this step as eager but did not report a cause (for a traced "
             "program: no graph replayed in the step and none of the causes above was seen; the "
             "step's evidence says what was).",
        why="Imported data: vLLM's CUDAGraph Stats and SGLang's cuda_graph_passes_total give "
            "the mode, not the reason. Likely causes are the ones above: batch above the "
            "largest captured size, a mixed prefill-decode batch, padding disabled, DP ranks "
            "disagreeing, or a speculative width mismatch.",
        change=(
            "Compare the batch-size histogram with the captured sizes to narrow it down.",
        ),
        vllm=(
            "NONE happens when num_tokens > the largest capture size, cudagraph_mode is NONE, "
            "a mixed batch runs under FULL_DECODE_ONLY, cascade attention runs without "
            "piecewise graphs, or a DP rank dispatched NONE.",
        ),
        sglang=(
            "decode_none happens when bs > --cuda-graph-max-bs, padding is disabled, DP/MLP "
            "sync cannot run, or speculative tokens-per-request differ from the capture.",
        ),
    ),
}


# Whose flags a reason card leads with: on an engine's run (its log or its /metrics), that
# engine's own, since a vLLM or SGLang user cannot pass this runner's --capture-sizes; on
# every other run (the runner, the library, a trace), this runner's first.
ENGINE_OF_SOURCE = {"vllm-log": "vllm", "vllm-metrics": "vllm", "sglang-log": "sglang", "sglang-metrics": "sglang"}
FLAG_ENGINES = (("replayscope", "change"), ("vLLM", "vllm"), ("SGLang", "sglang"))   # (label, Explanation field)


def engine_of(source: str | None, config: dict[str, Any] | None = None) -> str:
    """The Explanation field of the engine a run is of: its log's or metrics' engine, the engine a
    traced program ran (the trace's recipes: ``vllm``, ``sglang``), else this runner's ``change``."""
    if source == "trace":
        recipes = " ".join(((config or {}).get("trace") or {}).get("recipes") or ())
        return "vllm" if "vllm" in recipes else "sglang" if "sglang" in recipes else "change"
    return ENGINE_OF_SOURCE.get(source or "", "change")


ENGINE_TOKEN_STAGES, VLLM_SGLANG = ("prefill", "mixed"), ("vllm", "sglang")   # these engines key these by tokens


def size_in_tokens(stage: str | None, source: str | None = None, config: dict[str, Any] | None = None) -> bool:
    """Whether a size of ``stage`` (of a view, ``decode+mixed``: of one of its stages) on a run from ``source``
    is tokens (an engine's prefill and mixed batches and graphs: ``engine_of``), not a batch size of sequences."""
    return any(s in ENGINE_TOKEN_STAGES for s in stages_of(stage or "")) and engine_of(source, config) in VLLM_SGLANG


def size_words(stage: str | None, low: int, high: int | None = None, *, source: str | None = None,
               config: dict[str, Any] | None = None) -> str:
    """A size without its stage: ``bs 8``, ``bs 8–15``; ``256–511 tokens``, ``1 token`` where it is tokens."""
    one = high is None or low == high
    span = f"{low}" if one else f"{low}\u2013{high}"
    if size_in_tokens(stage, source, config):
        return f"{span} token" if one and low == 1 else f"{span} tokens"
    return f"bs {span}"


def size_label(stage: str, low: int, high: int | None = None, *, source: str | None = None,
               config: dict[str, Any] | None = None) -> str:
    """A batch or capture size in words: ``decode bs 8``, ``decode bs 8–15``; ``prefill 256–511
    tokens`` where the size is tokens (``size_words``)."""
    return f"{stage} {size_words(stage, low, high, source=source, config=config)}"


def size_namer(source: str | None, config: dict[str, Any] | None = None) -> Callable[[str | None, int], str]:
    """``size_words`` for one run's sizes: ``name(stage, size)`` (the dashboard's charts take it)."""
    return partial(size_words, source=source, config=config)


def flags_for(explanation: dict[str, Any], source: str | None,
              config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The explanation's "what to change" lines per engine, for a run from ``source`` (with its
    ``config``): the run's own engine first, then the others in the usual order; engines without
    lines left out."""
    own = engine_of(source, config)
    ordered = sorted(FLAG_ENGINES, key=lambda engine: engine[1] != own)
    return [{"engine": label, "lines": list(explanation[field])} for label, field in ordered if explanation[field]]


def explain(reason: str) -> Explanation:
    """The explanation of ``reason``; custom and unrecognised reasons get a generic one."""
    known = EXPLANATIONS.get(reason)
    if known is not None:
        return known
    if reason.startswith(CUSTOM_REASON_PREFIX):
        text = reason[len(CUSTOM_REASON_PREFIX):]
        return Explanation(
            reason=reason,
            title=f"Caller's reason: {text}",
            what=f"The code driving the runner library sent this step eager and named the "
                 f"reason itself: \"{text}\".",
            why="replayscope does not know this cause; it is recorded in the caller's words.",
            change=("See the calling code for when it chooses the eager path.",),
            vllm=(),
            sglang=(),
        )
    return Explanation(
        reason=reason, title=reason, what="A reason this version of replayscope does not know.",
        why="It was recorded by a newer producer.", change=(), vllm=(), sglang=(),
    )
