"""A program that calls a model compiled with torch.compile(mode="reduce-overhead") at 4 batch
sizes, 6 calls each, and knows nothing of replayscope. After each call it notes, itself, what the
call did, from the state Inductor's CUDA-graph tree manager is left in (``path_state``: a warm-up,
a recording, or a replay of a recorded graph), and writes its record as JSON:

    python compiled_sizes.py RECORD.json [cuda|cpu]

On a CPU there is no graph-tree manager: every call is noted eager (cpu_device).
"""

import json
import sys

import torch

SIZES = (1, 2, 4, 8)
CALLS = 6
WIDTH = 128


def what_the_call_did() -> dict:
    if not torch.cuda.is_initialized():
        return {"mode": "eager", "reason": "cpu_device", "state": None}
    from torch._inductor import cudagraph_trees

    manager = cudagraph_trees.get_container(torch.cuda.current_device()).tree_manager
    state = getattr(manager, "path_state", None)
    name = getattr(state, "name", None)
    if state == cudagraph_trees.ExecutionState.EXECUTION:
        return {"mode": "graph", "reason": None, "state": name}
    return {"mode": "eager", "reason": "graph_warmup", "state": name}     # WARMUP, or RECORDING


def main(out: str, device: str = "cuda") -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                torch.nn.Linear(4 * WIDTH, WIDTH)).to(device).eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    record = []
    with torch.inference_mode():
        for bs in SIZES:
            x = torch.randn(bs, WIDTH, device=device)
            for _ in range(CALLS):
                compiled(x)
                record.append({"raw_bs": bs, **what_the_call_did()})
    with open(out, "w") as f:
        json.dump(record, f)
    print("calls", len(record), "graph", sum(r["mode"] == "graph" for r in record))


if __name__ == "__main__":
    main(sys.argv[1], *(sys.argv[2:3]))
