"""OpenTelemetry export of Meridian's metrics and schedule steps (OTLP/HTTP).

Enabled by ``[telemetry] otlp_enabled = true``; needs the ``otel`` extra
(``pip install 'meridian[otel]'``: opentelemetry-sdk and
opentelemetry-exporter-otlp-proto-http). Everything goes through the
OpenTelemetry SDK's own data model and OTLP/HTTP exporters; nothing here
writes protobuf by hand.

Metrics
    Every catalog metric (``meridian.metric_catalog()``) is read from a
    ``meridian.MetricRegistry`` with ``snapshot()`` and exported as OTLP with
    cumulative temporality: counters as a monotonic Sum, gauges as a Gauge,
    histograms as a Histogram with the catalog's explicit bounds (the
    registry's per-bucket counts are exactly OTLP's ``bucket_counts``). Label
    names and values become data point attributes. Metric names are the
    catalog's Prometheus names, unchanged (``meridian_..._total``), so a
    collector's Prometheus exporter and the native ``/metrics`` agree.
    A background thread exports every ``export_interval_s``; ``shutdown()``
    exports once more. The registry is read, never written. The series'
    start time is this object's construction (create it with the registry).

Traces
    ``on_step()`` records one span ``meridian.schedule_batch`` per schedule
    step, with one span event ``meridian.phase_event`` per ``PhaseEvent`` of
    the step. Spans are batched (``BatchSpanProcessor``) and sent from the
    SDK's worker thread; the engine thread only builds the span (a few
    attribute writes per step and per phase event, nothing per token).

Failures
    A receiver that is down or answers an error is logged once (then at
    DEBUG) on the ``meridian.telemetry.otlp`` logger and counted in
    ``metric_export_failures`` / ``span_export_failures``; nothing is raised
    into the engine. The SDK exporters' own log lines are let through once
    per distinct message (a filter on their two loggers). A bad
    ``telemetry.otlp_endpoint`` is a ValueError at construction.

Typical use (the vLLM adapter)::

    from meridian.telemetry.otlp import OtlpTelemetry

    otlp = OtlpTelemetry.from_config(config, registry)   # None when disabled
    ...
    start_ns = time.time_ns()
    plan = driver.plan(limits, now_ns)                  # one schedule step
    ...                                                 # run it, feed the router
    if otlp is not None:
        otlp.on_step(plan.step, plan.stats, events, start_ns, time.time_ns())
    ...
    otlp.shutdown()                                      # at engine shutdown

Thread-safety: ``on_step``, ``export_metrics``, ``force_flush`` and
``shutdown`` may be called from any thread. Ownership: the registry is
borrowed and must outlive this object (until ``shutdown()`` returns).
"""
from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

__all__ = ["OtlpTelemetry", "SPAN_NAME", "EVENT_NAME", "otlp_signal_urls"]

_log = logging.getLogger("meridian.telemetry.otlp")

SPAN_NAME = "meridian.schedule_batch"
EVENT_NAME = "meridian.phase_event"
_SCOPE_NAME = "meridian"

# Catalog units as UCUM (what OTLP consumers expect); unknown ones become an
# annotation ("{events}"), which UCUM reads as dimensionless.
_UCUM = {"seconds": "s", "nanoseconds": "ns", "bytes": "By"}

# StepStats field -> span attribute. Depths and batch sizes by phase are what
# an operator correlates with a slow step; predicted_step_ms is the
# scheduler's own estimate of it.
_STEP_ATTRIBUTES = (
    ("output_queue_depth", "meridian.queue.output"),
    ("think_queue_depth", "meridian.queue.think"),
    ("waiting_depth", "meridian.queue.waiting"),
    ("swapped_depth", "meridian.queue.swapped"),
    ("output_batch", "meridian.batch.output"),
    ("think_batch", "meridian.batch.think"),
    ("prefill_requests", "meridian.batch.prefill"),
    ("prefill_tokens", "meridian.batch.prefill_tokens"),
    ("due_think", "meridian.batch.due_think"),
    ("stalled", "meridian.stalled"),
    ("predicted_step_ms", "meridian.predicted_step_ms"),
    ("step_ceiling_ms", "meridian.step_ceiling_ms"),
)

