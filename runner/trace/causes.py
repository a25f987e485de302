"""How a traced step ran, and why: a pure function of what the hooks saw during it.

No torch here: the tracer collects facts (replays, the graphs' sizes, Inductor's calls and
messages, the device) and ``decide`` turns them into the step's mode, graph size, reason and
evidence, in one visible order of precedence.
"""

from __future__ import annotations

from dataclasses import dataclass

EVIDENCE_MAX_CHARS = 500

# Inductor's own words for skipping CUDA graphs ("skipping cudagraphs due to ..."), mapped
# into the reason vocabulary. Checked in this order; the first phrase found wins.
INDUCTOR_SKIP_PHRASES = (
    ("re-recording limit", "rerecord_limit"),
    ("mutated inputs", "mutated_inputs"),
    ("input storage mutation", "mutated_inputs"),
    ("cpu device", "cpu_device"),
    ("non-tensor inputs", "non_tensor_inputs"),
    ("incompatible op", "incompatible_op"),
    ("symbolic shape", "dynamic_shapes"),
    ("dynamic shape", "dynamic_shapes"),
)


def clip(text: str, limit: int = EVIDENCE_MAX_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def inductor_skip_reason(message: str) -> str:
    """The reason for Inductor's skip message; ``unknown`` when it names none of ours."""
    head = message.splitlines()[0].lower() if message else ""
    for phrase, reason in INDUCTOR_SKIP_PHRASES:
        if phrase in head:
            return reason
    if "multiple devices" in head and "cpu" in head:
        return "cpu_device"
    return "unknown"


def inductor_skip_evidence(message: str) -> str:
    """Inductor's message as evidence: its first line (the stack trace that follows is long)."""
    head = message.splitlines()[0] if message else ""
    return clip(f"Inductor: {head.strip()}")


@dataclass(frozen=True)
class Cause:
    reason: str
    evidence: str | None = None


@dataclass(frozen=True)
class StepFacts:
    """What the hooks saw during one step, and what the process knew when it ended."""

    stage: str
    raw_bs: int
    replays: int = 0
    replayed_bs: int = 0                   # largest known size among the graphs replayed; 0: none known
    inductor_eager: Cause | None = None    # an Inductor cudagraph call in the step ran without its graph
    recipe_hint: Cause | None = None       # what the engine's own state says (prefill, graphs off)
    compile_skip: Cause | None = None      # the latest skip Inductor decided at compile time
    no_graph: Cause | None = None          # why the process has no graph at all (the device, Inductor's config)
    captured_sizes: tuple[int, ...] = ()   # sizes of the graphs captured in the process so far


@dataclass(frozen=True)
class StepOutcome:
    mode: str
    graph_bs: int | None
    reason: str | None
    evidence: str | None = None


def _sizes(sizes: tuple[int, ...]) -> str:
    shown = ", ".join(str(s) for s in sizes[:12])
    return shown + (f", … ({len(sizes)} sizes)" if len(sizes) > 12 else "")


def replayed(raw_bs: int, replayed_bs: int) -> StepOutcome | None:
    """A step that replayed a graph of a known size at least its batch: graph, or padded."""
    if replayed_bs == raw_bs:
        return StepOutcome("graph", replayed_bs, None)
    if replayed_bs > raw_bs:
        return StepOutcome("padded", replayed_bs, None)
    return None


def decide(facts: StepFacts) -> StepOutcome:
    """The step's mode, graph size, reason and evidence. The order of the checks is the order of
    precedence: an Inductor call that ran without its graph makes the step eager even when other
    graphs replayed in it, because then the step's work did not all run as a graph."""
    if facts.inductor_eager is not None:
        cause = facts.inductor_eager
        evidence = cause.evidence
        if facts.replays:
            evidence = clip(f"{evidence or cause.reason}; {facts.replays} replays of other graphs in the step")
        return StepOutcome("eager", None, cause.reason, evidence)
    if facts.replays:
        size = facts.replayed_bs
        outcome = replayed(facts.raw_bs, size)
        if outcome is not None:
            return outcome
        if size == 0:
            note = f"{facts.replays} replays of graphs whose batch size was not seen at capture"
        else:
            note = f"largest graph replayed holds {size} rows, the batch {facts.raw_bs}"
        return StepOutcome("graph", facts.raw_bs, None, clip(note))
    if facts.recipe_hint is not None:
        return StepOutcome("eager", None, facts.recipe_hint.reason, facts.recipe_hint.evidence)
    if facts.compile_skip is not None:
        return StepOutcome("eager", None, facts.compile_skip.reason, facts.compile_skip.evidence)
    if facts.captured_sizes:            # graphs exist (so CUDA is in use): why none served this batch
        if facts.raw_bs > facts.captured_sizes[-1]:
            return StepOutcome("eager", None, "batch_too_large", f"batch of {facts.raw_bs}; largest "
                                                                 f"captured graph holds {facts.captured_sizes[-1]}")
        return StepOutcome("eager", None, "unknown", clip(
            f"no graph replayed in the step; graphs captured in this process for batch sizes "
            f"{_sizes(facts.captured_sizes)}"))
    if facts.no_graph is not None:
        return StepOutcome("eager", None, facts.no_graph.reason, clip(facts.no_graph.evidence or ""))
    return StepOutcome("eager", None, "unknown",
                       "no graph replayed in the step; no CUDA graph captured in this process so far")
