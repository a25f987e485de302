"""Fixtures for the importer tests: the log fixtures and figures in exact bytes."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
# 2026-01-01T00:00:00Z: the year vLLM's "MM-DD HH:MM:SS" stamps are read in.
MTIME = 1767225600.0


def gib(value: float) -> int:
    """Bytes of an engine's GB/GiB figure, as docs/importing.md defines it."""
    return round(value * 2**30)


def read_fixture(name: str) -> str:
    # bytes, not read_text: universal newlines would turn tqdm's \r into \n
    return (FIXTURES / name).read_bytes().decode("utf-8")


def parsed(parse_text, name: str):
    """Parse a fixture; every run and event must pass the wire contract, seqs 0..n-1."""
    from replayscope.contract.wire import validate_event, validate_run

    result = parse_text(read_fixture(name), path=name, mtime=MTIME)
    for run in result.runs:
        validate_run(run.run)
        for event in run.events:
            validate_event(event)
        assert [e["seq"] for e in run.events] == list(range(len(run.events)))
    return result


def the_only_run(result):
    assert len(result.runs) == 1
    return result.runs[0]


def kind(run, name):
    return [e for e in run.events if e["kind"] == name]


def headline(run, events, what_key="phase"):
    """The events that are the run's figures (config.rank_headline), as the queries read them."""
    chosen = run.run["config"]["rank_headline"]
    return [e for e in events
            if (e[what_key] if what_key in e else what_key) not in chosen
            or chosen[e[what_key] if what_key in e else what_key] == e.get("rank")]


def phases(run):
    """The run's headline phases: {name: (duration_s, mem_bytes)}."""
    rows = headline(run, kind(run, "phase"))
    out = {e["phase"]: (e["duration_s"], e.get("mem_bytes")) for e in rows}
    assert len(out) == len(rows), "one headline row per phase"
    return out


def rank_phases(run):
    """Every rank's phases: {(rank, name): (duration_s, mem_bytes)}."""
    return {(e.get("rank"), e["phase"]): (e["duration_s"], e.get("mem_bytes")) for e in kind(run, "phase")}


def run_end(run):
    (end,) = kind(run, "run_end")
    return {k: end.get(k) for k in ("status", "error", "rank", "phase", "graph_bs")}


def utc(text: str) -> float:
    """A "YYYY-MM-DD HH:MM:SS" UTC stamp as epoch seconds."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def vllm(name: str):
    """The one run of a vLLM fixture."""
    from replayscope.collector.importers import parse_vllm_text
    return the_only_run(parsed(parse_vllm_text, name))


def sglang(name: str):
    """The one run of an SGLang fixture."""
    from replayscope.collector.importers import parse_sglang_text
    return the_only_run(parsed(parse_sglang_text, name))


def import_whole(engine: str, path) -> "object":
    """``import_log``'s result with every run's events kept (``import_log`` streams them to a
    drain): the whole file parsed at once, with the file's date, for tests that ingest them."""
    import os

    from replayscope.collector.importers import ENGINE_SPECS
    from replayscope.collector.importers.parser import parse_text
    return parse_text(ENGINE_SPECS[engine], Path(path).read_text(encoding="utf-8"), path=str(path),
                      mtime=os.path.getmtime(path), digest=None)
