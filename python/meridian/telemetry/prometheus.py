"""Prometheus export of Meridian's metric catalog with ``prometheus_client``.

``PrometheusExporter(registry)`` makes one prometheus_client Counter, Gauge or
Histogram per catalog metric (``meridian.metric_catalog()``: names, help,
labels, buckets) in its own ``CollectorRegistry``, and ``sync()`` copies the
C++ ``meridian.MetricRegistry`` into them by deltas. The C++ registry is where
the engine records (relaxed atomics, no Python objects per event); the
prometheus_client objects are only its mirror, refreshed by ``sync()`` (the
vLLM adapter calls it at most every 0.25 s, never per token).

Two ways out, both from the same objects:

* ``serve(host, port)``: Meridian's own ``/metrics`` (prometheus_client's HTTP
  server on a daemon thread). One server per (host, port) per process; a
  later exporter in the same process takes the port over (tests and
  notebooks build several engines in one process). A port in use is logged
  once and counted in ``serve_errors``; nothing is raised.
* vLLM's ``/metrics``: when ``PROMETHEUS_MULTIPROC_DIR`` is set in the
  environment of ``vllm serve`` (by the user, or by vLLM itself with
  ``--api-server-count > 1``), prometheus_client writes every metric object's
  value to mmap files in that directory and vLLM's API server serves them all
  through a ``MultiProcessCollector``, so these objects, made in the engine
  core process, appear on vLLM's own ``/metrics``. Gauges use
  ``multiprocess_mode="livesum"`` there: the sum over live engine cores
  (data parallel), which is what queue depths and KV bytes mean fleet-wide.

Histograms: the registry keeps per-bucket counts and a sum; prometheus_client
has no public call to add n observations to one bucket, so ``sync()`` adds the
deltas to the histogram's value objects (``_buckets[i].inc(n)``,
``_sum.inc(x)``). ``_check_histogram_internals`` verifies at construction that
they are still there (a clear error if a prometheus_client release changes
them), and tests/python/test_telemetry_prometheus.py checks the exposed counts.

Thread-safety: ``sync()`` from one thread (the engine loop); the HTTP server
thread only reads the prometheus_client objects, which are thread-safe.
Ownership: the MetricRegistry is borrowed and must outlive the exporter.
"""
from __future__ import annotations

import itertools
import logging
import threading
import weakref
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

logger = logging.getLogger("meridian.telemetry.prometheus")


class _Series:
    """One catalog series' prometheus_client child and the values last copied."""

    __slots__ = ("child", "value", "buckets", "sum")

    def __init__(self, child: Any, nbuckets: int) -> None:
        self.child = child
        self.value = 0.0
        self.buckets = [0] * nbuckets
        self.sum = 0.0


def _check_histogram_internals(child: Any, nbuckets: int) -> None:
    """The histogram value objects ``sync()`` writes to (module docstring)."""
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if (not isinstance(buckets, list) or len(buckets) != nbuckets or not all(hasattr(b, "inc") for b in buckets)
            or not hasattr(total, "inc")):
        raise RuntimeError(
            f"prometheus_client {getattr(prometheus_client, '__version__', '?')}: Histogram has no per-bucket "
            "value objects (_buckets[i].inc, _sum.inc) any more; meridian.telemetry.prometheus needs updating")


