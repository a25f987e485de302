"""Prometheus exposition: the only place that names replayscope's metrics.

Each app gets its own ``CollectorRegistry`` (tests build several apps in one process).
Labels are bounded: source, model, stage, mode, reason (custom reasons collapse to
``custom`` via ``replayscope.contract.wire.reason_label``; steps without a reason carry no reason label
value), result, rule. ``model`` is the run's model as its record names it, cut to
``MODEL_LABEL_CHARS``; past ``MAX_MODEL_LABELS`` distinct models in one process the rest
count under ``other``. Never a run id or a per-step value. Counters count what this process
ingested since it started (Prometheus handles the reset); ``replayscope_alerts_firing``
is read from the store at scrape time, so it is right whichever process evaluates.
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from replayscope.contract.wire import DECODE_STAGES, reason_label

STEPS_TOTAL = "replayscope_steps_total"
TOKENS_TOTAL = "replayscope_tokens_total"
PADDED_TOKENS_TOTAL = "replayscope_padded_tokens_total"
CAPTURE_DURATION_SECONDS = "replayscope_capture_duration_seconds"
GRAPH_POOL_BYTES = "replayscope_graph_pool_bytes"
INGEST_EVENTS_TOTAL = "replayscope_ingest_events_total"
INGEST_BATCHES_TOTAL = "replayscope_ingest_batches_total"
ALERTS_FIRING = "replayscope_alerts_firing"
RUNS = "replayscope_runs"
ALERT_NOTIFICATIONS_TOTAL = "replayscope_alert_notifications_total"
ALERT_NOTIFICATIONS_PENDING = "replayscope_alert_notifications_pending"
NOTIFICATION_RESULTS = ("sent", "failed", "unconfirmed", "expired")

# The decode stages (replayscope.contract.wire.DECODE_STAGES) as a PromQL label matcher: the shipped
# Prometheus rule (deploy/prometheus) and the Grafana board (deploy/grafana) select the
# decode steps with exactly this, as the built-in alert rule and the run page do.
DECODE_STAGES_MATCHER = 'stage=~"' + "|".join(DECODE_STAGES) + '"'

# Per-run metrics carry the run's model; a fleet has a few, a typo-prone script could make many.
MAX_MODEL_LABELS = 50
MODEL_LABEL_CHARS = 120
OTHER_MODELS = "other"
RUN_LABELS = ("source", "model")

# Captures take from about a millisecond (one small graph) to minutes (compile + capture).
CAPTURE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                     10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class _StoreGauges:
    """Gauges computed from the store at scrape time."""

    def __init__(self, read: Callable[[], tuple[dict[str, int], dict[str, int]]]):
        self._read = read

    def describe(self):
        return []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        firing, runs_by_status = self._read()
        alerts = GaugeMetricFamily(ALERTS_FIRING, "Alerts firing now, by rule.", labels=["rule"])
        for rule, n in sorted(firing.items()):
            alerts.add_metric([rule], n)
        yield alerts
        runs = GaugeMetricFamily(RUNS, "Runs in the store, by status.", labels=["status"])
        for status, n in sorted(runs_by_status.items()):
            runs.add_metric([status], n)
        yield runs


class _OutboxGauge:
    """Notifications owed and not yet delivered, read from the store at scrape time."""

    def __init__(self, read: Callable[[], int | None]):
        self._read = read

    def describe(self):
        return []

    def collect(self) -> Iterable[GaugeMetricFamily]:
        pending = self._read()
        gauge = GaugeMetricFamily(ALERT_NOTIFICATIONS_PENDING,
                                  "Alert notifications in the outbox not yet delivered (being retried).")
        if pending is not None:
            gauge.add_metric([], pending)
        yield gauge


class ModelLabels:
    """The ``model`` label value of a run's model: bounded in length and in number."""

    def __init__(self, limit: int = MAX_MODEL_LABELS):
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, model: str | None) -> str:
        value = (model or "").strip()[:MODEL_LABEL_CHARS] or "unknown"
        if value in self._seen:
            return value
        if len(self._seen) >= self._limit:
            return OTHER_MODELS
        self._seen.add(value)
        return value


