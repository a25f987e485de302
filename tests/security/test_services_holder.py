"""``GET /v1/services`` names the collector that ran each job (``holder``: its host and pid)
to writers only (issue 36): to a reader without the token it mapped the collectors' hosts.
Against a real ``replayscope serve`` with a token."""

from __future__ import annotations

import json
import socket

from tests.faults.conftest import Collector, http_json, migrated_sqlite, wait_for

TOKEN = "services-token"


def test_readers_see_the_jobs_but_not_which_host_and_pid_ran_them(tmp_path):
    env = {"REPLAYSCOPE_TOKEN": TOKEN, "REPLAYSCOPE_EVALUATE_EVERY_S": "0.5"}
    with Collector(migrated_sqlite(tmp_path / "s.db"), env=env) as collector:
        writer = wait_for(lambda: [s for s in http_json("GET", collector.url + "/v1/services",
                                                        headers={"Authorization": f"Bearer {TOKEN}"})[1]
                                   if s.get("holder")], 30, "a job that ran")
        reader_status, reader, _ = http_json("GET", collector.url + "/v1/services")
        wrong_status, wrong, _ = http_json("GET", collector.url + "/v1/services",
                                           headers={"Authorization": "Bearer not-it"})
        pid = collector.proc.pid
    holder = writer[0]["holder"]
    assert holder == f"{socket.gethostname()}:{pid}", "a writer sees which collector ran it"
    assert reader_status == 200 and wrong_status == 200
    for answer in (reader, wrong):
        ran = [s for s in answer if s["name"] == writer[0]["name"]][0]
        assert ran["slot"] is not None and ran["runs"] >= 1, "the job's periods are shown"
        assert "holder" not in ran
        assert holder not in json.dumps(answer) and f'"{socket.gethostname()}' not in json.dumps(answer)
