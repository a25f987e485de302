"""An engine's Prometheus endpoint -> step counts over time (``replayscope scrape``).

SGLang counts forward passes by mode in ``sglang:cuda_graph_passes_total{mode=...}``
(some deployments spell it ``sglang_cuda_graph_passes_total``), once per tensor-parallel
rank. vLLM counts engine steps and their tokens in ``vllm:iteration_tokens_total``, without
their mode (``scrape_vllm.py``).

A ``Scraper`` polls the endpoint; the first poll is the baseline and each later poll's
increase becomes ``step_counts`` events. Every series is followed on its own: a value
lower than before, or a new ``_created`` time, means the server restarted and the new value
is the increase since then. Ranks that count the same steps (``tp_rank``, ``pp_rank``, ...)
are counted once, from the lowest rank; data-parallel ranks (``dp_rank``, vLLM's
``engine``) run different batches and add up.
"""

from __future__ import annotations

import hashlib
import math
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from prometheus_client.parser import text_string_to_metric_families

from replayscope.collector.importers.scrape_vllm import (VLLM_NOT_MEASURED, VLLM_NOT_MEASURED_GRAPHS_OFF,
                                                         VLLM_TOKENS, is_vllm, vllm_events)
from replayscope.contract.errors import ReplayscopeError
from replayscope.contract.wire import WIRE_VERSION, validate_event, validate_run

SGLANG_PASSES = ("sglang:cuda_graph_passes_total", "sglang_cuda_graph_passes_total")
# What SGLang's counter cannot give: the padding, why a pass ran eager, its batch size.
SGLANG_NOT_MEASURED = ["padding", "reasons", "batch_sizes"]
# Labels whose values are ranks that see the same steps (counted once, from the lowest).
_SAME_STEP_RANKS = ("tp_rank", "pp_rank", "moe_ep_rank", "ep_rank", "attn_tp_rank", "attn_cp_rank", "cp_rank",
                    "rank", "pid")

Sample = tuple[str, dict[str, str], float]


def parse_samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition; ReplayscopeError when it is not one."""
    out: list[Sample] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if math.isfinite(sample.value):
                    out.append((sample.name, dict(sample.labels), float(sample.value)))
    except Exception as error:  # the parser raises ValueError and friends on non-Prometheus text
        raise ReplayscopeError(f"not Prometheus text exposition ({type(error).__name__}: {error})") from None
    return out


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


def _rank_value(value: str) -> tuple:
    try:
        return (0, int(value))
    except ValueError:
        return (1, value)


class Counters:
    """Increases of counter series between polls, each series on its own."""

    def __init__(self) -> None:
        self.previous: dict[tuple, tuple[float, float | None]] = {}   # series -> (value, created)
        self.resets = 0

    def delta(self, key: tuple, value: float, created: float | None, baseline: bool) -> float:
        before = self.previous.get(key)
        self.previous[key] = (value, created)
        if baseline:
            return 0.0
        if before is None:
            return value                  # a series born since the last poll: all of it is new
        old, old_created = before
        if value < old or (created is not None and old_created is not None and created != old_created):
            self.resets += 1
            return value                  # restarted: the new value is the increase since
        return value - old


def _group_once_per_step(series: dict[tuple, Any]) -> dict[tuple, Any]:
    """Of series that differ only in same-step rank labels, keep the lowest rank's."""
    groups: dict[tuple, tuple[tuple, Any]] = {}
    for labels, value in series.items():
        labels_d = dict(labels)
        rank = tuple(_rank_value(labels_d[k]) for k in _SAME_STEP_RANKS if k in labels_d)
        group = tuple((k, v) for k, v in labels if k not in _SAME_STEP_RANKS)
        if group not in groups or rank < groups[group][0]:
            groups[group] = (rank, value)
    return {group: value for group, (_, value) in groups.items()}