class PrometheusExporter:
    """The catalog's metrics as prometheus_client objects, mirrored from a
    ``meridian.MetricRegistry`` (module docstring)."""

    def __init__(self, registry: Any, catalog: list[dict] | None = None) -> None:
        import meridian  # the C++ extension; imported here so this module loads without it for docs

        self.registry = registry
        self.collector_registry = CollectorRegistry()
        self.serve_errors = 0
        self.syncs = 0
        self._server: _Server | None = None
        # family name -> {label values tuple (catalog label order) -> _Series}
        self._families: dict[str, tuple[str, dict[tuple[str, ...], _Series]]] = {}
        for spec in catalog if catalog is not None else meridian.metric_catalog():
            name, kind = spec["name"], spec["type"]
            label_names = [label for label, _ in spec["labels"]]
            common = {"documentation": spec["help"], "labelnames": label_names, "registry": self.collector_registry}
            nbuckets = 0
            if kind == "counter":
                if not name.endswith("_total"):
                    raise ValueError(f"catalog counter {name!r} does not end in _total")
                metric = Counter(name[: -len("_total")], **common)
            elif kind == "gauge":
                metric = Gauge(name, multiprocess_mode="livesum", **common)
            elif kind == "histogram":
                metric = Histogram(name, buckets=[*spec["buckets"], float("inf")], **common)
                nbuckets = len(spec["buckets"]) + 1
            else:
                raise ValueError(f"catalog metric {name!r} has unknown type {kind!r}")
            series: dict[tuple[str, ...], _Series] = {}
            for values in itertools.product(*(vals for _, vals in spec["labels"])):
                child = metric.labels(*values) if values else metric
                if kind == "histogram":
                    _check_histogram_internals(child, nbuckets)
                series[tuple(values)] = _Series(child, nbuckets)
            self._families[name] = (kind, series)

    def sync(self) -> None:
        """Copies the registry's current values into the prometheus_client
        objects: counters and histograms by their increase since the last
        sync, gauges as they are."""
        for family in self.registry.snapshot():
            kind, series = self._families[family["name"]]
            for snap in family["series"]:
                s = series[tuple(snap["labels"].values())]
                if kind == "counter":
                    delta = snap["value"] - s.value
                    if delta > 0:  # the registry's counters never go down
                        s.child.inc(delta)
                        s.value = snap["value"]
                elif kind == "gauge":
                    if snap["value"] != s.value:
                        s.child.set(snap["value"])
                        s.value = snap["value"]
                else:
                    counts = snap["bucket_counts"]
                    if counts == s.buckets:
                        continue
                    values = s.child._buckets  # noqa: SLF001 - see the module docstring
                    for i, (now, before) in enumerate(zip(counts, s.buckets)):
                        if now > before:
                            values[i].inc(now - before)
                    s.child._sum.inc(snap["sum"] - s.sum)  # noqa: SLF001
                    s.buckets = list(counts)
                    s.sum = snap["sum"]
        self.syncs += 1

    def exposition(self) -> bytes:
        """This exporter's metrics in the Prometheus text format."""
        return prometheus_client.generate_latest(self.collector_registry)

    def serve(self, host: str, port: int) -> int | None:
        """Serves ``/metrics`` on host:port (0: an ephemeral port) from a daemon
        thread; returns the bound port, or None (logged once, counted in
        ``serve_errors``) when the port cannot be bound. ``host`` must be a
        numeric address or localhost (ValueError otherwise): getaddrinfo reads
        "0" as 0.0.0.0 and "127.1" as 127.0.0.1, so a typo could bind every
        interface; the address bound is the canonical one."""
        from meridian._meridian import canonical_listen_host, listen_host_problem

        problem = listen_host_problem(host) if isinstance(host, str) else f"must be a string; got {host!r}"
        if problem:
            raise ValueError(f"telemetry.prometheus_host {problem}")
        host = canonical_listen_host(host)
        try:
            self._server = _Server.attach(self, host, port)
        except OSError as e:
            self.serve_errors += 1
            if self.serve_errors == 1:
                logger.error(
                    "meridian: cannot serve Prometheus metrics on %s:%d (%s); the engine keeps running without "
                    "Meridian's /metrics port: set [telemetry] prometheus_port to a free port, or "
                    "prometheus_enabled = false and use vLLM's /metrics with PROMETHEUS_MULTIPROC_DIR "
                    "(docs/operations.md)", host, port, e)
            return None
        logger.info("meridian: serving Prometheus metrics on http://%s:%d/metrics", host, self._server.port)
        return self._server.port

    def close(self) -> None:
        """Stops serving (the port closes when no other exporter of this process uses it)."""
        server, self._server = self._server, None
        if server is not None:
            server.detach(self)


class _Server:
    """One prometheus_client HTTP server per (host, port) in this process,
    serving whichever exporter attached last."""

    _lock = threading.Lock()
    _servers: dict[tuple[str, int], _Server] = {}

    def __init__(self, host: str, port: int) -> None:
        self.exporter: weakref.ref[PrometheusExporter] | None = None
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self.httpd, self.thread = prometheus_client.start_http_server(port, addr=host, registry=registry)
        self.key = (host, port)
        self.port = int(self.httpd.server_address[1])

    @classmethod
    def attach(cls, exporter: PrometheusExporter, host: str, port: int) -> _Server:
        with cls._lock:
            server = cls._servers.get((host, port)) if port else None
            if server is None:
                server = cls(host, port)
                if port:
                    cls._servers[(host, port)] = server
            server.exporter = weakref.ref(exporter)
            return server

    def detach(self, exporter: PrometheusExporter) -> None:
        with _Server._lock:
            if self.exporter is None or self.exporter() not in (exporter, None):
                return  # another exporter took the port over
            self.exporter = None
            _Server._servers.pop(self.key, None)
        self.httpd.shutdown()
        self.httpd.server_close()

    def describe(self) -> list:
        return []

    def collect(self):  # noqa: ANN201 - prometheus_client's collector protocol
        exporter = self.exporter() if self.exporter is not None else None
        if exporter is not None:
            yield from exporter.collector_registry.collect()


__all__ = ["PrometheusExporter"]
