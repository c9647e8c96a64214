"""meridian.telemetry.prometheus with the real C++ MetricRegistry and the real
prometheus_client: every catalog metric exposed with its type, help and
labels; sync() copies values by deltas (twice, so double counting shows);
histogram buckets as Prometheus expects them (cumulative, +Inf = count); the
HTTP server; a port in use; and prometheus_client's multiprocess mode (the
way these objects reach vLLM's own /metrics)."""
from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import sys
import textwrap
import urllib.request

import pytest

pytest.importorskip("prometheus_client", reason="installed with vLLM (make setup)")

import meridian  # noqa: E402
from meridian.telemetry.prometheus import PrometheusExporter, _check_histogram_internals  # noqa: E402
from prometheus_client import Counter, Histogram  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for f in text_string_to_metric_families(text):
        for s in f.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def fill(reg: meridian.MetricRegistry, scale: int) -> None:
    """Touches one series of every kind, `scale` times."""
    for _ in range(scale):
        reg.add("meridian_scheduler_steps_total", 1)
        reg.add("meridian_phase_transitions_total", 2, ("exit_think",))
        reg.add("meridian_preemptions_total", 1, ("think", "swap"))
        reg.observe("meridian_think_tokens_per_request", 100)  # bucket le=128
        reg.observe("meridian_think_tokens_per_request", 1e6)  # +Inf
        reg.observe("meridian_scheduler_batch_size", 3, ("output",))
    reg.set("meridian_queue_depth", 7 * scale, ("think",))
    reg.set("meridian_block_manager_used_bytes", 4096.0 * scale)


