"""``replayscope trace`` with the collector down and a working directory where no spool can be
written (issue 36): the events the runs could not send or keep were lost without a word in the
summary, and trace exited 0. They are counted in the summary, and the exit code is 1."""

from __future__ import annotations

import re
import sys

from tests.live_server import free_port
from tests.trace.test_trace_command import PROGRAMS, trace


def test_events_neither_sent_nor_spooled_are_counted_in_the_summary_and_the_exit_code():
    down = f"http://127.0.0.1:{free_port()}"          # nothing listens there
    read_only = "/proc"                               # no file can be created there, even by root
    result = trace("--collector", down, "--step", "__main__:decode_step", "--",
                   sys.executable, str(PROGRAMS / "cpu_decode.py"), cwd=read_only)
    assert result.returncode == 1, result.stderr
    said = re.findall(r"telemetry sink failed, \d+ events? not written \((\d+) in all\)", result.stderr)
    lost = int(said[-1])
    assert lost >= 4                                  # three steps and the run_end at least
    [run_line] = [line for line in result.stderr.splitlines() if "3 steps" in line]
    assert run_line.endswith(f"; {lost} events lost (not written or sent)")
    assert result.stderr.splitlines()[-1] == f"replayscope trace: incomplete: {lost} events lost"


def test_events_kept_in_a_spool_are_counted_with_where_they_are_and_the_exit_code_is_1(tmp_path):
    from replayscope.collector.settings import Settings
    from replayscope.collector.store import Store
    from tests.e2e.conftest import ThreadCollector

    store = Store.open(f"sqlite:///{tmp_path}/collector.db", upgrade=True)
    server = ThreadCollector(store, free_port(), Settings(run_services=False, token="right")).start()
    try:
        result = trace("--collector", server.url, "--token", "wrong", "--step", "__main__:decode_step", "--",
                       sys.executable, str(PROGRAMS / "cpu_decode.py"), cwd=tmp_path)
    finally:
        server.stop()
        store.dispose()
    assert result.returncode == 1, result.stderr
    [spool] = tmp_path.glob("replayscope-spool-*.jsonl")
    kept = len(spool.read_text(encoding="utf-8").splitlines()) - 1          # the run record, then the events
    [run_line] = [line for line in result.stderr.splitlines() if "3 steps" in line]
    assert run_line.endswith(f"; {kept} events not sent, kept in {spool}")
    assert result.stderr.splitlines()[-1] == (f"replayscope trace: incomplete: {kept} events not sent "
                                              f"(re-send them with `replayscope import events {spool}`)")
