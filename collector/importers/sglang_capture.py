"""SGLang's capture sections as a run sees them: each ``Capture ... begin`` to its ``end``
(or failure), with its progress bar, and the per-size capture events made of it.

``SectionCaptures`` holds the capture handlers of ``replayscope.collector.importers.sglang_log.SglangRun``
(a mixin: the run's ``sections`` and ``open`` are its state, set by the run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replayscope.collector.importers.facts import Fact, clip, int_list, num, rank_order
from replayscope.collector.importers.failures import EXCEPTION_LINE
from replayscope.collector.importers.lines import LogLine
from replayscope.collector.importers.sglang_lines import KV, STAGES, mem_in


@dataclass
class _Section:
    """One capture pass: a ``Capture ... begin`` to its ``end`` (or failure)."""
    role: str
    stage: str
    dev: str
    rank: Any
    rank_label: str | None
    backend: str | None = None
    sizes: list[int] = field(default_factory=list)
    begin_ts: float | None = None
    tqdm: list[Fact] = field(default_factory=list)
    ended: bool = False
    failed: bool = False
    error: str | None = None
    elapsed: float | None = None
    mem_usage: int | None = None
    end_avail: int | None = None
    end_ts: float | None = None
    emitted: bool = False

    @property
    def label(self) -> str:
        return f"{self.role}.{self.stage}"

    def bar_total(self) -> int | None:
        """How many sizes the section's bar counts (its N/total), if it drew one."""
        return max((f.data["total"] for f in self.tqdm), default=None)

    def bar_sizes(self) -> dict[int, int]:
        """Position -> size, from bar updates that name their size. SGLang sets the size as
        the description before it captures it and tqdm draws again after the update, so
        ``bs=X`` first shows at ``k/N`` when X is the (k+1)-th; an excerpt that starts at X's
        second drawing shows X and the next size at the same ``k``: X was the k-th."""
        first: dict[int, int] = {}
        previous = None
        for f in self.tqdm:
            bs, n = f.data.get("bs"), f.data["n"]
            if not bs or bs in first:
                continue
            if previous is not None and first[previous] == n:
                first[previous] = n - 1
            first[bs], previous = n, bs
        total = self.bar_total() or 0
        return {n: bs for bs, n in first.items() if 0 <= n < total}

    def known_sizes(self) -> list[int]:
        """The sizes of the section as the log states them: the printed list, else a bar
        seen naming every one of its sizes; [] when neither (a bar cut off in the excerpt
        shows some sizes, not which sizes there were)."""
        if self.sizes:
            return sorted(set(self.sizes))
        named, total = self.bar_sizes(), self.bar_total()
        if total and sorted(named) == list(range(total)):
            return sorted(set(named.values()))
        return []

    def largest(self) -> int | None:
        """The largest size: of the list, else the bar's first (SGLang captures largest first)."""
        known = self.known_sizes()
        return max(known) if known else self.bar_sizes().get(0)

    def planned(self) -> int | None:
        """How many sizes the section captures: the list's length, else the bar's total."""
        return len(self.known_sizes()) or self.bar_total()

    def current_bs(self) -> int | None:
        """The size the bar was on last (a bar without sizes: from its count and the list)."""
        if not self.tqdm:
            return None
        d = self.tqdm[-1].data
        n = d["n"]
        order = sorted(set(self.sizes), reverse=True)
        if d.get("bs"):
            bs = int(d["bs"])
            started = {size: k for k, size in self.bar_sizes().items()}.get(bs)
            if started is not None and n > started and bs in order:
                # the bar was redrawn after bs's update: bs is done, the next size was under way
                following = order[order.index(bs) + 1:]
                return following[0] if following else None
            return bs
        if n < len(order):
            return order[n]
        return None


def unfinished_capture(section: _Section, last_ts: float | None, *, run_failed: bool) -> dict[str, Any]:
    """A capture section that never ended (failed, or the log stops inside it): how far it
    got and its time so far, which is not a capture total (``config.capture_unfinished``)."""
    elapsed = max((f.data["elapsed_s"] for f in section.tqdm if f.data["elapsed_s"] is not None), default=None)
    until = section.end_ts if section.end_ts is not None else last_ts
    if elapsed is None and section.begin_ts is not None and until is not None:
        elapsed = max(0.0, until - section.begin_ts)
    last = section.tqdm[-1].data if section.tqdm else {}
    return {"elapsed_s": elapsed, "graphs_done": last.get("n"), "graphs": last.get("total") or section.planned(),
            "pass": section.label, "status": "failed" if section.failed or run_failed else "incomplete"}


