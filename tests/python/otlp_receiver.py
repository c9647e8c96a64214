"""A real OTLP/HTTP receiver on loopback, for tests.

It speaks the protocol of the OpenTelemetry Collector's ``otlphttp``
receiver: ``POST /v1/metrics`` and ``POST /v1/traces`` with
``Content-Type: application/x-protobuf`` (body optionally gzip/deflate
compressed, per ``Content-Encoding``), decoded with the official
``opentelemetry-proto`` messages, answered with the matching
``Export*ServiceResponse``. Anything else gets the status a collector gives
(404 unknown path, 405 not POST, 415 other content type, 400 undecodable).

Use it as a pytest fixture (``from otlp_receiver import otlp_receiver``) or
as a context manager::

    with OtlpReceiver() as rx:
        exporter_endpoint = rx.endpoint          # http://127.0.0.1:<port>
        ...
        rx.wait_for(lambda: rx.metric_names())   # decoded payloads arrive
        rx.metrics()["meridian_scheduler_steps_total"].sum.is_monotonic

Thread-safety: the server runs on its own thread; every accessor takes a
lock and returns copies of the decoded messages received so far.
"""
from __future__ import annotations

import gzip
import http.server
import threading
import time
import zlib
from collections.abc import Callable

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric
from opentelemetry.proto.trace.v1.trace_pb2 import Span

PROTOBUF = "application/x-protobuf"
_SIGNALS = {
    "/v1/metrics": (ExportMetricsServiceRequest, ExportMetricsServiceResponse),
    "/v1/traces": (ExportTraceServiceRequest, ExportTraceServiceResponse),
}


def any_value(value: AnyValue):
    """The Python value of an OTLP AnyValue (scalars; arrays as lists)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, which) if which else None


def attributes(kvs: list[KeyValue]) -> dict:
    """OTLP attributes as a dict."""
    return {kv.key: any_value(kv.value) for kv in kvs}


class OtlpReceiver:
    """An OTLP/HTTP receiver on 127.0.0.1 and an ephemeral port.

    ``fail_with``: an HTTP status to answer every request with instead (e.g.
    503 to see an exporter's failure path against a live server)."""

    def __init__(self, fail_with: int | None = None) -> None:
        self.fail_with = fail_with
        self._lock = threading.Lock()
        self._metrics: list[ExportMetricsServiceRequest] = []
        self._traces: list[ExportTraceServiceRequest] = []
        self.requests: list[tuple[str, dict[str, str]]] = []  # (path, headers) of every POST
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The base URL, as ``[telemetry] otlp_endpoint`` takes it."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> OtlpReceiver:
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- what arrived
    def metric_requests(self) -> list[ExportMetricsServiceRequest]:
        with self._lock:
            return list(self._metrics)

    def trace_requests(self) -> list[ExportTraceServiceRequest]:
        with self._lock:
            return list(self._traces)

    def metrics(self) -> dict[str, Metric]:
        """The latest Metric of each name (cumulative metrics: the newest wins)."""
        latest: dict[str, Metric] = {}
        for req in self.metric_requests():
            for rm in req.resource_metrics:
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        latest[m.name] = m
        return latest

    def metric_names(self) -> set[str]:
        return set(self.metrics())

    def spans(self) -> list[Span]:
        return [
            span
            for req in self.trace_requests()
            for rs in req.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]

    def wait_for(self, predicate: Callable[[], object], timeout_s: float = 15.0) -> None:
        """Poll until predicate() is truthy; AssertionError on timeout."""
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"OTLP receiver: condition not met in {timeout_s} s; got {len(self.requests)} POSTs")
            time.sleep(0.02)

    # ---- HTTP
    def _record(self, path: str, headers: dict[str, str], message: object) -> None:
        with self._lock:
            self.requests.append((path, headers))
            if message is not None:
                (self._metrics if path == "/v1/metrics" else self._traces).append(message)

    def _handler_class(self) -> type[http.server.BaseHTTPRequestHandler]:
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the exporter's requests.Session expects

            def log_message(self, *args: object) -> None:  # quiet test output
                pass

            def _reply(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._reply(405, b"OTLP/HTTP takes POST\n")

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                signal = _SIGNALS.get(self.path)
                if signal is None:
                    receiver._record(self.path, headers, None)
                    return self._reply(404, b"unknown OTLP path\n")
                if receiver.fail_with is not None:
                    receiver._record(self.path, headers, None)
                    return self._reply(receiver.fail_with, b"failing on purpose\n")
                if headers.get("content-type", "").split(";")[0].strip() != PROTOBUF:
                    receiver._record(self.path, headers, None)
                    return self._reply(415, b"expected application/x-protobuf\n")
                request_type, response_type = signal
                try:
                    encoding = headers.get("content-encoding", "").strip().lower()
                    if encoding == "gzip":
                        raw = gzip.decompress(raw)
                    elif encoding == "deflate":
                        raw = zlib.decompress(raw)
                    elif encoding not in ("", "identity"):
                        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
                    message = request_type.FromString(raw)
                except Exception as err:  # noqa: BLE001 - any undecodable body is a 400
                    receiver._record(self.path, headers, None)
                    return self._reply(400, f"cannot decode: {err}\n".encode())
                receiver._record(self.path, headers, message)
                self._reply(200, response_type().SerializeToString(), PROTOBUF)

        return Handler


@pytest.fixture
def otlp_receiver():
    """A started OtlpReceiver; stopped after the test."""
    with OtlpReceiver() as receiver:
        yield receiver
