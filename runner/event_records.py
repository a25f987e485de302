"""The emitter's queued events as values, and how they become wire events, in either process.

``Emitter`` (``replayscope.runner.emitter``) queues each event as ``RECORD`` values in a row:
``seq, ts, kind, fields, 7 x None, timing`` for any event, or ``seq, ts, STEP, stage, mode,
raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence, timing`` for a step whose fields
are spread (``Emitter.step``). Fixed-length records put every timing at ``RECORD - 1`` modulo
``RECORD``: the emitter resolves GPU timings on a C-level slice, and values of marshalable types
cross to the writer process (``replayscope.runner.event_writer``) as they are.
``EventConverter`` turns records into the sink's input (events, or steps' lines for the events
file), sampling graph steps when asked (``GraphSampler``). Standard library and
``replayscope.contract`` only: the writer process imports this, never torch.
"""

from __future__ import annotations

import time
from typing import Any

from replayscope.contract.events_file import step_line

RECORD = 12               # values per queued event
TIMING = RECORD - 1       # where its timing (seconds, None, or a timing object) is
STEP = ...                # the queued kind of a step whose eight fields follow one by one (marshalable)
_PLAIN = frozenset((type(None), float, int))


class GraphSampler:
    """Sends 1 in ``every`` graph steps as step events and counts the rest exactly.

    The counted steps leave as ``step_counts`` events, one per (second, stage, timed or
    not), split by raw batch size in ``batch_sizes``: the collector's per-second rollups,
    ratios, alerts, step times and batch-size histogram stay exact while the raw events
    drop ~``every``x. Eager and padded steps are always sent. A ``step_counts`` event takes the
    seq of the first step it counts (a seq no other event has, whichever process converts the
    events). Runs where the events are converted (the writer process or the emitter's thread),
    never on the step loop.
    """

    def __init__(self, every: int):
        self.every = every
        self._seen: dict[str, int] = {}       # stage -> graph steps seen
        self._open: dict[tuple, dict] = {}    # (stage, timed) -> the second being counted
        self.counted = 0

    def offer(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        """What to send for one converted event, in order (possibly nothing yet)."""
        second = int(event["ts"] // 1)
        if event["kind"] == "run_end":
            out = self.drain()            # every count before the end of the run
        else:
            out = self._close(lambda agg: agg["second"] < second)
        if event["kind"] != "step" or event["mode"] != "graph":
            out.append(event)
            return out
        stage = event["stage"]
        seen = self._seen.get(stage, 0)
        self._seen[stage] = seen + 1
        if seen % self.every == 0:
            out.append(event)
            return out
        self._count(event, second)
        return out

    def due(self, now: float) -> list[dict[str, Any]]:
        """The counts of seconds that are over by ``now``."""
        return self._close(lambda agg: agg["second"] < int(now // 1))

    def drain(self) -> list[dict[str, Any]]:
        return self._close(lambda agg: True)

    def _count(self, event: dict[str, Any], second: int) -> None:
        duration = event["duration_s"]
        timed = duration is not None
        key = (event["stage"], timed)
        agg = self._open.get(key)
        if agg is None:
            agg = self._open[key] = {"seq": event["seq"], "second": second, "ts": event["ts"], "count": 0,
                                     "num_tokens": 0,
                                     "duration_s": 0.0, "sizes": {}}
        agg["ts"] = event["ts"]
        agg["count"] += 1
        agg["num_tokens"] += event["num_tokens"]
        part = agg["sizes"].setdefault(event["raw_bs"], [0, 0, 0.0])
        part[0] += 1
        part[1] += event["num_tokens"]
        if timed:
            agg["duration_s"] += duration
            part[2] += duration
        self.counted += 1

    def _close(self, ready) -> list[dict[str, Any]]:
        out = []
        for key in [k for k, agg in self._open.items() if ready(agg)]:
            agg = self._open.pop(key)
            stage, timed = key
            out.append({
                "seq": agg["seq"], "ts": agg["ts"], "kind": "step_counts", "stage": stage,
                "mode": "graph", "reason": None, "count": agg["count"], "num_tokens": agg["num_tokens"],
                "padded_tokens": 0, "duration_s": agg["duration_s"] if timed else None,
                "batch_sizes": {str(bs): {"count": n, "num_tokens": tokens, "padded_tokens": 0,
                                          "duration_s": seconds if timed else None}
                                for bs, (n, tokens, seconds) in sorted(agg["sizes"].items())},
            })
        return out


def convert(seq: int, ts: float, kind: Any, fields: Any, duration: Any) -> dict[str, Any]:
    """One event as its wire dict."""
    if kind != "step":
        return {"seq": seq, "ts": ts, "kind": kind, **fields}
    stage, mode, raw_bs, graph_bs, num_tokens, padded_tokens, reason, evidence = fields
    event = {"seq": seq, "ts": ts, "kind": "step", "stage": stage, "mode": mode, "raw_bs": raw_bs,
             "graph_bs": graph_bs, "num_tokens": num_tokens, "padded_tokens": padded_tokens,
             "reason": reason, "duration_s": duration}
    if evidence is not None:
        event["evidence"] = evidence
    return event


def line(seq: int, ts: float, kind: Any, fields: Any, duration: Any) -> Any:
    """A step as its line (``replayscope.contract.events_file.step_line``), for a sink that takes lines; any
    other event, or a step with a value JSON cannot write, as its dict (the sink then fails on
    it as on any such event: its batch counted lost)."""
    if kind == "step":
        try:
            return step_line(seq, ts, fields, duration)
        except Exception:  # noqa: BLE001
            pass
    return convert(seq, ts, kind, fields, duration)


def resolve_timings(items: list, wait_for_gpu: bool) -> tuple[list, list]:
    """``items`` (whole records) split into what is ready, every timing object in it replaced by its
    seconds (and released), and what waits: from the first step whose GPU timing is not ready
    (without ``wait_for_gpu``), so that later events keep their order behind it. Only the timing
    slots are looked at; no loop over the events when none holds a timing object."""
    timings = items[TIMING::RECORD]
    if set(map(type, timings)) <= _PLAIN:
        return items, []
    for i, timing in enumerate(timings):
        if timing is None or isinstance(timing, (int, float)):
            continue
        if not timing.ready():
            if not wait_for_gpu:
                return items[:i * RECORD], items[i * RECORD:]
            timing.wait()
        items[i * RECORD + TIMING] = timing.seconds()
        timing.release()
    return items, []


class EventConverter:
    """Records to what a sink takes, in order: steps' lines for a sink that takes them (the events
    file), else wire dicts; with ``graph_sample`` > 1, graph steps sampled and counted."""

    def __init__(self, takes_step_lines: bool, graph_sample: int = 1):
        self.sampler = GraphSampler(graph_sample) if graph_sample > 1 else None
        # A step as its line: no event dict per step, and a string is nothing for the garbage
        # collector to track. Any other sink, or a sampled run, gets dicts.
        self._convert = line if takes_step_lines and self.sampler is None else convert

    def events(self, items: list, final: bool = False) -> list[Any]:
        """The sink's input for ``items`` (whole records, timings resolved); ``final``: the end of
        the run's events (every count still open goes too)."""
        out: list[Any] = []
        sampler, make = self.sampler, self._convert
        take = out.append if sampler is None else (lambda event: out.extend(sampler.offer(event)))
        for i in range(0, len(items), RECORD):
            kind = items[i + 2]
            if kind is STEP:
                take(make(items[i], items[i + 1], "step", tuple(items[i + 3:i + 11]), items[i + TIMING]))
            else:
                take(make(items[i], items[i + 1], kind, items[i + 3], items[i + TIMING]))
        if sampler is not None:
            out.extend(sampler.drain() if final else sampler.due(time.time()))
        return out
