"""vLLM's ``--cudagraph-metrics`` tables (``**CUDAGraph Config Settings:**`` and
``**CUDAGraph Stats:**``) as a run sees them: each row a ``step_counts`` event, a NONE row's
cause from what the table and the config say. A mixin of ``replayscope.collector.importers.vllm_log.VllmRun``
(its ``meta``, ``table`` and ``emit`` are the run's).
"""

from __future__ import annotations

from typing import Any

from replayscope.collector.importers.facts import Fact, int_list, to_int
from replayscope.collector.importers.stages import vllm_row_stage


class MetricsTables:
    """The table handlers of a vLLM run (``on_cg_*``, ``on_row``) and what says graphs are off."""

    meta: dict[str, Any]

    def on_cg_settings(self, fact: Fact) -> None:
        self.table_mode = None
        self.table_sizes = []

    def on_cg_mode(self, fact: Fact) -> None:
        self.table_mode = fact.data["mode"].split(".")[-1].upper()

    def on_cg_sizes(self, fact: Fact) -> None:
        self.table_sizes = sorted(set(int_list(fact.data["sizes"])))

    def on_cg_stats(self, fact: Fact) -> None:
        interval = None
        if fact.line.ts is not None and self.last_table_ts is not None:
            interval = max(0.0, fact.line.ts - self.last_table_ts)
        self.last_table_ts = fact.line.ts if fact.line.ts is not None else self.last_table_ts
        self.table = {"ts": fact.line.ts, "interval": interval}
        self.step_tables += 1
        self.release()

    def on_row(self, fact: Fact) -> None:
        if self.table is None:
            return
        cells = [c.strip() for c in fact.data["cells"].split("|")]
        if len(cells) != 5 or cells[0].startswith("Unpadded") or set(cells[0]) <= set("-: "):
            return
        unpadded, padded, paddings, count = (to_int(cells[i]) for i in (0, 1, 2, 4))
        mode = cells[3].split(".")[-1].upper()
        if None in (unpadded, padded, paddings, count) or count < 1 or min(unpadded, paddings) < 0 or unpadded < 1:
            self.warnings.append(f"line {fact.line.lineno}: a CUDAGraph Stats row that does not read: skipped")
            return
        stage, evidence = vllm_row_stage(self.table_mode or self.meta.get("cudagraph_mode"), mode)
        event = {"kind": "step_counts", "ts": self.table["ts"], "stage": stage, "count": count,
                 "num_tokens": unpadded * count, "padded_tokens": paddings * count, "duration_s": None,
                 "interval_s": self.table["interval"], "raw_bs": unpadded}
        if mode == "NONE":
            event.update(mode="eager", graph_bs=None, **self._eager_cause(unpadded))
        else:
            graph_bs = padded if padded >= unpadded else unpadded
            event.update(mode="padded" if paddings > 0 and graph_bs > unpadded else "graph", reason=None,
                         graph_bs=graph_bs, evidence=evidence)
        self.emit(event)

    def graphs_off(self) -> str | None:
        """What in the log says this server runs without graphs, if anything does."""
        if self.meta.get("enforce_eager"):
            return "enforce_eager=True"
        if self.table_mode == "NONE":
            return "the table's mode NONE"
        if self.meta.get("cudagraph_mode") == "NONE":
            return "cudagraph_mode NONE"
        if self.meta.get("use_cudagraph") is False:
            return "use_cudagraph false"
        if self.meta.get("graphs_off"):
            return repr(self.meta["graphs_off"])
        return None

    def _eager_cause(self, tokens: int) -> dict[str, Any]:
        """Why a NONE row ran eager, from what the table's header and the config say."""
        mode = self.table_mode or self.meta.get("cudagraph_mode")
        sizes = self.table_sizes or self.meta.get("capture_sizes") or []
        off = self.graphs_off()
        if off:
            return {"reason": "graphs_disabled", "provenance": "inferred",
                    "evidence": f"graphs are off for this server ({off})"}
        if sizes and tokens > max(sizes):
            return {"reason": "batch_too_large", "provenance": "inferred",
                    "evidence": f"{tokens} tokens is above the largest captured size {max(sizes)}"}
        if mode == "FULL_DECODE_ONLY":
            return {"reason": "prefill", "provenance": "inferred",
                    "evidence": "FULL_DECODE_ONLY captures decode-only batches; a batch with prefill tokens "
                                "runs eager"}
        return {"reason": "unknown", "provenance": None, "evidence": None}