def test_every_catalog_metric_is_exposed_with_type_help_and_labels():
    exporter = PrometheusExporter(meridian.MetricRegistry())
    exporter.sync()
    got = families(exporter.exposition().decode())
    catalog = meridian.metric_catalog()
    assert len(catalog) >= 40
    for spec in catalog:
        name = spec["name"][: -len("_total")] if spec["type"] == "counter" else spec["name"]
        fam = got[name]
        assert fam.type == spec["type"], name
        assert fam.documentation == spec["help"], name
        label_sets = {frozenset((k, v) for k, v in s.labels.items() if k != "le")
                      for s in fam.samples if not s.name.endswith("_created")}
        expected = {frozenset(zip([n for n, _ in spec["labels"]], values))
                    for values in itertools.product(*(v for _, v in spec["labels"]))}
        assert label_sets == expected, name
        if spec["type"] == "histogram":
            les = [s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")]
            per_series = len(expected)
            assert les[: len(spec["buckets"]) + 1] == [*(prometheus_float(b) for b in spec["buckets"]), "+Inf"], name
            assert len(les) == per_series * (len(spec["buckets"]) + 1), name


def prometheus_float(x: float) -> str:
    from prometheus_client.utils import floatToGoString

    return floatToGoString(x)


def test_sync_copies_values_by_deltas():
    reg = meridian.MetricRegistry()
    exporter = PrometheusExporter(reg)
    for scale, total in ((1, 1), (2, 3)):  # the second sync adds only what is new
        fill(reg, scale)
        exporter.sync()
        s = samples(exporter.exposition().decode())
        assert s[("meridian_scheduler_steps_total", ())] == total
        assert s[("meridian_phase_transitions_total", (("kind", "exit_think"),))] == 2 * total
        assert s[("meridian_phase_transitions_total", (("kind", "enter_think"),))] == 0
        assert s[("meridian_preemptions_total", (("mode", "swap"), ("phase", "think")))] == total
        assert s[("meridian_preemptions_total", (("mode", "swap"), ("phase", "output")))] == 0
        assert s[("meridian_queue_depth", (("queue", "think"),))] == 7 * scale  # a gauge: as it is
        assert s[("meridian_block_manager_used_bytes", ())] == 4096 * scale
        h = "meridian_think_tokens_per_request"
        assert s[(h + "_bucket", (("le", "64.0"),))] == 0
        assert s[(h + "_bucket", (("le", "128.0"),))] == total  # cumulative from here on
        assert s[(h + "_bucket", (("le", "32768.0"),))] == total
        assert s[(h + "_bucket", (("le", "+Inf"),))] == 2 * total
        assert s[(h + "_count", ())] == 2 * total == reg.value(h)
        assert s[(h + "_sum", ())] == pytest.approx(total * (100 + 1e6))
        assert s[("meridian_scheduler_batch_size_count", (("phase", "output"),))] == total
        assert s[("meridian_scheduler_batch_size_bucket", (("le", "2.0"), ("phase", "output")))] == 0
        assert s[("meridian_scheduler_batch_size_bucket", (("le", "4.0"), ("phase", "output")))] == total
    assert reg.misuse_count() == 0
    assert exporter.syncs == 2


def test_histogram_internals_guard_fails_on_objects_without_them():
    from prometheus_client import CollectorRegistry

    r = CollectorRegistry()
    _check_histogram_internals(Histogram("h_ok", "h", buckets=[1, 2, float("inf")], registry=r), 3)
    with pytest.raises(RuntimeError, match="meridian.telemetry.prometheus needs updating"):
        _check_histogram_internals(Counter("c_not_a_histogram", "c", registry=r), 3)
    with pytest.raises(RuntimeError, match="_buckets"):
        _check_histogram_internals(Histogram("h_other", "h", buckets=[1, float("inf")], registry=r), 3)


def test_serves_metrics_over_http_and_reports_a_port_in_use(caplog):
    reg = meridian.MetricRegistry()
    exporter = PrometheusExporter(reg)
    port = exporter.serve("127.0.0.1", 0)
    try:
        assert port and port > 0
        reg.add("meridian_scheduler_steps_total", 5)
        exporter.sync()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert samples(body)[("meridian_scheduler_steps_total", ())] == 5
        # Someone else holds a port: no exception, one clear log line, counted.
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            busy = taken.getsockname()[1]
            other = PrometheusExporter(reg)
            with caplog.at_level(logging.ERROR, logger="meridian.telemetry.prometheus"):
                assert other.serve("127.0.0.1", busy) is None
                assert other.serve("127.0.0.1", busy) is None
            assert other.serve_errors == 2
            errors = [r for r in caplog.records if "cannot serve Prometheus metrics" in r.getMessage()]
            assert len(errors) == 1 and f"127.0.0.1:{busy}" in errors[0].getMessage()
    finally:
        exporter.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_a_later_exporter_takes_the_port_over():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    first_reg, second_reg = meridian.MetricRegistry(), meridian.MetricRegistry()
    first, second = PrometheusExporter(first_reg), PrometheusExporter(second_reg)
    assert first.serve("127.0.0.1", port) == port
    try:
        assert second.serve("127.0.0.1", port) == port  # same process, same port: shared
        second_reg.add("meridian_scheduler_steps_total", 3)
        second.sync()
        first.close()  # no longer the one served: the port stays open
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert samples(body)[("meridian_scheduler_steps_total", ())] == 3
    finally:
        second.close()


def test_multiprocess_mode_reaches_a_multiprocess_collector(tmp_path):
    """What vLLM's /metrics does with PROMETHEUS_MULTIPROC_DIR: a MultiProcessCollector
    over the directory sees the exporter's series, written by another process."""
    child = textwrap.dedent("""
        import meridian
        from meridian.telemetry.prometheus import PrometheusExporter
        reg = meridian.MetricRegistry()
        exporter = PrometheusExporter(reg)
        reg.add("meridian_scheduler_steps_total", 4)
        reg.set("meridian_queue_depth", 2, ("output",))
        reg.observe("meridian_request_ttft_seconds", 0.2)
        exporter.sync()
        reg.add("meridian_scheduler_steps_total", 1)
        exporter.sync()
    """)
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert any(p.name.startswith("counter_") for p in tmp_path.iterdir())
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    reader = CollectorRegistry()
    multiprocess.MultiProcessCollector(reader, path=str(tmp_path))
    s = samples(generate_latest(reader).decode())
    assert s[("meridian_scheduler_steps_total", ())] == 5
    assert s[("meridian_queue_depth", (("queue", "output"),))] == 2
    assert s[("meridian_request_ttft_seconds_bucket", (("le", "0.25"),))] == 1
    assert s[("meridian_request_ttft_seconds_count", ())] == 1


def test_the_metrics_host_is_an_address_not_whatever_getaddrinfo_reads():
    """Issue 27: getaddrinfo reads "0" as 0.0.0.0 (every interface) and "127.1" as 127.0.0.1."""
    from meridian.telemetry.prometheus import PrometheusExporter

    exporter = PrometheusExporter(meridian.MetricRegistry())
    for bad in ("0", "127.1", "256.0.0.0", "example.com"):
        with pytest.raises(ValueError, match=f'telemetry.prometheus_host must be an IPv4 address .*got "{bad}"'):
            exporter.serve(bad, 0)
    port = exporter.serve("localhost", 0)
    try:
        assert port
    finally:
        exporter.close()


def test_a_disguised_wildcard_is_refused_and_a_mapped_address_binds_its_ipv4(caplog):
    """Issue 48: "::ffff:0.0.0.0" passed, bound every IPv4 interface and was logged as itself."""
    import logging
    import urllib.request

    from meridian.telemetry.prometheus import PrometheusExporter

    exporter = PrometheusExporter(meridian.MetricRegistry())
    for disguised in ("::ffff:0.0.0.0", "0:0:0:0:0:0:0:0", "[::ffff:0.0.0.0]"):
        with pytest.raises(ValueError, match="spells the address of every interface as"):
            exporter.serve(disguised, 0)
    with caplog.at_level(logging.INFO, logger="meridian"):
        port = exporter.serve("::ffff:127.0.0.1", 0)
    try:
        assert port
        assert f"http://127.0.0.1:{port}/metrics" in caplog.text  # the address bound, as bound
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.status == 200
    finally:
        exporter.close()
    cfg = meridian.parse_config('[telemetry]\nprometheus_host = "0.0.0.0"\n')
    assert cfg.telemetry.prometheus_host == "0.0.0.0"  # every interface, asked for in so many words
    with pytest.raises(ValueError, match=r"telemetry\.prometheus_host spells the address of every interface"):
        meridian.parse_config('[telemetry]\nprometheus_host = "::ffff:0.0.0.0"\n')