_INT64_MAX = 2**63 - 1


def otlp_signal_urls(endpoint: str) -> tuple[str, str]:
    """The metrics and traces URLs (``<endpoint>/v1/metrics``, ``/v1/traces``)
    of an OTLP/HTTP base endpoint such as ``http://localhost:4318``.

    Raises ValueError naming ``telemetry.otlp_endpoint`` when it is not an
    http(s) URL with a host (and, if given, a valid port), carries a query or
    fragment, or already ends in a signal path.
    """
    where = "telemetry.otlp_endpoint"
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise ValueError(f"{where} must be an http(s) URL such as http://localhost:4318; got {endpoint!r}")
    try:
        url = urllib.parse.urlsplit(endpoint.strip())
        port = url.port  # raises ValueError when not a number in 0..65535
    except ValueError as err:
        raise ValueError(f"{where} is not a valid URL: {endpoint!r} ({err})") from None
    if url.scheme not in ("http", "https"):
        raise ValueError(f"{where} must use http or https (OTLP/HTTP); got {endpoint!r}")
    if not url.hostname:
        raise ValueError(f"{where} has no host; got {endpoint!r}")
    if port == 0:
        raise ValueError(f"{where} has port 0; got {endpoint!r}")
    if url.query or url.fragment:
        raise ValueError(f"{where} must not have a query or fragment; got {endpoint!r}")
    path = url.path.rstrip("/")
    if path.endswith(("/v1/metrics", "/v1/traces")):
        raise ValueError(
            f"{where} is the collector's base URL (e.g. http://localhost:4318); "
            f"/v1/metrics and /v1/traces are added to it; got {endpoint!r}"
        )
    base = urllib.parse.urlunsplit((url.scheme, url.netloc, path, "", ""))
    return base + "/v1/metrics", base + "/v1/traces"