class Metrics:
    """One app's metrics and their registry."""

    def __init__(self, store_gauges: Callable[[], tuple[dict[str, int], dict[str, int]]] | None = None,
                 outbox_pending: Callable[[], int | None] | None = None):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.model_label = ModelLabels()
        self.steps = Counter(STEPS_TOTAL, "Steps by execution mode and eager reason.",
                             [*RUN_LABELS, "stage", "mode", "reason"], registry=r)
        self.tokens = Counter(TOKENS_TOTAL, "Tokens computed for requests (padding not included).",
                              [*RUN_LABELS, "stage"], registry=r)
        self.padded_tokens = Counter(PADDED_TOKENS_TOTAL, "Tokens computed as padding up to a captured size.",
                                     [*RUN_LABELS, "stage"], registry=r)
        self.capture_duration = Histogram(CAPTURE_DURATION_SECONDS, "Duration of one graph capture.",
                                          [*RUN_LABELS, "stage"], buckets=CAPTURE_BUCKETS_S, registry=r)
        self.graph_pool = Gauge(GRAPH_POOL_BYTES, "Graph memory pool size after the latest capture.",
                                list(RUN_LABELS), registry=r)
        self.ingest_events = Counter(INGEST_EVENTS_TOTAL, "Events received, by what became of them.",
                                     ["result"], registry=r)
        self.ingest_batches = Counter(INGEST_BATCHES_TOTAL, "Event batches received, by outcome.",
                                      ["result"], registry=r)
        for result in ("accepted", "duplicate", "rejected"):
            self.ingest_events.labels(result)
        for result in ("ok", "rejected", "unavailable"):
            self.ingest_batches.labels(result)
        self.notifications = Counter(ALERT_NOTIFICATIONS_TOTAL,
                                     "Alert notification attempts by outcome: sent (2xx), failed (will be "
                                     "retried), unconfirmed (no answer twice: not sent again), expired "
                                     "(given up).", ["result"], registry=r)
        for result in NOTIFICATION_RESULTS:
            self.notifications.labels(result)
        if store_gauges is not None:
            r.register(_StoreGauges(store_gauges))
        if outbox_pending is not None:
            r.register(_OutboxGauge(outbox_pending))

    def observe_ingest(self, result) -> None:
        """Count one accepted batch (an ``replayscope.collector.ingest.IngestResult``)."""
        run = (result.source, self.model_label(result.model))
        self.ingest_batches.labels("ok").inc()
        if result.accepted:
            self.ingest_events.labels("accepted").inc(result.accepted)
        if result.duplicates:
            self.ingest_events.labels("duplicate").inc(result.duplicates)
        for (stage, mode, reason), n in result.step_counts.items():
            self.steps.labels(*run, stage, mode, reason_label(reason) or "").inc(n)
        for stage, tokens in result.tokens_by_stage.items():
            if tokens:
                self.tokens.labels(*run, stage).inc(tokens)
        for stage, padded in result.padded_by_stage.items():
            if padded:
                self.padded_tokens.labels(*run, stage).inc(padded)
        for stage, seconds in result.capture_durations:
            self.capture_duration.labels(*run, stage).observe(seconds)
        if result.pool_bytes is not None:
            self.graph_pool.labels(*run).set(result.pool_bytes)

    def observe_rejected(self, events: int, unavailable: bool = False) -> None:
        self.ingest_batches.labels("unavailable" if unavailable else "rejected").inc()
        if events and not unavailable:
            self.ingest_events.labels("rejected").inc(events)

    def observe_notifications(self, result) -> None:
        """Count one notifier round (a ``replayscope.collector.alerting.notifications.SendResult``)."""
        for outcome in NOTIFICATION_RESULTS:
            n = getattr(result, outcome)
            if n:
                self.notifications.labels(outcome).inc(n)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
