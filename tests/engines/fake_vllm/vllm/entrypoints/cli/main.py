"""A stand-in for ``vllm serve`` (what the harness talks to: /health, /v1/completions, /metrics
with one ``vllm:iteration_tokens_total`` observation per output token, the "init engine" line), so
the harness and the benchmark can be checked without a GPU."""
import json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
steps = [0, 0]
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def do_GET(self):
        body = b"ok" if self.path == "/health" else (f"vllm:iteration_tokens_total_count {steps[0]}\nvllm:iteration_tokens_total_sum {steps[1]}\n").encode()
        self.send_response(200); self.end_headers(); self.wfile.write(body)
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        steps[0] += req["max_tokens"]; steps[1] += req["max_tokens"] + len(req["prompt"]) - 1
        time.sleep(0.01)
        out = json.dumps({"usage": {"completion_tokens": req["max_tokens"]}}).encode()
        self.send_response(200); self.end_headers(); self.wfile.write(out)
time.sleep(1.0)
print("init engine (profile, create kv cache, warmup model) took 1.50 s", flush=True)
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
