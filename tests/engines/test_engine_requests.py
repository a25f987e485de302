"""The request loop both engine clients share (benchmarks/engine_programs/concurrent_requests.py):
every request sent once with its exact length, some while others run, a failed request an error
and not an exact answer, the report's keys in their order, and the files a client leaves. Each
client runs here as the harness runs it — a plain script in another folder, standard library only —
against a local HTTP server answering in its engine's shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.engine_programs import concurrent_requests
from tests.engines.http_stub import StubHandler, serving

PROGRAMS = Path(__file__).resolve().parents[2] / "benchmarks"


class Engine(StubHandler):
    """``/v1/completions`` (vLLM's shape), ``/generate`` (SGLang's), ``/metrics``; the request
    asking for 15 tokens is refused with a 500."""
    bodies: list[dict] = []

    def do_POST(self):                      # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        n = body["max_tokens"] if self.path == "/v1/completions" else body["sampling_params"]["max_new_tokens"]
        if n == 15:
            self.answer(b"", status=500)
            return
        answer = {"usage": {"completion_tokens": n}} if self.path == "/v1/completions" else {"output_ids": [0] * n}
        self.answer(json.dumps(answer).encode())

    def do_GET(self):                       # noqa: N802
        self.answer(f"requests_seen {len(self.bodies)}\n".encode())


@pytest.fixture
def url():
    Engine.bodies = []
    with serving(Engine) as served:
        yield served


def test_every_request_is_sent_once_with_its_length_and_a_failed_one_is_an_error():
    sent: list[int] = []

    def send(i: int, length: int) -> int:
        sent.append(i)
        if i == 2:
            raise OSError("refused")
        return length - (1 if i == 4 else 0)

    lengths, produced, errors, seconds = concurrent_requests.send_all(send, 3, 2)
    assert sorted(sent) == [0, 1, 2, 3, 4] and lengths == concurrent_requests.output_lengths(5)
    assert produced == {0: lengths[0], 1: lengths[1], 3: lengths[3], 4: lengths[4] - 1}
    assert errors == ["request 2: refused"] and seconds >= 0.05       # the later ones wait for the first


@pytest.mark.parametrize("engine, arguments, counted", [
    ("vllm", ["m"], "forward_tokens"), ("sglang", [], "decode_tokens")])
def test_the_client_as_a_script_leaves_its_report_and_metrics(engine, arguments, counted, url, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    finished = subprocess.run([sys.executable, "-I", str(PROGRAMS / f"{engine}_programs" / "client.py"), url,
                               *arguments, str(out), "--requests", "3", "--later", "2", "--prompt-tokens", "5"],
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.startswith("client: ")
    lengths = concurrent_requests.output_lengths(5)               # 4, 15, 26, 37, 48: the second is refused
    report = json.loads((out / "client.json").read_text())
    assert list(report) == ["asked", "produced", "errors", "seconds", "requests_per_s"]
    assert list(report["asked"]) == ["requests", "prompt_tokens", "output_tokens", counted, "lengths"]
    assert report["asked"]["lengths"] == lengths and report["asked"]["prompt_tokens"] == 25
    assert report["produced"] == {"output_tokens": sum(lengths) - 15, "exact": False}
    assert len(report["errors"]) == 1 and report["errors"][0].startswith("request 1: ")
    assert (out / "metrics.txt").read_text() == "requests_seen 5\n"
    assert (out / "metrics-before.txt").exists() == (engine == "sglang")
