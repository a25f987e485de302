"""The SGLang harness's client speaks SGLang's native API as 0.5.17 serves it with
--skip-tokenizer-init: POST /generate with ``input_ids`` and ``sampling_params``, the answer's
``output_ids``; /metrics read before and after its requests. Here against a local HTTP server
that answers in that shape (the GPU test runs it against the real one)."""

from __future__ import annotations

import json

from benchmarks.sglang_programs import client
from tests.engines.http_stub import StubHandler, serving

BODIES: list[dict] = []


class Shaped(StubHandler):
    def do_POST(self):                      # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        BODIES.append(body)
        n = body["sampling_params"]["max_new_tokens"] - (1 if len(BODIES) == 3 else 0)   # one answer short
        self.answer(json.dumps({"output_ids": list(range(n)), "meta_info": {"completion_tokens": n}}).encode())

    def do_GET(self):                       # noqa: N802
        self.answer(f"sglang:num_requests_total{{model_name=\"m\"}} {len(BODIES)}.0\n".encode())


def test_requests_carry_token_ids_and_exact_lengths_and_a_short_answer_is_not_exact():
    with serving(Shaped) as url:
        report = client.run(url, requests=3, later=2, prompt_tokens=5)
    lengths = client.output_lengths(5)
    assert sorted(b["sampling_params"]["max_new_tokens"] for b in BODIES) == sorted(lengths)
    # exact lengths by ignore_eos: SGLang 0.5.17 refuses min_new_tokens without a tokenizer (its eos id)
    assert all("min_new_tokens" not in b["sampling_params"] and b["sampling_params"]["ignore_eos"]
               and len(b["input_ids"]) == 5 for b in BODIES)
    assert report["asked"] == {"requests": 5, "prompt_tokens": 25, "output_tokens": sum(lengths),
                               "decode_tokens": sum(lengths) - 5, "lengths": lengths}
    assert report["produced"] == {"output_tokens": sum(lengths) - 1, "exact": False}
    assert not report["errors"]
