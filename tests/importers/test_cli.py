"""``replayscope import`` end to end: into a real store, through a real collector, and
refusing bad input without writing anything."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import threading
import time

import pytest

from replayscope.app.cli import imports as cli
from replayscope.contract.errors import ReplayscopeError
from tests.importers.conftest import FIXTURES, gib
from tests.live_server import free_port


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="replayscope")
    sub = p.add_subparsers(dest="command")
    cli.add_parsers(sub)
    return p


def run(argv: list[str]) -> str:
    args = parser().parse_args(argv)
    out = io.StringIO()
    assert args.handler(args, out=out) == 0
    return out.getvalue()


@pytest.fixture
def logs(tmp_path):
    """The fixtures copied with a known mtime (2026-01-01), for vLLM's yearless stamps."""
    for path in FIXTURES.glob("*.log"):
        shutil.copy(path, tmp_path / path.name)
        os.utime(tmp_path / path.name, (1767225600, 1767225600))
    return tmp_path


def test_json_output_lists_runs_with_their_figures(logs):
    data = json.loads(run(["import", "sglang", str(logs / "sglang_old.log"), "--json", "--dry-run"]))
    assert data["source"] == "sglang-log"
    assert data["rank_policy"].startswith("per rank:")
    assert data["written_to"] is None
    (r,) = data["runs"]
    assert r["status"] == "finished"
    assert r["capture_total_s"] == 5.23
    assert r["graph_mem_bytes"] == gib(0.60)
    assert [c["graph_bs"] for c in r["captures"]] == [8, 4, 2, 1]
    assert [p["phase"] for p in r["phases"]] == ["load_weights", "kv_cache", "capture"]
    assert r["steps"] == {"graph": 0, "padded": 0, "eager": 0}
    assert r["warnings"] == []


def test_import_into_a_store_is_idempotent(logs, tmp_path):
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    url = f"sqlite:///{tmp_path / 'imp.db'}"
    first = json.loads(run(["import", "sglang", str(logs / "sglang_decode_batches.log"), "--db", url, "--json"]))
    again = json.loads(run(["import", "sglang", str(logs / "sglang_decode_batches.log"), "--db", url, "--json"]))
    n = first["runs"][0]["events"]
    assert first["written"][0]["accepted"] == n and first["written"][0]["duplicates"] == 0
    assert again["written"][0]["accepted"] == 0 and again["written"][0]["duplicates"] == n
    run(["import", "vllm", str(logs / "vllm_cudagraph_metrics.log"), "--db", url])
    store = Store.open(url)
    try:
        runs = {r["source"]: r for r in queries.list_runs(store)}
        assert runs["sglang-log"]["modes"] == {"graph": 2, "padded": 1, "eager": 3, "unknown": 0}
        assert runs["sglang-log"]["padded_tokens"] == 1
        assert runs["sglang-log"]["status"] == "finished"
        assert runs["vllm-log"]["modes"] == {"graph": 17, "padded": 25, "eager": 6, "unknown": 0}
        assert runs["vllm-log"]["padded_tokens"] == 30
        sg = runs["sglang-log"]["run_id"]
        assert [c["graph_bs"] for c in queries.captures(store, sg)] == [8, 4, 2, 1]
        assert {p["phase"] for p in queries.phases(store, sg)} == {"load_weights", "capture"}
    finally:
        store.dispose()


def test_failed_and_interrupted_runs_keep_their_status_in_the_store(logs, tmp_path):
    from replayscope.collector.models import queries
    from replayscope.collector.store import Store

    url = f"sqlite:///{tmp_path / 'st.db'}"
    run(["import", "sglang", str(logs / "sglang_capture_failed.log"), "--db", url])
    run(["import", "sglang", str(logs / "sglang_truncated.log"), "--db", url])
    store = Store.open(url)
    try:
        assert sorted(r["status"] for r in queries.list_runs(store)) == ["failed", "interrupted"]
    finally:
        store.dispose()


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.log", "no such file"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "blob.log").write_bytes(b"\x7fELF\x00\x01\x02" * 100) and d / "blob.log", "binary"),
])
def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path, make, message):
    path = make(tmp_path)
    db = tmp_path / "never.db"
    args = parser().parse_args(["import", "vllm", str(path), "--db", f"sqlite:///{db}"])
    with pytest.raises(ReplayscopeError, match=message):
        args.handler(args, out=io.StringIO())
    assert not db.exists()


