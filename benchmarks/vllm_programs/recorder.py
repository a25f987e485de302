"""Record what vLLM's model runner V2 does, call by call, in one offline run: each
``execute_model`` (its scheduler output's shape, and whether it ran inside start-up), each
decision of the CUDA-graph dispatcher (its inputs and the descriptor it chose), each per-size
capture (``create_forward_fn(desc, warmup)``, the CUDA graphs captured inside), and the memory
around ``capture_model`` measured both ways (the device's free memory, as vLLM logs it, and
PyTorch's reserved bytes). The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so
the patches see it. The records are the shapes replayscope's CPU tests replay.

    VLLM_ENABLE_V1_MULTIPROCESSING=0 python recorder.py MODEL_DIR OUT.jsonl [offline.py's options]
"""

from __future__ import annotations

import json
import os
import sys
import traceback

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
RECORDS: list[dict] = []
STATE = {"startup": 0, "capture_desc": None}


def _desc(desc) -> dict | None:
    if desc is None:
        return None
    return {"cg_mode": getattr(getattr(desc, "cg_mode", None), "name", None), "num_tokens": desc.num_tokens,
            "num_reqs": desc.num_reqs, "uniform_token_count": desc.uniform_token_count,
            "num_active_loras": desc.num_active_loras}


def _scheduled(out) -> dict:
    cached = getattr(out, "scheduled_cached_reqs", None)
    per_request = getattr(out, "num_scheduled_tokens", {}) or {}
    return {"total_num_scheduled_tokens": out.total_num_scheduled_tokens,
            "num_scheduled_tokens": sorted(per_request.values()),
            "requests": len(per_request),
            "new_reqs": len(getattr(out, "scheduled_new_reqs", []) or []),
            "new_req_prompt_lens": [len(r.prompt_token_ids or []) for r in getattr(out, "scheduled_new_reqs", []) or []],
            "new_req_computed": [r.num_computed_tokens for r in getattr(out, "scheduled_new_reqs", []) or []],
            "cached_reqs": len(getattr(cached, "req_ids", []) or []),
            "spec_decode_tokens": {k: len(v) for k, v in (getattr(out, "scheduled_spec_decode_tokens", {}) or {}).items()},
            "finished": len(getattr(out, "finished_req_ids", ()) or ()),
            "req_ids_sample": sorted(per_request)[:3]}


def install() -> None:
    import torch
    from vllm.v1.worker import gpu_worker
    from vllm.v1.worker.gpu import cudagraph_utils, model_runner

    def wrap(owner, name, around):
        original = getattr(owner, name)
        setattr(owner, name, around(original))

    def startup(original):
        def call(self, *args, **kwargs):
            STATE["startup"] += 1
            RECORDS.append({"event": "startup_begin", "call": original.__name__})
            try:
                return original(self, *args, **kwargs)
            finally:
                STATE["startup"] -= 1
                RECORDS.append({"event": "startup_end", "call": original.__name__})
        return call
    for name in ("compile_or_warm_up_model", "determine_available_memory", "profile"):
        if hasattr(gpu_worker.Worker, name):
            wrap(gpu_worker.Worker, name, startup)

    def execute(original):
        def call(self, scheduler_output, *args, **kwargs):
            RECORDS.append({"event": "execute_model", "in_startup": STATE["startup"] > 0,
                            "dummy_run": bool(kwargs.get("dummy_run")), "is_profile": bool(kwargs.get("is_profile")),
                            "scheduled": _scheduled(scheduler_output)})
            return original(self, scheduler_output, *args, **kwargs)
        return call
    wrap(model_runner.GPUModelRunner, "execute_model", execute)

    def dispatch(original):
        def call(self, num_reqs, num_tokens, uniform_token_count, num_active_loras=0):
            desc = original(self, num_reqs, num_tokens, uniform_token_count, num_active_loras=num_active_loras)
            RECORDS.append({"event": "dispatch", "in_startup": STATE["startup"] > 0,
                            "args": {"num_reqs": num_reqs, "num_tokens": num_tokens,
                                     "uniform_token_count": uniform_token_count, "num_active_loras": num_active_loras},
                            "graphs_captured": getattr(self, "_graphs_captured", None),
                            "desc": _desc(desc)})
            return desc
        return call
    wrap(cudagraph_utils.CudaGraphManager, "dispatch", dispatch)

    def capture(original):
        def call(self, create_forward_fn, *args, **kwargs):
            RECORDS.append({"event": "capture_descs", "mode": getattr(self.cudagraph_mode, "name", None),
                            "descs": {m.name: [_desc(d) for d in ds] for m, ds in self._capture_descs.items()},
                            "capture_sizes": list(self.compilation_config.cudagraph_capture_sizes or []),
                            "max_num_reqs": self.max_num_reqs, "decode_query_len": self.decode_query_len})

            def forward_factory(desc, warmup):
                STATE["capture_desc"] = _desc(desc)
                RECORDS.append({"event": "create_forward_fn", "desc": _desc(desc), "warmup": warmup})
                forward_fn, attn = create_forward_fn(desc, warmup)

                def forward(cg_mode):
                    RECORDS.append({"event": "forward_fn", "desc": _desc(desc), "warmup": warmup,
                                    "cg_mode": getattr(cg_mode, "name", None),
                                    "stream_capturing": torch.cuda.is_current_stream_capturing()})
                    return forward_fn(cg_mode)
                return forward, attn
            try:
                return original(self, forward_factory, *args, **kwargs)
            finally:
                STATE["capture_desc"] = None
        return call
    wrap(cudagraph_utils.CudaGraphManager, "capture", capture)

    def capture_model(original):
        def call(self, *args, **kwargs):
            free0, reserved0 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
            result = original(self, *args, **kwargs)
            free1, reserved1 = torch.cuda.mem_get_info()[0], torch.cuda.memory_reserved()
            RECORDS.append({"event": "capture_model_memory", "free_delta": free0 - free1,
                            "reserved_delta": reserved1 - reserved0, "returned": result})
            return result
        return call
    wrap(model_runner.GPUModelRunner, "capture_model", capture_model)

    begin = torch.cuda.CUDAGraph.capture_begin

    def capture_begin(self, *args, **kwargs):
        frames = [f"{f.name}@{os.path.basename(f.filename)}" for f in traceback.extract_stack(limit=14)[:-1]]
        RECORDS.append({"event": "cudagraph_capture_begin", "desc": STATE["capture_desc"], "frames": frames[-8:]})
        return begin(self, *args, **kwargs)
    torch.cuda.CUDAGraph.capture_begin = capture_begin


def main() -> None:
    out = sys.argv[2]
    install()
    sys.argv = [sys.argv[0], sys.argv[1], out + ".report.json", *sys.argv[3:]]
    from benchmarks.vllm_programs import offline
    try:
        offline.main()
    finally:
        with open(out, "w") as stream:
            for record in RECORDS:
                stream.write(json.dumps(record) + "\n")
        print(f"recorder: {len(RECORDS)} records")


if __name__ == "__main__":
    main()
