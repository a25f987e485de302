"""``replayscope trace`` and the traced processes' event writers (``replayscope.runner.event_writer``):
the run of a process that vanished is ended by the trace only after its writer's last event."""

from __future__ import annotations

import json
import time

from replayscope.contract.wire import MAX_SEQ
from tests.stub_server import QuietHandler, start_server, stop_server
from tests.trace.test_trace_command import PROGRAMS, trace

WRITER_POST_S = 2.0


def test_trace_ends_a_vanished_process_run_after_its_writer_posted_its_last_events():
    """The program hands 50 steps to its writer and SIGKILLs itself; the collector takes 2 s to
    answer the writer's post. The trace's run_end comes after that answer, not while the writer
    is still posting (it would land before the run's last events)."""
    posts: list[tuple[list[str], float, float]] = []

    class SlowCollector(QuietHandler):
        def do_POST(self):
            body = self.json_body()
            arrived = time.monotonic()
            events = body.get("events") if isinstance(body, dict) else None
            if events and all(event["seq"] < MAX_SEQ - 10 for event in events):     # the writer's, not the trace's
                time.sleep(WRITER_POST_S)
            if events is not None:
                posts.append(([event["kind"] for event in events], arrived, time.monotonic()))
            self.answer(200, json.dumps({"stored": len(events or [])}).encode(), "application/json")

        def do_GET(self):
            self.answer(404, b'{"detail": "not here"}', "application/json")

    server = start_server(SlowCollector)
    try:
        result = trace("--collector", f"http://127.0.0.1:{server.server_port}", "--step", "__main__:decode_step",
                       "--", "python3", str(PROGRAMS / "cpu_handed_over.py"), "50")
    finally:
        stop_server(server)
    assert "writer " in result.stdout, result.stderr
    ends = [post for post in posts if "run_end" in post[0]]
    written = [post for post in posts if "run_end" not in post[0]]
    assert len(ends) == 1, (posts, result.stderr)
    assert sum(kinds.count("step") for kinds, _, _ in written) == 50
    assert ends[0][1] >= max(answered for _, _, answered in written), posts
