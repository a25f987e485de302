"""Why a step ran eager: one explanation per fallback reason, and what it cost on a run.

Every entry of ``runner.wire.REASONS`` has an explanation here (a test enforces it):
what happened, why a graph cannot serve it, and what to change — this runner's flags
and the vLLM / SGLang equivalents, from the engines' public docs (vLLM: "CUDA Graphs",
https://docs.vllm.ai/en/latest/design/cuda_graphs/; SGLang: "Server Arguments",
https://docs.sglang.io/docs/advanced_features/server_arguments). Custom reasons (``custom:<text>``) are a caller's own
words and are explained as such. The cost on a given run comes from the query layer
(``reason_breakdown`` and ``step_time_by_mode``), never from here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from runner.wire import CUSTOM_REASON_PREFIX, REASONS


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
    "unknown": Explanation(
        reason="unknown",
        title="Cause not reported by the engine",
        what="The engine counted this step as eager but did not report a cause.",
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


def reason_costs(breakdown: list[dict[str, Any]],
                 step_times: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each reason of ``reason_breakdown`` with its explanation and what it cost the run.

    ``extra_s`` estimates the time lost against graph replay: the reason's eager time
    minus its steps at the run's mean graph/padded step time (None when the run has no
    replayed steps to compare with, or no step times).
    """
    replay_steps = sum(r["steps"] for r in step_times if r["mode"] in ("graph", "padded"))
    replay_s = sum((r.get("total_s") or 0.0) for r in step_times if r["mode"] in ("graph", "padded"))
    replay_mean = replay_s / replay_steps if replay_steps and replay_s > 0 else None
    out = []
    for row in breakdown:
        duration = row.get("duration_s")
        extra = None
        # prefill has no graph to compare with: its steps are not decode-shaped
        if replay_mean is not None and duration and row["reason"] != "prefill":
            extra = max(0.0, duration - replay_mean * row["steps"])
        out.append({
            "reason": row["reason"],
            "steps": row["steps"],
            "share": row.get("share"),
            "time_s": duration,
            "extra_s": extra,
            "explanation": explain(row["reason"]).as_dict(),
        })
    return out


def cost_sentence(cost: dict[str, Any]) -> str:
    """One line for an explanation card: what this reason cost on the run."""
    parts = [f"{cost['steps']:,} eager steps"]
    if cost.get("share") is not None:
        parts[0] += f" ({cost['share'] * 100:.1f}% of eager steps)"
    if cost.get("time_s"):
        parts.append(f"{cost['time_s']:.3f} s spent eager")
    if cost.get("extra_s") is not None:
        parts.append(f"about {cost['extra_s']:.3f} s more than graph replay would have taken")
    return "; ".join(parts) + "."


def explain_run(store: Any, run_id: str) -> list[dict[str, Any]]:
    """``reason_costs`` for a stored run, read through the query layer."""
    from collector import queries

    return reason_costs(queries.reason_breakdown(store, run_id),
                        queries.step_time_by_mode(store, run_id))


__all__ = ["EXPLANATIONS", "Explanation", "REASONS", "cost_sentence", "explain",
           "explain_run", "reason_costs"]