class Scraper:
    """Polls one SGLang or vLLM /metrics URL; ``poll()`` returns the events of that poll."""

    def __init__(self, url: str, *, fetch_text: Callable[[str], str] = fetch, clock: Callable[[], float] = time.time,
                 capture_sizes: list[int] | None = None, max_capture_size: int | None = None,
                 graphs_off: str | None = None):
        """``capture_sizes`` / ``max_capture_size``: vLLM's, where the user knows them (the
        server's flags or log); without them no vLLM step's mode is known. ``graphs_off``: why
        the vLLM server runs without graphs (its log says so), when it does."""
        self.url = url
        self.fetch_text = fetch_text
        self.clock = clock
        self.counters = Counters()
        self.polls = 0
        self.previous_ts: float | None = None
        self.seq = 0
        self.run: dict[str, Any] | None = None
        self.engine: str | None = None
        self.capture_sizes: list[int] = sorted(set(capture_sizes or []))
        self.max_capture_size = self.capture_sizes[-1] if self.capture_sizes else max_capture_size
        self.graphs_off = graphs_off
        self.engine_counts: dict[str, int] = {}      # vLLM's own counts since the first poll
        self.warnings: list[str] = []
        self.reset_polls = 0

    @property
    def resets(self) -> int:
        """Polls that found a restarted server (a counter lower than before)."""
        return self.reset_polls

    def _run_record(self, ts: float, labels: dict[str, str]) -> dict[str, Any]:
        digest = hashlib.sha256(f"{self.url}|{ts:.6f}".encode()).hexdigest()[:20]
        config: dict[str, Any] = {"engine": self.engine, "metrics_url": self.url,
                                  "rank_policy": "ranks that count the same steps are counted once"}
        if self.engine == "vllm":
            config.update(metric=VLLM_TOKENS, not_measured=list(VLLM_NOT_MEASURED_GRAPHS_OFF if self.graphs_off
                                                                 else VLLM_NOT_MEASURED))
            if self.capture_sizes:
                config.update(capture_sizes=self.capture_sizes)
            if self.max_capture_size:
                config.update(max_capture_size=self.max_capture_size)
        else:
            config.update(metric=SGLANG_PASSES[0], not_measured=list(SGLANG_NOT_MEASURED))
        record = {
            "run_id": f"{self.engine}-metrics-{digest}", "name": f"{self.engine} metrics {self.url}"[:200],
            "source": f"{self.engine}-metrics", "started_at": ts, "backend": self.engine, "device": "unknown",
            "model": (labels.get("model_name") or "unknown")[:300], "torch_version": None,
            "config": config, "wire_version": WIRE_VERSION, "partial": True, "time_provenance": "measured",
        }
        validate_run(record)
        return record

    def poll(self) -> list[dict[str, Any]]:
        text = self.fetch_text(self.url)
        ts = self.clock()
        try:
            samples = parse_samples(text)
        except ReplayscopeError as error:
            raise ReplayscopeError(f"{self.url}: {error}") from None
        engine = self._engine_of(samples)
        if engine is None:
            if self.run is None:
                raise ReplayscopeError(f"{self.url} has none of {SGLANG_PASSES[0]}, {SGLANG_PASSES[1]} or "
                                       f"{VLLM_TOKENS} (is this SGLang with --enable-metrics, or vLLM?)")
            self.warnings.append(f"a poll at {ts:.0f} had no graph counters: skipped")
            return []
        self.engine = self.engine or engine
        labels = next((l for name, l, _ in samples if name.startswith(("sglang", "vllm")) and "model_name" in l), {})
        baseline = self.polls == 0
        resets_before = self.counters.resets
        interval = max(0.0, ts - self.previous_ts) if self.previous_ts is not None else None
        if self.engine == "sglang":
            events = self._sglang(samples, ts, interval, baseline)
        else:
            events = self._vllm(samples, ts, interval, baseline)
        if self.counters.resets > resets_before:
            self.reset_polls += 1
        if self.run is None:
            self.run = self._run_record(ts, labels)
        self.polls += 1
        self.previous_ts = ts
        for event in events:
            event["seq"] = self.seq
            validate_event(event)
            self.seq += 1
        return events

    @staticmethod
    def _engine_of(samples: list[Sample]) -> str | None:
        names = {name for name, _, _ in samples}
        if names & set(SGLANG_PASSES):
            return "sglang"
        if is_vllm(names):
            return "vllm"
        return None

    def _created(self, samples: list[Sample], name: str) -> dict[tuple, float]:
        created_name = name.removesuffix("_total") + "_created"
        return {tuple(sorted(l.items())): v for n, l, v in samples if n == created_name}

    # -- SGLang ------------------------------------------------------------------------
    def _sglang(self, samples: list[Sample], ts: float, interval: float | None,
                baseline: bool) -> list[dict[str, Any]]:
        deltas: dict[tuple, float] = {}
        for name in SGLANG_PASSES:
            created = self._created(samples, name)
            for sample_name, labels, value in samples:
                if sample_name != name or "mode" not in labels:
                    continue
                key = tuple(sorted(labels.items()))
                deltas[key] = self.counters.delta((name, key), value, created.get(key), baseline)
        per_mode: dict[str, float] = {}
        for group, delta in _group_once_per_step(deltas).items():
            mode = dict(group)["mode"]
            per_mode[mode] = per_mode.get(mode, 0.0) + delta
        events = []
        for mode, delta in sorted(per_mode.items()):
            count = int(round(delta))
            if count < 1:
                continue
            stage, graph = _sglang_mode(mode)
            event = {"ts": ts, "kind": "step_counts", "stage": stage, "mode": "graph" if graph else "eager",
                     "reason": None, "count": count, "num_tokens": 0, "padded_tokens": 0, "duration_s": None,
                     "interval_s": interval}
            if not graph:
                if stage == "prefill":
                    event.update(reason="prefill", provenance="inferred",
                                 evidence=f"mode={mode}: prefill forward passes without a graph")
                else:
                    event["reason"] = "unknown"
            events.append(event)
        return events

    # -- vLLM (collector/importers/scrape_vllm.py) --------------------------------------
    def _vllm(self, samples: list[Sample], ts: float, interval: float | None,
              baseline: bool) -> list[dict[str, Any]]:
        base = {"ts": ts, "kind": "step_counts", "duration_s": None, "interval_s": interval}
        return vllm_events(samples, lambda key, value, created: self.counters.delta(key, value, created, baseline),
                           base, self.max_capture_size, self.graphs_off, self.engine_counts)

    def final_run(self) -> dict[str, Any] | None:
        """The run's record with the engine's own counts over the scrape (vLLM: config
        ``engine_counts``: engine steps, tokens, prompt and generated tokens, requests
        finished), to send again at its end; None when there is nothing to add."""
        if self.run is None or not self.engine_counts:
            return None
        record = dict(self.run, config=dict(self.run["config"], engine_counts=dict(self.engine_counts)))
        validate_run(record)
        return record

    def end(self, status: str = "finished") -> dict[str, Any]:
        event = {"seq": self.seq, "ts": self.clock(), "kind": "run_end", "status": status, "error": None}
        self.seq += 1
        validate_event(event)
        return event


def _sglang_mode(mode: str) -> tuple[str, bool]:
    """SGLang's mode label -> (stage, ran a graph)."""
    graph = not mode.endswith("_none") and "graph" in mode
    head = mode.split("_", 1)[0]
    stage = {"decode": "decode", "prefill": "prefill", "extend": "prefill", "verify": "verify",
             "target": "verify", "idle": "decode"}.get(head, "decode")
    return stage, graph