class SectionCaptures:
    """The capture handlers of an SGLang run (``on_capture_*``, ``on_tqdm``)."""

    sections: list[_Section]
    open: dict[Any, _Section]

    def _open(self, fact: Fact, role: str | None, stage: str | None, dev: str) -> _Section:
        section = _Section(role=(role or "target").lower(), stage=(stage or "decode").lower(), dev=dev.lower(),
                           rank=fact.line.rank, rank_label=fact.line.rank_label, begin_ts=fact.line.ts)
        self.sections.append(section)
        self.open[fact.line.rank] = section
        self.stage = "capture"
        return section

    def _section_for(self, fact: Fact, d: dict[str, Any]) -> _Section:
        section = self.open.get(fact.line.rank)
        if section is None:
            section = self._open(fact, d.get("role"), d.get("stage"), d.get("dev") or "cuda")
        return section

    def on_capture_begin(self, fact: Fact) -> None:
        d = fact.data
        previous = self.open.get(fact.line.rank)
        if previous is not None and not previous.tqdm and not previous.ended:
            self.sections.remove(previous)       # a begin with no end: the newer one stands
        section = self._open(fact, d["role"], d["stage"], d["dev"])
        rest = d["rest"]
        m = KV["backend"].search(rest)
        section.backend = m.group(1) if m else None
        m = KV["bs"].search(rest) or KV["num_tokens"].search(rest)
        if m:
            section.sizes = int_list(m.group(1))

    def on_capture_bs(self, fact: Fact) -> None:
        # "num tokens" is the piecewise runner's list (prefill graphs), not the decode sizes
        piecewise = fact.data["what"].lower() == "num tokens"
        section = self.open.get(fact.line.rank)
        if section is None or (piecewise and section.stage != "piecewise"):
            section = self._open(fact, None, "piecewise" if piecewise else None, fact.data.get("dev") or "cuda")
        section.sizes = int_list(fact.data["bs"])

    def on_tqdm(self, fact: Fact) -> None:
        # SGLang draws the bar on rank 0 only, and without a rank prefix: it belongs to the
        # section the lowest rank has open
        section = self._bar_section()
        if section is None:
            if not fact.data.get("named"):
                return                              # some other bar (a download, a checkpoint)
            section = self._open(fact, None, None, "cuda")
        section.tqdm.append(fact)

    def _bar_section(self) -> _Section | None:
        open_sections = [s for s in self.open.values() if not s.ended and not s.failed]
        return min(open_sections, key=lambda s: rank_order(s.rank)) if open_sections else None

    def on_capture_end(self, fact: Fact) -> None:
        d = fact.data
        section = self._section_for(fact, d)
        rest = d["rest"]
        e = KV["elapsed"].search(rest)
        section.ended = True
        section.elapsed = num(e.group(1)) if e else None
        section.mem_usage = mem_in(KV["mem_usage"], rest)
        section.end_avail = mem_in(KV["avail"], rest)
        section.end_ts = fact.line.ts
        self.open.pop(fact.line.rank, None)
        if not self.open:
            self.stage = "warmup"
        self.phase(fact, f"capture.{section.role}.{section.stage}", section.elapsed, section.mem_usage, hold=True)
        self._capture_total(fact)
        self._emit_captures(section)

    def _capture_total(self, fact: Fact) -> None:
        """The whole capture of this rank: the sum of its ended sections (held: another
        section may follow)."""
        mine = [s for s in self.sections if s.ended and s.rank == fact.line.rank]
        timed = [s.elapsed for s in mine if s.elapsed is not None]
        mems = [s.mem_usage for s in mine if s.mem_usage is not None]
        event = {"kind": "phase", "ts": fact.line.ts, "phase": "capture",
                 "duration_s": sum(timed) if timed else None,
                 "start_ts": None if fact.line.ts is None or not timed else fact.line.ts - sum(timed),
                 "mem_bytes": sum(mems) if mems else None, "rank": fact.line.rank_label}
        self.note_headline("capture", fact.line)
        self.hold(("capture", fact.line.rank), event)

    def on_capture_failed(self, fact: Fact) -> None:
        d = fact.data
        section = self.open.get(fact.line.rank) or self._bar_section()
        if section is None:
            section = self._open(fact, d["role"], d["stage"], d["dev"])
        # "Capture cuda graph failed: {e}": e's text, where the line has it; an empty one names no
        # cause, so the exception the traceback printed (or the scheduler's line) stays the error
        error = clip(d["error"], 4000) or None
        if not section.failed:
            section.failed = True
            section.error = error
            section.end_ts = fact.line.ts
        self.open.pop(section.rank, None)
        trace = self.trace.get(fact.line.rank)
        if trace is not None and EXCEPTION_LINE.match(fact.line.text):
            trace["error"] = True                      # the traceback's own exception line: not cut
        said = None
        if error:
            said = clip("capture failed: " + error, 4000)
        elif EXCEPTION_LINE.match(fact.line.text):
            # the exception line is in the log, with nothing after the colon: not cut off
            said = f"{fact.line.text.strip().rstrip(':').strip()} (the exception's message is empty)"
        self.fail(fact, said, phase="capture", graph_bs=section.current_bs(), wrapper=False if said else None)
        self._emit_captures(section)

    def capturing_bs(self) -> int | None:
        section = self._bar_section()
        return section.current_bs() if section else None

    def _emit_captures(self, s: _Section) -> None:
        """Per-size captures of a section. The bar names each size as it starts (largest
        first); a size's time is the bar's elapsed time when the next size starts minus when
        this one started (whole seconds), its memory the drop in ``avail_mem``. Sizes the
        section lists but the bar gives nothing for are captures of unknown length."""
        if s.emitted:
            return
        s.emitted = True
        if not s.tqdm and any(o.tqdm and o.role == s.role and o.stage == s.stage and o is not s
                              for o in self.sections):
            return                                   # the bar went to another rank's section
        stage = STAGES.get(s.stage, "decode")
        compiled = self.args.get("enable_torch_compile") and s.role == "target" and stage == "decode"
        max_compile_bs = self.args.get("torch_compile_max_bs", 32)
        order = sorted(set(s.known_sizes()), reverse=True)   # SGLang captures the largest first
        seen: dict[int, tuple[int | None, int | None]] = {}   # bs -> (avail when it started, count done then)
        first_at: dict[int, float] = {}
        named_bar = any(f.data.get("bs") for f in s.tqdm)
        for fact in s.tqdm:
            d = fact.data
            n, el = d["n"], d["elapsed_s"]
            if el is not None:
                first_at[n] = min(first_at.get(n, el), el)
            if d.get("bs"):
                seen.setdefault(int(d["bs"]), (d.get("avail"), n))
            elif not named_bar and n < len(order):
                seen.setdefault(order[n], (d.get("avail"), n))
        # without the list, the sizes are those the bar named, and only from its first one on:
        # an excerpt that starts inside the bar shows some sizes, not which sizes there were
        sizes = order or (list(seen) if 0 in s.bar_sizes() else [])
        if not sizes:
            if seen:
                self.warnings.append(f"the {s.label} capture bar starts before this excerpt does: which sizes "
                                     f"it captured is not in the log, so no per-size captures are recorded")
            return
        position = {bs: i for i, bs in enumerate(sizes)}
        failing = s.failed or (not s.ended and self.failed())
        failed_bs = s.current_bs() if failing else None

        def done(bs: int) -> bool:
            n = seen.get(bs, (None, None))[1]
            return n is not None and n + 1 in first_at

        rows = []
        for bs in sizes:
            avail, n = seen.get(bs, (None, None))
            status, error = "ok", None
            if failing:
                if bs == failed_bs:
                    status, error = "failed", s.error or self.error_text(self.headline_failure())
                elif failed_bs is not None and position.get(failed_bs, -1) > position[bs]:
                    pass                               # captured before the one that failed
                elif not done(bs):
                    continue
            elif not s.ended and not done(bs):
                if bs in seen:
                    self.warnings.append(f"the capture of bs {bs} ({s.label}) was still running where the log ends")
                continue
            duration = first_at[n + 1] - first_at[n] if status == "ok" and done(bs) and n in first_at else None
            later = [seen[b][0] for b in sizes[position[bs] + 1:] if b in seen]
            nxt = later[0] if later else (s.end_avail if bs == sizes[-1] else None)
            delta = avail - nxt if avail is not None and nxt is not None and status == "ok" else None
            rows.append((bs, duration, delta, status, error))
        untimed = sum(1 for r in rows if r[1] is None and r[3] == "ok")
        if untimed and s.tqdm:
            self.warnings.append(f"{untimed} capture size(s) of {s.label} have no time of their own in the log: "
                                 f"their duration is not known")
        pool, pool_known = 0, True
        for bs, duration, delta, status, error in rows:
            if delta is None:
                pool_known = False
            else:
                pool += delta
            self.emit({"kind": "capture", "ts": s.end_ts, "graph_bs": bs, "stage": stage,
                       "duration_s": duration, "pool_bytes": max(0, pool) if pool_known and status == "ok" else None,
                       "pool_delta_bytes": delta, "status": status, "error": error,
                       "variant": "draft" if s.role == "draft" else ("compile" if compiled and bs <= max_compile_bs
                                                                     else None),
                       "rank": s.rank_label})
        if rows:
            self.note_headline("captures", LogLine(0, "", s.end_ts, s.rank, s.rank_label))