@pytest.mark.parametrize("asked, log, looks_like", [
    ("sglang", "vllm_new.log", "vLLM"), ("vllm", "sglang_new.log", "SGLang"),
    ("sglang", "vllm_issue7593_v0_worker_error_block_capture.log", "vLLM"),     # a failure-only excerpt too
    ("vllm", "sglang_pr3613_bare_chained_traceback_cut.log", "SGLang"),
])
def test_the_other_engines_log_is_refused_naming_it_and_writes_nothing(logs, tmp_path, capsys, asked, log,
                                                                        looks_like):
    from replayscope.app.cli import main

    db = tmp_path / "never.db"
    assert main(["import", asked, str(logs / log), "--db", f"sqlite:///{db}"]) != 0
    err = capsys.readouterr().err
    assert f"looks like a {looks_like} log" in err and "nothing was written" in err
    assert not db.exists()


def test_a_log_that_names_neither_engine_is_read_not_refused(tmp_path):
    path = tmp_path / "plain.log"
    path.write_text("starting up\nall good\n")
    # read, not refused as the other engine's; with no run in it, that is the error
    with pytest.raises(ReplayscopeError, match="no SGLang server start") as refused:
        run(["import", "sglang", str(path), "--json", "--dry-run"])
    assert "looks like" not in str(refused.value)


def test_db_and_collector_are_mutually_exclusive():
    with pytest.raises(SystemExit):
        parser().parse_args(["import", "vllm", "x.log", "--db", "sqlite://", "--collector", "http://x"])



@pytest.fixture
def collector_url(tmp_path):
    """The collector's FastAPI app served by uvicorn on 127.0.0.1, writes behind a token."""
    uvicorn = pytest.importorskip("uvicorn")
    from replayscope.collector.api import create_api
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store

    url = f"sqlite:///{tmp_path / 'api.db'}"
    store = Store.open(url, upgrade=True)
    app = create_api(store, Settings(db=url, token="s3cret", run_services=False))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started
    yield f"http://127.0.0.1:{port}", store
    server.should_exit = True
    thread.join(10)
    store.dispose()


def test_import_through_the_collector_api(logs, collector_url):
    from replayscope.collector.models import queries

    base, store = collector_url
    data = json.loads(run(["import", "vllm", str(logs / "vllm_restart.log"), "--collector", base,
                           "--token", "s3cret", "--json"]))
    assert data["written_to"] == f"collector {base}"
    assert [w["accepted"] for w in data["written"]] == [r["events"] for r in data["runs"]]
    runs = queries.list_runs(store)
    assert sorted(r["run_id"][-1] for r in runs) == ["0", "1"]
    assert {r["source"] for r in runs} == {"vllm-log"}
    with pytest.raises(ReplayscopeError, match="401"):
        run(["import", "vllm", str(logs / "vllm_restart.log"), "--collector", base, "--token", "wrong"])



def test_an_imported_vllm_metrics_table_feeds_padding_waste_and_the_advisor(logs, tmp_path):
    from replayscope.collector.models import queries
    from replayscope.collector.analysis.advisor.stored import advice_for_run
    from replayscope.collector.store import Store

    db = f"sqlite:///{tmp_path}/advise.db"
    run(["import", "vllm", str(logs / "vllm_cudagraph_metrics.log"), "--db", db])
    store = Store.open(db)
    (summary,) = queries.list_runs(store)
    assert (summary["num_tokens"], summary["padded_tokens"]) == (349, 30)     # 20+10 paddings of the rows
    histogram = {(r["raw_bs"], r["mode"]): r["steps"] for r in queries.batch_histogram(store, summary["run_id"])}
    assert histogram == {(1, "graph"): 7, (3, "eager"): 4, (3, "padded"): 20, (4, "graph"): 10,
                         (6, "padded"): 5, (100, "eager"): 2}
    advice = advice_for_run(store, summary["run_id"], budget=2)
    # the 4 eager steps of bs 3 (reason unknown, under a list that covers 3) are left out: not the list's doing
    assert advice is not None and advice["decode_steps"] == 44 and advice["left_out"] == {"unknown": 4}
    store.dispose()
