"""The advice for one run: sizes for K graphs, checked on held-back steps, priced, with flags.

``advise(facts, budget)`` is pure: ``RunFacts`` holds what it needs of a run (``stored``
reads them from a store, the GPU benchmark builds them from a run's events). It returns
the JSON the API answers, the page shows and ``replayscope advise`` prints
(``format_text``):

- ``plans``: the run's current list (empty when its graphs were off) and the proposal,
  each scored on the steps the sizes were chosen from (``fit``), on the held-back steps
  (``held_back``) and priced (``capture_s``, ``pool_bytes``);
- ``split``: which steps chose and which scored; ``verdict``: the proposal against the
  current list on the held-back steps, said plainly when it is worse;
- ``validity``: the proposal under each engine's rules; ``flags``: the lines to copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from replayscope.collector.analysis.advisor import (choice, engines, launch, objective as objectives, pricing,
                                                    steps as stepping)
from replayscope.collector.analysis.advisor.objective import TimingRow
from replayscope.collector.analysis.advisor.pricing import CaptureSet
from replayscope.collector.analysis.advisor.steps import StepRow
from replayscope.contract.wire import default_provenance

FALLBACK_BUDGET = 8        # graphs-off run whose engine default is not known


@dataclass
class RunFacts:
    """What the advisor needs of a run."""

    run: dict[str, Any]                                  # run_id, name, source, backend, model, device, config
    rows: list[StepRow]                                  # every stage, in time order
    timings: list[TimingRow] = field(default_factory=list)
    captures: CaptureSet | None = None
    earlier: list[CaptureSet] = field(default_factory=list)        # same model, device and backend, older
    earlier_timings: list[tuple[list[TimingRow], list[int]]] = field(default_factory=list)  # (timings, list)
    notes: list[str] = field(default_factory=list)       # what the reader should know of the data
    weight_bytes: int | None = None                      # the model's weights, as loaded (a log's figure)


def current_sizes(facts: RunFacts, rules: engines.Rules) -> list[int]:
    """The sizes the run's graphs served: its captured decode sizes, else its configured
    list; none when its graphs were off."""
    if rules.graphs_off:
        return []
    if facts.captures is not None and facts.captures.sizes:
        return sorted(facts.captures.sizes)
    return sorted(set(int(s) for s in (facts.run.get("config") or {}).get("capture_sizes") or []))


def default_budget(current: Sequence[int], rules: engines.Rules, config: dict) -> tuple[int, str]:
    """The current list's count; for a run with graphs off, the engine's default count."""
    if current:
        return len(current), f"the run's {len(current)} graphs"
    count = engines.default_graph_count(rules, config)
    if count:
        return count, f"the {count} graphs {engines.ENGINE_NAMES[rules.engine]} captures by default for this run"
    return FALLBACK_BUDGET, (f"{FALLBACK_BUDGET}: how many graphs {engines.ENGINE_NAMES[rules.engine]} captures "
                             f"by default for this run is not known")


def _plan(name: str, sizes: list[int], parts: dict, obj, rules, facts, size_name: stepping.SizeName) -> dict:
    """``parts``: (distribution, mixed steps per size) for ``fit``, ``held_back`` and ``all``;
    ``size_name``: a size in its unit (``steps.sizes_named``)."""
    captured = pricing.capture_time(sizes, facts.captures, facts.earlier, size_name)
    pool = pricing.pool_memory(sizes, facts.captures, facts.earlier, size_name)
    scored = {key: choice.score(dist, sizes, obj, rules.padding, mixed).as_dict() if dist else None
              for key, (dist, mixed) in parts.items()}
    scored["fit"] = scored["fit"] or choice.score({}, sizes, obj).as_dict()
    scored["all"] = scored["all"] or choice.score({}, sizes, obj).as_dict()
    return {"name": name, "sizes": sizes, **scored, "capture_s": captured.as_dict(), "pool_bytes": pool.as_dict()}


def _pool_fits(facts: RunFacts, current: list[int]):
    """The memory budget: a proposal's graph pool within the current list's (the memory the
    engine set aside for its graphs; more comes out of the KV cache), where both are priced."""
    if not current:
        return None
    budget = pricing.pool_memory(current, facts.captures, facts.earlier).value
    if budget is None:
        return None

    def fits(sizes: list[int]) -> bool:
        pool = pricing.pool_memory(sizes, facts.captures, facts.earlier).value
        return pool is None or pool <= budget
    return fits


def _objective(facts: RunFacts, stage: str | None, current: list[int], rules, eager_weight,
               size_name: stepping.SizeName) -> objectives.Objective:
    earlier_graph, earlier_eager = [], []
    for timings, sizes in facts.earlier_timings:
        earlier_graph += objectives.graph_points(timings, stage, sizes, rules.padding)
        earlier_eager += objectives.eager_points(timings, stage)
    chosen = objectives.choose_objective(
        backend=facts.run.get("backend") or "", device=facts.run.get("device") or "",
        graph=objectives.graph_points(facts.timings, stage, current, rules.padding),
        eager=objectives.eager_points(facts.timings, stage),
        earlier_graph=earlier_graph, earlier_eager=earlier_eager, eager_weight=eager_weight, name=size_name)
    if chosen.provenance == "default" and rules.engine == "vllm":       # token-batched, no step timed
        config = facts.run.get("config") or {}
        estimate = launch.launch_objective(config, facts.run.get("model") or "", facts.weight_bytes, current)
        return estimate or chosen
    return chosen


def _cap(rules: engines.Rules, everything: dict[int, int], current: Sequence[int]) -> int | None:
    """The largest size to choose: the engine's (``Rules.cap``); for vLLM without
    max_num_batched_tokens in its log, no larger than what the run shows the engine can batch:
    its largest batch, or its largest captured size (vLLM drops sizes above the limit)."""
    cap = rules.cap
    if rules.engine == "vllm" and rules.limit is None and everything:
        known = max(max(everything), max(current, default=0))
        cap = known if cap is None else min(cap, known)
    return cap


def _verdict(current: dict | None, proposed: dict, unit: str, estimated: bool = False) -> dict:
    out = _compare(current, proposed, unit)
    if estimated and out["compared"]:
        out["text"] = "Estimated (no step was timed): " + out["text"][0].lower() + out["text"][1:]
        if current["sizes"] and len(proposed["sizes"]) != len(current["sizes"]):
            out["text"] += (f" It needs {len(proposed['sizes'])} graph{'s' * (len(proposed['sizes']) != 1)} "
                            f"instead of {len(current['sizes'])}.")
    out["estimated"] = estimated
    return out


def _compare(current: dict | None, proposed: dict, unit: str) -> dict:
    held = proposed["held_back"]
    if held is None:
        return {"compared": False, "worse": None,
                "text": "Too few steps to hold any back: the proposal is scored on the steps it was chosen from."}
    if current is None:
        return {"compared": False, "worse": None, "text": "The run has no list of its own to compare with."}
    mine, theirs = held["cost_per_step"], current["held_back"]["cost_per_step"]
    if not current["sizes"]:
        share = 1 - (held["eager_share"] or 0)
        return {"compared": True, "worse": False,
                "text": f"On the held-back steps graphs would have served {share:.0%} of the decode steps "
                        f"the run ran eager."}
    change = (mine - theirs) / theirs if theirs else 0.0
    worse = mine > theirs * (1 + 1e-9)
    what = _cost(mine, unit) + " per step against the current list's " + _cost(theirs, unit)
    if worse:
        text = (f"Worse than the current list on the held-back steps: {what} ({_change(change)}). Keep the "
                f"current list, or give more graphs.")
    elif change < -1e-9:
        text = f"Better than the current list on the held-back steps: {what} ({_change(change)})."
    else:
        text = f"As good as the current list on the held-back steps: {what}."
    return {"compared": True, "worse": worse, "change": change, "text": text}


def _change(change: float) -> str:
    """A relative change, with the digits a small one needs (−0.02%, not −0.0%)."""
    return f"{change:+.1%}" if abs(change) >= 0.001 else f"{change * 100:+.3f}%"


def _cost(value: float, unit: str) -> str:
    return f"{value * 1e3:.3f} ms" if unit == "s" else f"{value:,.2f} rows"


def advise(facts: RunFacts, budget: int | None = None, eager_weight: float | None = None,
           fit_share: float = stepping.FIT_SHARE) -> dict[str, Any]:
    """The advice for the run, JSON-ready (see the module's docstring)."""
    if budget is not None and budget < 1:
        raise ValueError("budget must be at least 1")
    run = facts.run
    config = run.get("config") or {}
    rules = engines.rules_for(run)
    current = current_sizes(facts, rules)
    kept, left_out, stage = stepping.select(facts.rows, current, rules.padding)
    fit_rows, held_rows, held_from = stepping.split(kept, fit_share)
    fit, held = stepping.distribution(fit_rows), stepping.distribution(held_rows)
    everything = stepping.distribution(kept)
    parts = {"fit": (fit, stepping.distribution(fit_rows, "mixed")),
             "held_back": (held, stepping.distribution(held_rows, "mixed")),
             "all": (everything, stepping.distribution(kept, "mixed"))}
    size_name = stepping.sizes_named(stage, run.get("source"), config)
    obj = _objective(facts, stage, current, rules, eager_weight, size_name)
    if budget is None:
        budget, budget_basis = default_budget(current, rules, config)
    else:
        budget_basis = "given"
    cap = _cap(rules, everything, current)
    proposed = choice.choose_sizes(fit, budget, obj, cap=cap, multiple_of=rules.multiple_of,
                                   padding=rules.padding, align=choice.ALIGN, mixed=parts["fit"][1])
    min_share = launch.MIN_GAIN_SHARE if obj.eager_extra else 0.0
    proposed, dropped = choice.paying_sizes(fit, proposed, obj, padding=rules.padding, mixed=parts["fit"][1],
                                            min_share=min_share, fits=_pool_fits(facts, current))
    dropped = [{**d, "named": size_name(d["size"])} for d in dropped]      # "57 tokens", "bs 48"
    plans = []
    if current or rules.graphs_off:
        plans.append(_plan("current", current, parts, obj, rules, facts, size_name))
    plans.append(_plan("proposed", proposed, parts, obj, rules, facts, size_name))
    current_plan = plans[0] if len(plans) == 2 else None
    validity = [{"engine": rules.engine, "label": rules.label, "own": True, "problems": rules.problems(proposed),
                 "facts": list(rules.facts), "unknown": list(rules.unknown)}]
    flags = [line.as_dict() for line in engines.flag_lines(rules, proposed)]
    for engine in engines.ENGINES:
        if engine == rules.engine:
            continue
        other = engines.generic_rules(engine)
        validity.append({"engine": engine, "label": engines.ENGINE_NAMES[engine] + " (no run's settings known)",
                         "own": False, "problems": other.problems(proposed), "facts": list(other.facts),
                         "unknown": list(other.unknown)})
        flags += [line.as_dict() for line in engines.flag_lines(other, proposed, own=False)]
    total = sum(everything.values())
    note = None
    if not total:
        note = ("the run recorded no decode steps with a batch size that a list of capture sizes decides: "
                "there is no traffic to choose capture sizes from")
    return {
        "run_id": run.get("run_id"), "name": run.get("name"), "source": run.get("source"), "engine": rules.engine, "engine_label": rules.label,
        "stage": stage, "budget": budget, "budget_basis": budget_basis, "sizes": proposed,
        "graphs_used": len(proposed),
        "graphs_off": rules.graphs_off, "padding": rules.padding,
        "objective": obj.as_dict(),
        "split": {"fit_share": fit_share if held else 1.0, "fit_steps": sum(fit.values()),
                  "held_back_steps": sum(held.values()), "held_back_from_ts": held_from},
        "plans": plans, "verdict": _verdict(current_plan, plans[-1], obj.unit, obj.provenance == "estimated"),
        "dropped": dropped, "cap": cap,
        "validity": validity, "flags": flags,
        "decode_steps": total, "distinct_batch_sizes": len(everything),
        "left_out": left_out, "histogram": _histogram(kept), "notes": list(facts.notes), "note": note,
    }


def _histogram(rows: Sequence[StepRow]) -> list[dict]:
    """Steps per (batch size, mode) as the run ran them: what the page's bars show."""
    per: dict[tuple[int, str], int] = {}
    for r in rows:
        per[(r.raw_bs, r.mode)] = per.get((r.raw_bs, r.mode), 0) + r.steps
    return [{"raw_bs": bs, "mode": mode, "steps": n} for (bs, mode), n in sorted(per.items())]


def plan(advice: dict, name: str) -> dict | None:
    return next((p for p in advice["plans"] if p["name"] == name), None)


def format_text(advice: dict, run_label: str = "") -> str:
    """The terminal report of ``replayscope advise``."""
    obj = advice["objective"]
    lines = [f"Capture sizes for {run_label or advice['run_id']} ({advice['engine_label']}): budget "
             f"{advice['budget']} graphs ({advice['budget_basis']}), {advice['graphs_used']} used",
             f"  objective: {obj['basis']}"]
    if advice["graphs_off"]:
        lines.append(f"  graphs were off: {advice['graphs_off']}; every decode step below ran eager")
    split = advice["split"]
    if split["held_back_steps"]:
        lines.append(f"  chosen from the first {split['fit_steps']:,} decode steps, scored on the last "
                     f"{split['held_back_steps']:,} (held back)")
    else:
        lines.append(f"  chosen from and scored on all {split['fit_steps']:,} decode steps (too few to hold any back)")
    scored = "held_back" if split["held_back_steps"] else "fit"
    unknown = "not in the log" if default_provenance(advice["source"] or "") == "log" else "not measured"
    lines.append(f"  {'plan':<9} {'sizes':<34} {'eager':>7} {'padding':>8} {'per step':>11} "
                 f"{'capture':>16} {'pool':>20}")
    for p in advice["plans"]:
        s = p[scored]
        sizes = ",".join(map(str, p["sizes"])) or "(graphs off)"
        if len(sizes) > 34:
            sizes = sizes[:31] + "..."
        lines.append(f"  {p['name']:<9} {sizes:<34} {_pct(s['eager_share']):>7} {_pct(s['waste_share']):>8} "
                     f"{_per_step(s['cost_per_step'], obj['unit']):>11} {_figure(p['capture_s'], 's', unknown):>16} "
                     f"{_figure(p['pool_bytes'], 'bytes', unknown):>20}")
    lines.append(f"  {advice['verdict']['text']}")
    for d in advice.get("dropped") or []:
        lines.append(f"  left off: {d.get('named') or d['size']} ({d['why']})")
    if advice["left_out"]:
        left = ", ".join(f"{k} {v:,}" for k, v in sorted(advice["left_out"].items(), key=lambda kv: -kv[1]))
        lines.append(f"  left out (eager whatever the list): {left}")
    lines.append("Validity:")
    for v in advice["validity"]:
        lines.append(f"  {v['label']}: " + ("; ".join(v["problems"]) if v["problems"] else "valid"))
    lines.append("Flags:")
    for f in advice["flags"]:
        mark = " (this run)" if f["for_this_run"] else ""
        lines.append(f"  {f['label']}{mark}: {f['text']}")
    if advice["note"]:
        lines.append(f"Note: {advice['note']}")
    return "\n".join(lines)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _per_step(x: float | None, unit: str) -> str:
    return "n/a" if x is None else _cost(x, unit)


def _figure(f: dict, unit: str, unknown: str) -> str:
    if f["value"] is None:
        return unknown
    if f["provenance"] == "none":
        return "none"
    text = f"{f['value']:.2f} s" if unit == "s" else f"{f['value'] / 2**20:.1f} MiB"
    if f["error"]:
        text += f" ±{f['error']:.2f}" if unit == "s" else f" ±{f['error'] / 2**20:.1f}"
    if f["provenance"] not in ("measured", "log"):
        text += f" ({f['provenance']})"
    return text
