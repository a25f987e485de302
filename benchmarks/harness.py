"""What the benchmarks share around their measurements: sinks for a run's events (dropped,
or kept in memory), the ``--json`` file of the figures (``--out``: a folder with the figures
and their markdown table), client threads timed together, and the ``--core`` option of the
graph runner's benchmarks; a plain Python spin of a few µs (a control: host time that touches little memory).

Standard library only: the GPU benchmarks import it on a host without the collector's packages.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any, Callable


class NullSink:
    """The runner's sink interface, dropping every event: a run's cost without its output."""

    def open(self, run):
        pass

    def write(self, events):
        pass

    def close(self):
        pass


class StandInGraph:
    """A CUDA graph's methods, doing nothing: what the hooks cost on the host, alone."""

    def capture_begin(self, pool=None, capture_error_mode="global"):
        pass

    def capture_end(self):
        pass

    def replay(self):
        pass

    def pool(self):
        return (0, 1)


class ListSink(NullSink):
    """Keeps the run's events in memory."""

    def __init__(self):
        self.events: list[dict[str, Any]] = []

    def write(self, events):
        self.events.extend(events)


def write_json(path: str | None, result: dict[str, Any]) -> None:
    """The figures as JSON into ``path`` (the ``--json`` option), when one is given."""
    if path:
        with open(path, "w") as out:
            json.dump(result, out, indent=2)


def write_folder(folder: str | None, name: str, result: dict[str, Any], markdown: str) -> None:
    """``name``.json (the figures) and ``name``.md (the table) into ``folder`` (made if missing),
    when one is given (the ``--out`` option)."""
    if folder:
        import os

        os.makedirs(folder, exist_ok=True)
        write_json(os.path.join(folder, f"{name}.json"), result)
        with open(os.path.join(folder, f"{name}.md"), "w") as out:
            out.write(markdown)


def add_core_option(parser: argparse.ArgumentParser) -> None:
    """``--core``: the graph runner's step core(s) measured (``replayscope.runner.runner_core``)."""
    parser.add_argument("--core", choices=("both", "compiled", "python"), default="both",
                        help="the runner's step core measured: both (each this process has, in the same rounds: "
                             "python, the reference, and compiled where it is built), compiled or python")


def runner_cores(parser: argparse.ArgumentParser, choice: str) -> tuple[str, ...]:
    """The step cores ``--core`` names, the Python reference first; a usage error when the compiled
    one is asked for and this process does not have it."""
    from replayscope.runner.runner_core import cores     # torch: only the runner's benchmarks ask

    if choice not in ("both", *cores()):
        parser.error(f"--core {choice}: the compiled runner core is not loaded here (not built: python3 setup.py "
                     "build_ext --inplace, or REPLAYSCOPE_PURE_PYTHON=1 is set)")
    return tuple(core for core in ("python", "compiled") if core in cores()) if choice == "both" else (choice,)


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def timed_threads(work: Callable[[int], None], count: int) -> float:
    """Seconds from starting ``count`` threads running ``work(k)`` (k = 0 .. count - 1) to the
    last one's end."""
    threads = [threading.Thread(target=work, args=(k,)) for k in range(count)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def python_spin(target_us: float = 5.0) -> tuple[Callable[[], None], float]:
    """A plain Python loop of about ``target_us`` on this host (little memory touched); (it, its µs
    measured alone, the best of 5 means)."""
    def spin_of(n: int) -> Callable[[], None]:
        loop = range(n)

        def spin():
            for _ in loop:
                pass
        return spin

    def best_us(fn: Callable[[], None], calls: int) -> float:
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter() - started) / calls * 1e6)
        return best
    per_pass = best_us(spin_of(1000), 200) / 1000
    spin = spin_of(max(1, round(target_us / per_pass)))
    return spin, best_us(spin, 2000)
