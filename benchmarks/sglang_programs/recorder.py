"""Record what SGLang's model runner does, call by call, in one offline run: each
``ModelRunner.forward`` (its forward batch's shape: mode, batch size, input tokens, extend lengths,
and whether it ran a graph), each per-size capture (``capture_one_shape`` of the decode and prefill
graph runners: size, backend, the CUDA graphs captured inside) and the memory around each capture
pass, measured both ways (the device's free memory, as SGLang logs it, and PyTorch's reserved
bytes). The CUDA graphs counted are torch.cuda.CUDAGraph captures (the breakable backend
captures its segments that way too). SGLang runs its scheduler in a spawned process, which
imports this file again as ``__mp_main__``: the patches are installed there. The records are the
shapes replayscope's CPU tests can replay.

    python recorder.py MODEL_DIR OUT.jsonl [offline.py's options]
"""

from __future__ import annotations

import json
import os
import sys
import traceback

OUT_ENV = "REPLAYSCOPE_SGLANG_RECORD"
STATE = {"graphs": 0, "in_capture": 0}


def _write(record: dict) -> None:
    with open(f"{os.environ[OUT_ENV]}-pid{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(record, default=str) + "\n")


def _batch(forward_batch) -> dict:
    def value(name):
        item = getattr(forward_batch, name, None)
        return item.tolist() if hasattr(item, "tolist") else item
    mode = getattr(forward_batch, "forward_mode", None)
    ids = getattr(forward_batch, "input_ids", None)
    return {"forward_mode": getattr(mode, "name", str(mode)), "batch_size": value("batch_size"),
            "input_tokens": int(ids.shape[0]) if getattr(ids, "shape", None) else None,
            "seq_lens_sum": value("seq_lens_sum"), "extend_num_tokens": value("extend_num_tokens"),
            "extend_seq_lens_cpu": value("extend_seq_lens_cpu"), "extend_prefix_lens_cpu": value("extend_prefix_lens_cpu")}


def install() -> None:
    import torch
    from sglang.srt.model_executor import model_runner
    from sglang.srt.model_executor.runner import decode_cuda_graph_runner, prefill_cuda_graph_runner

    def forward(original):
        def call(self, forward_batch, *args, **kwargs):
            record = {"event": "forward", **_batch(forward_batch), "in_capture": STATE["in_capture"] > 0}
            output = original(self, forward_batch, *args, **kwargs)
            record["can_run_graph"] = getattr(output, "can_run_graph", None)
            _write(record)
            return output
        return call

    def capture_one(kind):
        def wrap(original):
            def call(self, size, *args, **kwargs):
                before, STATE["in_capture"] = STATE["graphs"], STATE["in_capture"] + 1
                try:
                    return original(self, size, *args, **kwargs)
                finally:
                    STATE["in_capture"] -= 1
                    _write({"event": "capture_one_shape", "runner": kind, "size": size,
                            "backend": type(getattr(self, "backend", None)).__name__,
                            "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (int, str, type(None)))},
                            "positional_after_size": len(args), "cuda_graphs": STATE["graphs"] - before})
            return call
        return wrap

    def capture_pass(kind):
        def wrap(original):
            def call(self, *args, **kwargs):
                free0, reserved0 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
                try:
                    return original(self, *args, **kwargs)
                finally:
                    _write({"event": "capture_pass", "runner": kind,
                            "free_bytes_drop": free0 - torch.cuda.mem_get_info()[0],
                            "reserved_bytes_growth": torch.cuda.memory_reserved() - reserved0})
            return call
        return wrap

    def graph_end(original):
        def call(self, *args, **kwargs):
            STATE["graphs"] += 1
            return original(self, *args, **kwargs)
        return call

    model_runner.ModelRunner.forward = forward(model_runner.ModelRunner.forward)
    for kind, module, cls in (("decode", decode_cuda_graph_runner, "DecodeCudaGraphRunner"),
                              ("prefill", prefill_cuda_graph_runner, "PrefillCudaGraphRunner")):
        runner = getattr(module, cls)
        runner.capture_one_shape = capture_one(kind)(runner.capture_one_shape)
        runner.capture = capture_pass(kind)(runner.capture)
    torch.cuda.CUDAGraph.capture_end = graph_end(torch.cuda.CUDAGraph.capture_end)
    _write({"event": "installed", "pid": os.getpid()})


if __name__ == "__mp_main__" and os.environ.get(OUT_ENV):      # SGLang's spawned scheduler
    try:
        install()
    except Exception:  # noqa: BLE001
        _write({"event": "install_failed", "error": traceback.format_exc()})

if __name__ == "__main__":
    os.environ[OUT_ENV] = os.path.abspath(sys.argv[2])
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import offline
    sys.argv = [sys.argv[0], sys.argv[1], os.path.abspath(sys.argv[2]) + ".report.json", *sys.argv[3:]]
    offline.main()
