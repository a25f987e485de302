"""The post-mortem's evaluation set: startup cases, each labelled with the first finding the
diagnosis must give (``cause`` or ``cause/failure_class``; ``none`` when nothing should
stand out).

- ``runner-gpu``: ``replayscope run`` on a GPU with one cause injected each
  (tests/postmortem/make_cases.sh cuda); files under cases/gpu once they have been run.
- ``runner-cpu``: the same script on the CPU stand-in (cases/cpu).
- ``runner-h200``: the three H200 runs in docs/data.
- ``vllm-log`` / ``sglang-log``: engine logs written in the engines' real formats, small
  (cases/logs): a failure of each class, partial logs, slow phases.

``python -m tests.postmortem.cases`` prints the table docs/dashboard.md shows.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LOG_MTIME = 1_767_225_600.0      # 2026-01-01: logs print no year; this fixes the one they get


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    expected: str
    what: str

    @property
    def path(self) -> Path:
        if self.kind == "runner-h200":
            return ROOT / "docs" / "data" / f"{self.name}.jsonl"
        if self.kind.startswith("runner-"):
            return HERE / "cases" / self.kind.removeprefix("runner-") / f"{self.name}.jsonl"
        return HERE / "cases" / "logs" / f"{self.name}.log"


def _runner(tag: str, failed_capture: str) -> list[Case]:
    kind = f"runner-{tag}"
    return [
        Case(f"{tag}-clean", kind, "none", "the sizes its traffic uses, nothing injected"),
        Case(f"{tag}-many-sizes", kind, "too_many_sizes", "every size from 1 up, traffic up to 32"),
        Case(f"{tag}-compile", kind, "torch_compile", "--backend compile"),
        Case(f"{tag}-failed-capture", kind, failed_capture, "--fail-capture 16"),
        Case(f"{tag}-slow-size", kind, "slow_size", "--slow-capture 8:3"),
        Case(f"{tag}-slow-load", kind, "slow_weight_load", "a checkpoint read at 10 MB/s"),
        Case(f"{tag}-interrupted", kind, "interrupted", "SIGINT during capture"),
    ]


CASES: list[Case] = (
    _runner("gpu", "failure/capture_invalidated")
    + [Case("gpu-oom-cap", "runner-gpu", "failure/oom", "1b under --memory-cap-gib 2.6, sizes up to 512")]
    + _runner("cpu", "failure/unknown")
    + [Case("h200-1b-compile", "runner-h200", "torch_compile", "--backend compile, 3 sizes"),
       Case("h200-1b-failing-capture", "runner-h200", "failure/capture_invalidated", "--fail-capture 16"),
       Case("h200-1b-mixed", "runner-h200", "none", "the mixed workload, default sizes")]
    + [Case(name, "vllm-log", expected, what) for name, expected, what in (
        ("vllm-v1-capture-oom", "failure/oom", "EngineCore failed to start after a 0/67 capture bar"),
        ("vllm-v1-nccl", "failure/collective", "NCCL error on TP1 during capture"),
        ("vllm-v1-compile-error", "failure/compile_error", "InductorError while compiling"),
        ("vllm-v1-device-assert", "failure/kernel_assert", "device-side assert before capture"),
        ("vllm-v1-timeout", "failure/timeout", "the API server gave up waiting for the engine"),
        ("vllm-v1-capture-invalidated", "failure/capture_invalidated", "operation not permitted while capturing"),
        ("vllm-v0-35-sizes", "too_many_sizes", "V0: a 35/35 bar, 57 s, no per-size rows"),
        ("vllm-v1-compile-slow", "torch_compile", "torch.compile takes 90 s"),
        ("vllm-v1-slow-load", "slow_weight_load", "15 GiB in 161 s from NFS"),
        ("vllm-v1-unaccounted", "unaccounted", "31 s between model load and the KV cache line"),
        ("vllm-v1-graph-memory", "graph_memory", "2.10 GiB actual against 0.45 GiB estimated"),
        ("vllm-v1-partial", "interrupted", "an excerpt that ends mid-capture (31/67)"),
        ("vllm-v1-clean", "none", "a quick start"),
    )]
    + [Case(name, "sglang-log", expected, what) for name, expected, what in (
        ("sglang-capture-oom", "failure/oom", "Capture cuda graph failed: CUDA out of memory"),
        ("sglang-nccl", "failure/collective", "Capture cuda graph failed: NCCL error on TP1"),
        ("sglang-compile-error", "failure/compile_error", "--enable-torch-compile, Inductor raised"),
        ("sglang-kernel-assert", "failure/kernel_assert", "an index assertion in a kernel during capture"),
        ("sglang-dist-timeout", "failure/timeout", "torch.distributed timed out waiting for ranks"),
        ("sglang-many-sizes", "too_many_sizes", "35 sizes in 57 s, a bar with a count only"),
        ("sglang-slow-size", "slow_size", "bs 16 took 9 s on the bar, the others 1 s"),
        ("sglang-slow-load", "slow_weight_load", "Load weight end. elapsed=210.33 s for 15 GiB"),
        ("sglang-compile-slow", "torch_compile", "--enable-torch-compile, 110 s of capture"),
        ("sglang-truncated", "interrupted", "the log ends during capture"),
        ("sglang-clean", "none", "a quick start with decode batches"),
    )]
)


def load(case: Case, store) -> list[str]:
    """Put the case's run(s) into ``store`` the way a user does; returns the run ids."""
    from replayscope.collector.ingest import ingest_events, ingest_run
    from tests.stores import ingest_events_file

    if case.kind.startswith("runner-"):
        ingest_events_file(store, case.path)
        return [_run_id_of(case.path)]
    from replayscope.collector.importers import sglang_log, vllm_log

    parser = vllm_log if case.kind == "vllm-log" else sglang_log
    result = parser.parse_text(case.path.read_text(), path=case.path.name, mtime=LOG_MTIME)
    ids = []
    for run in result.runs:
        ingest_run(store, run.run)
        ingest_events(store, run.run["run_id"], run.events)
        ids.append(run.run["run_id"])
    return ids


def _run_id_of(path: Path) -> str:
    from replayscope.contract.events_file import read_events_file

    return read_events_file(path, validate=False).run["run_id"]


def first_finding(case: Case, store) -> str:
    """The label of the first finding of the case's (last) run; ``none`` without findings;
    ``no run`` when nothing could be imported."""
    from replayscope.collector.analysis.diagnosis import diagnose_run

    ids = load(case, store)
    if not ids:
        return "no run"
    findings = diagnose_run(store, ids[-1]).findings
    return findings[0].label if findings else "none"


def table() -> str:
    """The evaluation table for docs/dashboard.md: case, source, expected, found."""
    from replayscope.collector.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(f"sqlite:///{tmp}/eval.db", upgrade=True)
        try:
            rows = ["| case | source | what | expected first finding | found |", "| --- | --- | --- | --- | --- |"]
            for case in CASES:
                found = first_finding(case, store) if case.path.exists() else "not run yet"
                rows.append(f"| `{case.name}` | {case.kind} | {case.what} | `{case.expected}` | "
                            + (f"`{found}`" if found != "not run yet" else found) + " |")
        finally:
            store.dispose()
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