def _field(obj: Any, name: str) -> Any:
    """obj.name or obj[name] (StepStats / PhaseEvent bindings, or dicts); None if absent."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _enum_label(value: Any) -> str:
    """PhaseEventKind.EXIT_THINK -> "exit_think" (the catalog's label spelling)."""
    name = getattr(value, "name", None)
    return (name if isinstance(name, str) else str(value)).lower()


class _CountingSpanExporter(SpanExporter):
    """The OTLP span exporter, counting failed batches (it runs on the
    BatchSpanProcessor's worker thread)."""

    def __init__(self, inner: SpanExporter, owner: OtlpTelemetry) -> None:
        self._inner = inner
        self._owner = owner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as err:  # noqa: BLE001 - an exporter bug must not kill the worker
            self._owner._failed("span", err)
            return SpanExportResult.FAILURE
        if result == SpanExportResult.SUCCESS:
            self._owner._succeeded("span")
        else:
            self._owner._failed("span", f"{len(spans)} span(s) not delivered")
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


class OtlpTelemetry:
    """OTLP/HTTP export of a MetricRegistry and of per-step spans.

    Args:
        telemetry: the ``[telemetry]`` section (``meridian.TelemetryConfig``)
            or a whole ``meridian.MeridianConfig``; its ``otlp_endpoint`` (base
            URL, default ``http://localhost:4318``) and ``service_name`` are
            used. ``otlp_enabled`` is the caller's switch (see from_config).
        registry: the ``meridian.MetricRegistry`` to export, or None for spans
            only.
        resource_attributes: extra OpenTelemetry resource attributes (e.g.
            ``{"service.instance.id": ...}``); ``service.name`` always comes
            from the config.
        export_interval_s: seconds between metric exports (> 0).
        export_timeout_s: per-export HTTP timeout, retries included (> 0;
            default min(export_interval_s, 10)).
        catalog: the metric catalog (default ``meridian.metric_catalog()``);
            gives units, help and histogram bounds.
        compression: "gzip", "deflate" or None (default: the SDK's
            OTEL_EXPORTER_OTLP_COMPRESSION, else none).
        start: start the periodic metric export thread now.
    """

    def __init__(
        self,
        telemetry: Any,
        registry: Any | None,
        resource_attributes: Mapping[str, Any] | None = None,
        *,
        export_interval_s: float = 10.0,
        export_timeout_s: float | None = None,
        catalog: Iterable[Mapping[str, Any]] | None = None,
        compression: str | None = None,
        start: bool = True,
    ) -> None:
        section = getattr(telemetry, "telemetry", telemetry)  # MeridianConfig -> its [telemetry]
        self.metrics_url, self.traces_url = otlp_signal_urls(_field(section, "otlp_endpoint"))
        service_name = _field(section, "service_name") or "meridian"
        if not (export_interval_s > 0):
            raise ValueError(f"OtlpTelemetry: export_interval_s must be > 0; got {export_interval_s!r}")
        timeout_s = min(export_interval_s, 10.0) if export_timeout_s is None else export_timeout_s
        if not (timeout_s > 0):
            raise ValueError(f"OtlpTelemetry: export_timeout_s must be > 0; got {export_timeout_s!r}")

        self.resource = Resource.create({**(resource_attributes or {}), SERVICE_NAME: str(service_name)})
        self._registry = registry
        if catalog is None and registry is not None:
            from .._meridian import metric_catalog  # the C++ table, the one source of truth

            catalog = metric_catalog()
        self._catalog = {entry["name"]: entry for entry in (catalog or ())}
        self._scope = InstrumentationScope(_SCOPE_NAME, _package_version())
        self._start_ns = time.time_ns()  # start of every cumulative series we export

        self._lock = threading.Lock()  # counters, the once-only logging, shutdown state
        self._counts = {"metric_ok": 0, "metric_failed": 0, "span_ok": 0, "span_failed": 0}
        self._warned: set[str] = set()
        self._closed = False

        if compression not in (None, "gzip", "deflate"):
            raise ValueError(f"OtlpTelemetry: compression must be gzip, deflate or None; got {compression!r}")
        codec = None if compression is None else Compression(compression)
        _quiet_repeated_sdk_errors()
        self._metric_exporter = OTLPMetricExporter(endpoint=self.metrics_url, timeout=timeout_s, compression=codec)
        self._export_lock = threading.Lock()  # one metric export at a time (thread vs. shutdown)
        span_exporter = _CountingSpanExporter(
            OTLPSpanExporter(endpoint=self.traces_url, timeout=timeout_s, compression=codec), self
        )
        # A step of a large batch may carry hundreds of phase events; the SDK
        # default (128) would drop the rest silently.
        self._tracer_provider = TracerProvider(
            resource=self.resource, span_limits=SpanLimits(max_events=4096, max_span_attributes=64)
        )
        self._tracer_provider.add_span_processor(
            BatchSpanProcessor(
                span_exporter,
                schedule_delay_millis=int(min(export_interval_s, 5.0) * 1000),
                export_timeout_millis=int(timeout_s * 1000),
            )
        )
        self._tracer = self._tracer_provider.get_tracer(_SCOPE_NAME, _package_version())

        self._interval_s = float(export_interval_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start and registry is not None:
            self._thread = threading.Thread(target=self._run, name="meridian-otlp-metrics", daemon=True)
            self._thread.start()

    @classmethod
    def from_config(cls, config: Any, registry: Any | None, **kwargs: Any) -> OtlpTelemetry | None:
        """An exporter when ``[telemetry] otlp_enabled`` is true, else None.
        ``config`` is a MeridianConfig or its ``telemetry`` section; kwargs go
        to the constructor."""
        section = getattr(config, "telemetry", config)
        if not _field(section, "otlp_enabled"):
            return None
        return cls(section, registry, **kwargs)

    # ---- counters (for tests and the adapter's own health reporting)
    @property
    def metric_exports(self) -> int:
        """Metric exports the receiver accepted."""
        return self._counts["metric_ok"]

    @property
    def metric_export_failures(self) -> int:
        """Metric exports that failed (receiver down, HTTP error, encoding)."""
        return self._counts["metric_failed"]

    @property
    def span_exports(self) -> int:
        """Span batches the receiver accepted."""
        return self._counts["span_ok"]

    @property
    def span_export_failures(self) -> int:
        """Span batches that failed."""
        return self._counts["span_failed"]

    # ---- metrics
    def collect(self) -> MetricsData:
        """The registry's current values as the SDK's MetricsData (one
        resource, one scope ``meridian``, one Metric per catalog family)."""
        now_ns = time.time_ns()
        metrics = [m for fam in self._registry.snapshot() if (m := self._to_metric(fam, now_ns)) is not None]
        return MetricsData(
            resource_metrics=[
                ResourceMetrics(
                    resource=self.resource,
                    scope_metrics=[ScopeMetrics(scope=self._scope, metrics=metrics, schema_url="")],
                    schema_url="",
                )
            ]
        )

    def export_metrics(self) -> bool:
        """Export the registry now; True when the receiver accepted it. Never
        raises (a failure is logged once and counted)."""
        if self._registry is None:
            return False
        with self._export_lock:
            try:
                result = self._metric_exporter.export(self.collect())
            except Exception as err:  # noqa: BLE001 - never into the engine
                self._failed("metric", err)
                return False
        if result == MetricExportResult.SUCCESS:
            self._succeeded("metric")
            return True
        self._failed("metric", "receiver down, refused it, or timed out")
        return False

    def _to_metric(self, family: Mapping[str, Any], now_ns: int) -> Metric | None:
        name = family["name"]
        entry = self._catalog.get(name, {})
        kind = family["type"]
        start = self._start_ns
        if kind == "histogram":
            bounds = [float(b) for b in entry.get("buckets", ())]
            points = []
            for s in family["series"]:
                counts = [int(c) for c in s["bucket_counts"]]
                if len(counts) != len(bounds) + 1:
                    self._warn_once(f"shape:{name}", f"{name}: {len(counts)} bucket counts for {len(bounds)} bounds")
                    continue
                points.append(
                    HistogramDataPoint(
                        attributes=dict(s["labels"]),
                        start_time_unix_nano=start,
                        time_unix_nano=now_ns,
                        count=int(s["count"]),
                        sum=float(s["sum"]),
                        bucket_counts=counts,
                        explicit_bounds=bounds,
                        min=None,  # not kept by the registry: left out of the protobuf
                        max=None,
                    )
                )
            data: Any = Histogram(data_points=points, aggregation_temporality=AggregationTemporality.CUMULATIVE)
        else:
            points = [
                NumberDataPoint(
                    attributes=dict(s["labels"]),
                    start_time_unix_nano=start,
                    time_unix_nano=now_ns,
                    value=float(s["value"]),
                )
                for s in family["series"]
            ]
            if kind == "counter":
                data = Sum(
                    data_points=points,
                    aggregation_temporality=AggregationTemporality.CUMULATIVE,
                    is_monotonic=True,
                )
            elif kind == "gauge":
                data = Gauge(data_points=points)
            else:
                self._warn_once(f"type:{name}", f"{name}: unknown metric type {kind!r}; not exported")
                return None
        unit = entry.get("unit", "")
        return Metric(
            name=name,
            description=entry.get("help", ""),
            unit=_UCUM.get(unit, f"{{{unit}}}" if unit else ""),
            data=data,
        )

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.export_metrics()

    # ---- traces
    def on_step(
        self,
        step_index: int,
        stats: Any = None,
        events: Iterable[Any] = (),
        start_ns: int | None = None,
        end_ns: int | None = None,
    ) -> None:
        """Record one schedule step as a ``meridian.schedule_batch`` span.

        Args:
            step_index: the scheduler's step number (``StepPlan.step``).
            stats: ``meridian.StepStats`` (``StepPlan.stats``) or a dict with
                its field names; its queue depths, batch sizes by phase and
                predicted step time become ``meridian.*`` attributes.
            events: the step's ``meridian.PhaseEvent``s (or dicts with their
                field names); each becomes a ``meridian.phase_event`` span
                event with attributes ``meridian.event.kind`` (enter_think,
                exit_think, force_budget, complete), ``meridian.request_id``,
                ``meridian.think_tokens``, ``meridian.forced``, and, for a
                force or a forced exit, ``meridian.reason`` (converged,
                overthinking, hard_cap) and ``meridian.reissue``.
            start_ns, end_ns: wall-clock (``time.time_ns()``) bounds of the
                step; default now.
        """
        if self._closed:
            return
        attributes: dict[str, Any] = {"meridian.step": int(step_index)}
        if stats is not None:
            for field, key in _STEP_ATTRIBUTES:
                value = _field(stats, field)
                if value is not None:
                    attributes[key] = value
        span = self._tracer.start_span(SPAN_NAME, attributes=attributes, start_time=start_ns)
        when = end_ns if end_ns is not None else time.time_ns()
        for event in events:
            span.add_event(EVENT_NAME, attributes=_event_attributes(event), timestamp=when)
        span.end(end_time=when)

    # ---- lifecycle
    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Export metrics now and send every finished span; True if both went through."""
        metrics_ok = self.export_metrics() if self._registry is not None else True
        spans_ok = self._tracer_provider.force_flush(int(timeout_s * 1000))
        return metrics_ok and spans_ok

    def shutdown(self) -> None:
        """Stop the export thread, export metrics one last time, send the
        remaining spans, and close the exporters. Idempotent; never raises."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self._registry is not None:
                self.export_metrics()
            self._tracer_provider.shutdown()  # flushes the BatchSpanProcessor
            self._metric_exporter.shutdown()
        except Exception as err:  # noqa: BLE001 - shutdown runs at engine exit
            self._warn_once("shutdown", f"OTLP shutdown: {err}")

    def __enter__(self) -> OtlpTelemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # ---- failure accounting
    def _succeeded(self, signal: str) -> None:
        with self._lock:
            self._counts[f"{signal}_ok"] += 1

    def _failed(self, signal: str, why: object) -> None:
        with self._lock:
            self._counts[f"{signal}_failed"] += 1
        url = self.metrics_url if signal == "metric" else self.traces_url
        self._warn_once(
            f"export:{signal}", f"OTLP {signal} export to {url} failed: {why}; further failures are only counted"
        )

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            first = key not in self._warned
            self._warned.add(key)
        _log.log(logging.WARNING if first else logging.DEBUG, "%s", message)


def _event_attributes(event: Any) -> dict[str, Any]:
    kind = _enum_label(_field(event, "kind"))
    request_id = int(_field(event, "request_id") or 0)
    attributes: dict[str, Any] = {
        "meridian.event.kind": kind,
        # OTLP ints are int64; a uint64 id past that is sent as text.
        "meridian.request_id": request_id if request_id <= _INT64_MAX else str(request_id),
        "meridian.think_tokens": int(_field(event, "think_tokens") or 0),
        "meridian.forced": bool(_field(event, "forced")),
    }
    # The reason is only meaningful for a force and for an exit it caused.
    if kind == "force_budget" or attributes["meridian.forced"]:
        attributes["meridian.reason"] = _enum_label(_field(event, "reason"))
        attributes["meridian.reissue"] = bool(_field(event, "reissue"))
    return attributes


def _package_version() -> str:
    try:
        from meridian import __version__

        return str(__version__)
    except ImportError:  # the extension is not built (spans-only scratch use)
        return ""


class _FirstOfEachMessage(logging.Filter):
    """Lets each distinct log template through once: the SDK exporters log
    every failed export at ERROR, which for a receiver that is down for hours
    would be a line per interval. Our own warning and the failure counters
    carry the rest."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[tuple[str, object]] = set()
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


_SDK_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.metric_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
_sdk_filter_installed = False
_sdk_filter_lock = threading.Lock()


def _quiet_repeated_sdk_errors() -> None:
    global _sdk_filter_installed
    with _sdk_filter_lock:
        if _sdk_filter_installed:
            return
        quiet = _FirstOfEachMessage()
        for name in _SDK_EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(quiet)
        _sdk_filter_installed = True
