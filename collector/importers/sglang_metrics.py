"""SGLang's Prometheus endpoint -> step counts over time.

SGLang counts forward passes by mode in ``sglang:cuda_graph_passes_total{mode=...}``
(``decode_cuda_graph``, ``decode_none``, ``prefill_cuda_graph``, ``prefill_none``). A
``Scraper`` polls ``/metrics``; the first poll is the baseline, and each later poll's
increase per mode becomes one ``step_counts`` event (graph, or eager with reason
``unknown``: the counter does not say why). A counter that goes down means the server
restarted; its new value is the increase since then.
"""

from __future__ import annotations

import hashlib
import math
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from prometheus_client.parser import text_string_to_metric_families

from runner.errors import ReplayscopeError
from runner.wire import WIRE_VERSION, validate_event, validate_run

SOURCE = "sglang-metrics"
METRIC = "sglang:cuda_graph_passes_total"
# mode label -> (stage, wire mode, reason)
MODES: dict[str, tuple[str, str, str | None]] = {
    "decode_cuda_graph": ("decode", "graph", None),
    "decode_none": ("decode", "eager", "unknown"),
    "prefill_cuda_graph": ("prefill", "graph", None),
    "prefill_none": ("prefill", "eager", "unknown"),
}


def parse_passes(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """Per mode label, the counter summed over its other labels; and the labels seen on
    it (model_name, ...). ReplayscopeError when ``text`` is not Prometheus text."""
    totals: dict[str, float] = {}
    labels: dict[str, str] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name != METRIC:
                    continue
                mode = sample.labels.get("mode")
                if mode is None or not math.isfinite(sample.value):
                    continue
                totals[mode] = totals.get(mode, 0.0) + sample.value
                labels.update({k: v for k, v in sample.labels.items() if k != "mode"})
    except Exception as error:  # the parser raises ValueError and friends on non-Prometheus text
        raise ReplayscopeError(f"not Prometheus text exposition ({type(error).__name__}: {error})") from None
    return totals, labels


def fetch(url: str, timeout: float = 10.0) -> str:
    """The body of ``url`` as text; ReplayscopeError when it cannot be had."""
    request = urllib.request.Request(url, headers={"Accept": "text/plain"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(64 * 2**20)
    except urllib.error.HTTPError as error:
        raise ReplayscopeError(f"{url} answered HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError, ValueError) as error:
        raise ReplayscopeError(f"cannot reach {url}: {getattr(error, 'reason', error)}") from None
    return body.decode("utf-8", errors="replace")


class Scraper:
    """Polls one SGLang /metrics URL; ``poll()`` returns the events of that poll."""

    def __init__(self, url: str, *, fetch_text: Callable[[str], str] = fetch,
                 clock: Callable[[], float] = time.time):
        self.url = url
        self.fetch_text = fetch_text
        self.clock = clock
        self.previous: dict[str, float] | None = None
        self.previous_ts: float | None = None
        self.seq = 0
        self.run: dict[str, Any] | None = None
        self.resets = 0
        self.warnings: list[str] = []

    def _run_record(self, ts: float, labels: dict[str, str]) -> dict[str, Any]:
        digest = hashlib.sha256(f"{self.url}|{ts:.6f}".encode()).hexdigest()[:20]
        record = {
            "run_id": f"sglang-metrics-{digest}", "name": f"SGLang metrics {self.url}"[:200],
            "source": SOURCE, "started_at": ts, "backend": "sglang", "device": "unknown",
            "model": (labels.get("model_name") or "unknown")[:300], "torch_version": None,
            "config": {"engine": "sglang", "metrics_url": self.url, "metric": METRIC},
            "wire_version": WIRE_VERSION,
        }
        validate_run(record)
        return record

    def poll(self) -> list[dict[str, Any]]:
        text = self.fetch_text(self.url)
        ts = self.clock()
        try:
            totals, labels = parse_passes(text)
        except ReplayscopeError as error:
            raise ReplayscopeError(f"{self.url}: {error}") from None
        if not totals:
            if self.previous is None:
                raise ReplayscopeError(f"{self.url} has no {METRIC} samples "
                                       f"(is this SGLang with --enable-metrics?)")
            self.warnings.append(f"a poll at {ts:.0f} had no {METRIC} samples: skipped")
            return []
        if self.run is None:
            self.run = self._run_record(ts, labels)
        events: list[dict[str, Any]] = []
        if self.previous is not None:
            interval = max(0.0, ts - self.previous_ts) if self.previous_ts is not None else None
            reset = any(value < self.previous.get(mode, 0.0) for mode, value in totals.items())
            if reset:
                self.resets += 1
            for mode, (stage, wire_mode, reason) in MODES.items():
                if mode not in totals:
                    continue
                before = 0.0 if reset else self.previous.get(mode, 0.0)
                delta = int(round(totals[mode] - before))
                if delta < 1:
                    continue
                event = {"seq": self.seq, "ts": ts, "kind": "step_counts", "stage": stage,
                         "mode": wire_mode, "reason": reason, "count": delta, "num_tokens": 0,
                         "padded_tokens": 0, "duration_s": None, "interval_s": interval}
                validate_event(event)
                events.append(event)
                self.seq += 1
        self.previous = totals
        self.previous_ts = ts
        return events

    def end(self, status: str = "finished") -> dict[str, Any]:
        event = {"seq": self.seq, "ts": self.clock(), "kind": "run_end", "status": status, "error": None}
        self.seq += 1
        validate_event(event)
        return event
