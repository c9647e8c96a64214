"""OTLP/HTTP export (meridian.telemetry.otlp) against a real receiver.

The real router, scheduler, block manager and metric registry run a few
engine steps; OtlpTelemetry exports through the OpenTelemetry SDK to
otlp_receiver.OtlpReceiver on loopback, which decodes the payloads with the
official opentelemetry-proto messages. The assertions are on those decoded
protobufs, compared with the catalog and the registry's own snapshot.
"""
import logging
import socket
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra (pip install 'meridian[otel]')")

import meridian  # noqa: E402
from meridian import (  # noqa: E402
    DualQueueScheduler,
    KvBlockManager,
    KvBlockManagerOptions,
    Phase,
    PhaseEventKind,
    ReleaseKind,
    SchedulerOptions,
    StepCostModel,
    StepLimits,
    WorkKind,
)
from meridian.telemetry.otlp import EVENT_NAME, SPAN_NAME, OtlpTelemetry  # noqa: E402
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality  # noqa: E402
from otlp_receiver import OtlpReceiver, attributes, otlp_receiver  # noqa: E402,F401 - the fixture

THINK, END_THINK, IM_END = 151667, 151668, 151645  # Qwen3 ids
WORD = 785
SERVICE = "meridian-otlp-test"

# Token scripts per request: 1 thinks and answers; 2 thinks past the hard cap
# (max_think_tokens = 4) until the forced </think> lands; 3 answers without
# thinking (thinking disabled).
SCRIPTS = {
    1: [THINK, WORD, WORD, END_THINK, WORD, IM_END],
    2: [THINK] + [WORD] * 6 + [END_THINK, WORD, IM_END],
    3: [WORD, WORD, IM_END],
}


def config_text(endpoint: str) -> str:
    return (
        "[scheduler]\nmin_think_tokens = 2\nmax_think_tokens = 4\n"
        f'[telemetry]\notlp_enabled = true\notlp_endpoint = "{endpoint}"\nservice_name = "{SERVICE}"\n'
    )


def run_engine(cfg, otlp, registry):
    """Drive the real components through every script to completion, the way
    an engine adapter does; returns the phase events of each step by step."""
    router = meridian.PhaseRouter(cfg, "qwen3")
    num_blocks = 256
    kv = KvBlockManager(KvBlockManagerOptions.from_config(cfg, num_blocks * cfg.kv_memory.block_size_bytes))
    sched = DualQueueScheduler(SchedulerOptions.from_config(cfg, num_blocks), StepCostModel.from_config(cfg.scheduler))
    metrics = meridian.EngineMetrics(registry)
    position = dict.fromkeys(SCRIPTS, 0)
    for rid in SCRIPTS:
        router.begin(rid, thinking_disabled=(rid == 3))
        sched.add(rid, prompt_tokens=24, phase=router.snapshot(rid).phase)
    events_by_step = {}
    now_ns = 0
    for _ in range(50):
        if not len(sched):
            break
        start_ns = time.time_ns()
        driver = meridian.StepDriver(sched, kv)
        plan = driver.plan(StepLimits(), now_ns)
        schedule_s = (time.time_ns() - start_ns) / 1e9
        emitting = [w.request_id for w in plan.work if w.kind == WorkKind.DECODE or w.completes_prefill]
        tokens = [SCRIPTS[rid][position[rid]] for rid in emitting]
        for rid in emitting:
            position[rid] += 1
        events = router.on_tokens(emitting, tokens)
        done = []
        for ev in events:
            metrics.record_event(ev)
            if ev.kind == PhaseEventKind.EXIT_THINK:
                sched.set_phase(ev.request_id, Phase.OUTPUT_DECODE)
                kv.demote_think_blocks(ev.request_id)
            elif ev.kind == PhaseEventKind.COMPLETE:
                done.append(ev.request_id)
        now_ns += int(plan.stats.predicted_step_ms * 1e6)
        driver.complete(plan.stats.predicted_step_ms, now_ns)
        for rid in done:
            sched.finish(rid)
            kv.release(rid, ReleaseKind.FINISHED)
            metrics.record_request(ttft_s=0.05, ttfv_s=0.2, ttot_s=0.02, e2e_s=0.5, completed=True, slo_met=True)
        metrics.record_step(plan.stats, schedule_s)
        metrics.record_output_itl(0.02)
        metrics.sync_router(router)
        metrics.sync_scheduler(sched)
        metrics.sync_kv(kv)
        otlp.on_step(plan.step, plan.stats, events, start_ns, time.time_ns())
        events_by_step[plan.step] = (plan.stats, [(e.kind, e.request_id, e.forced, e.think_tokens) for e in events])
    assert not len(sched), "the scripts did not finish within 50 steps"
    assert registry.misuse_count() == 0
    return events_by_step


@pytest.fixture
def exported(otlp_receiver):  # noqa: F811 - the fixture imported above
    """A finished run exported once (shutdown flushes): (receiver, registry, steps)."""
    cfg = meridian.parse_config(config_text(otlp_receiver.endpoint))
    registry = meridian.MetricRegistry()
    otlp = OtlpTelemetry.from_config(cfg, registry, export_interval_s=3600)  # only shutdown exports
    assert otlp is not None
    steps = run_engine(cfg, otlp, registry)
    otlp.shutdown()
    assert otlp.metric_export_failures == 0 and otlp.span_export_failures == 0
    assert otlp.metric_exports == 1 and otlp.span_exports >= 1
    return otlp_receiver, registry, steps


def points(metric):
    return getattr(metric, metric.WhichOneof("data")).data_points


def test_every_catalog_metric_with_its_otlp_type_labels_and_values(exported):
    receiver, registry, _ = exported
    assert len(receiver.metric_requests()) == 1
    (request,) = receiver.metric_requests()
    (resource_metrics,) = request.resource_metrics
    assert attributes(resource_metrics.resource.attributes)["service.name"] == SERVICE
    assert resource_metrics.scope_metrics[0].scope.name == "meridian"

    got = receiver.metrics()
    catalog = meridian.metric_catalog()
    assert set(got) == {entry["name"] for entry in catalog}
    snapshot = {family["name"]: family for family in registry.snapshot()}
    for entry in catalog:
        metric = got[entry["name"]]
        assert metric.description == entry["help"]
        ucum = {"seconds": "s", "nanoseconds": "ns", "bytes": "By"}
        assert metric.unit == ucum.get(entry["unit"], "{" + entry["unit"] + "}")
        kind = metric.WhichOneof("data")
        if entry["type"] == "counter":
            assert kind == "sum", entry["name"]
            assert metric.sum.is_monotonic
            assert metric.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
        elif entry["type"] == "gauge":
            assert kind == "gauge", entry["name"]
        else:
            assert entry["type"] == "histogram" and kind == "histogram", entry["name"]
            assert metric.histogram.aggregation_temporality == (
                AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
            )

        # Every series of the registry, attributes = the catalog's labels.
        label_sets = {name: set(values) for name, values in entry["labels"]}
        exported_series = {}
        for point in points(metric):
            attrs = attributes(point.attributes)
            assert set(attrs) == set(label_sets), entry["name"]
            assert all(attrs[name] in label_sets[name] for name in attrs), (entry["name"], attrs)
            exported_series[tuple(sorted(attrs.items()))] = point
        series = snapshot[entry["name"]]["series"]
        assert len(exported_series) == len(series) == len(points(metric)), entry["name"]
        for s in series:
            point = exported_series[tuple(sorted(s["labels"].items()))]
            if entry["type"] == "histogram":
                assert list(point.explicit_bounds) == pytest.approx(entry["buckets"])
                assert list(point.bucket_counts) == list(s["bucket_counts"])
                assert point.count == s["count"] and point.sum == pytest.approx(s["sum"])
                assert sum(point.bucket_counts) == point.count
                assert not point.HasField("min")  # the registry keeps none: left out, not 0
            else:
                assert point.as_double == s["value"], (entry["name"], s["labels"])
            if entry["type"] != "gauge":
                assert 0 < point.start_time_unix_nano < point.time_unix_nano


def test_counters_and_histograms_moved_with_the_run(exported):
    # Guards the comparison above against a run (or an export) of zeros.
    receiver, _, steps = exported
    got = receiver.metrics()

    def value(name, **labels):
        (point,) = [p for p in points(got[name]) if attributes(p.attributes) == labels]
        return point.count if got[name].WhichOneof("data") == "histogram" else point.as_double

    assert value("meridian_scheduler_steps_total") == len(steps)
    assert value("meridian_phase_transitions_total", kind="enter_think") == 2
    assert value("meridian_phase_transitions_total", kind="exit_think") == 2
    assert value("meridian_budget_force_reason_total", reason="hard_cap") == 1
    assert value("meridian_budget_force_triggered_total") == 1
    assert value("meridian_think_tokens_per_request") == 2
    assert value("meridian_requests_completed_total", how="eos") == 3
    assert value("meridian_request_e2e_seconds") == 3


def test_one_span_per_step_with_its_phase_events(exported):
    receiver, _, steps = exported
    for request in receiver.trace_requests():
        for resource_spans in request.resource_spans:
            assert attributes(resource_spans.resource.attributes)["service.name"] == SERVICE
    spans = receiver.spans()
    assert [s.name for s in spans] == [SPAN_NAME] * len(steps)
    by_step = {attributes(s.attributes)["meridian.step"]: s for s in spans}
    assert set(by_step) == set(steps)
    kinds_seen = set()
    for step, (stats, events) in steps.items():
        span = by_step[step]
        attrs = attributes(span.attributes)
        assert attrs["meridian.queue.output"] == stats.output_queue_depth
        assert attrs["meridian.queue.think"] == stats.think_queue_depth
        assert attrs["meridian.batch.output"] == stats.output_batch
        assert attrs["meridian.batch.think"] == stats.think_batch
        assert attrs["meridian.batch.prefill"] == stats.prefill_requests
        assert attrs["meridian.predicted_step_ms"] == pytest.approx(stats.predicted_step_ms)
        assert span.start_time_unix_nano <= span.end_time_unix_nano
        assert [e.name for e in span.events] == [EVENT_NAME] * len(events)
        for event, (kind, request_id, forced, think_tokens) in zip(span.events, events):
            ev = attributes(event.attributes)
            assert ev["meridian.event.kind"] == kind.name.lower()
            assert ev["meridian.request_id"] == request_id
            assert ev["meridian.forced"] == forced
            assert ev["meridian.think_tokens"] == think_tokens
            if kind == PhaseEventKind.FORCE_BUDGET or forced:
                assert ev["meridian.reason"] == "hard_cap"
            kinds_seen.add(ev["meridian.event.kind"])
    assert kinds_seen == {"enter_think", "exit_think", "force_budget", "complete"}
    forced_exits = [
        attributes(e.attributes)
        for s in spans
        for e in s.events
        if attributes(e.attributes)["meridian.event.kind"] == "exit_think" and attributes(e.attributes)["meridian.forced"]
    ]
    assert [(e["meridian.request_id"], e["meridian.reason"]) for e in forced_exits] == [(2, "hard_cap")]


def test_periodic_export_and_gzip(otlp_receiver):  # noqa: F811
    cfg = meridian.parse_config(config_text(otlp_receiver.endpoint))
    registry = meridian.MetricRegistry()
    with OtlpTelemetry(cfg, registry, export_interval_s=0.1, compression="gzip") as otlp:
        registry.add("meridian_scheduler_steps_total", 5)
        # Counted once the response is back (the receiver stores the request before replying).
        otlp_receiver.wait_for(lambda: otlp.metric_exports >= 2)
        assert len(otlp_receiver.metric_requests()) >= 2
    posts = [headers for path, headers in otlp_receiver.requests if path == "/v1/metrics"]
    assert posts and all(h.get("content-encoding") == "gzip" for h in posts)
    steps = otlp_receiver.metrics()["meridian_scheduler_steps_total"]
    assert points(steps)[0].as_double == 5


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_receiver_down_is_counted_not_raised(caplog):
    # Another module in this worker may have set the meridian logger's level from its
    # configuration ([logging] level = "error" in the engine replay's); this test reads warnings.
    caplog.set_level(logging.WARNING, logger="meridian")
    cfg = meridian.parse_config(config_text(f"http://127.0.0.1:{unused_port()}"))
    registry = meridian.MetricRegistry()
    otlp = OtlpTelemetry(cfg, registry, export_interval_s=3600, export_timeout_s=0.5)
    assert otlp.export_metrics() is False
    assert otlp.export_metrics() is False
    otlp.on_step(1, {"output_queue_depth": 1}, [])
    assert otlp.force_flush(timeout_s=5) is False
    otlp.shutdown()  # one more metric export, fails quietly
    otlp.shutdown()  # idempotent
    # Two explicit exports, force_flush's and shutdown's; the spans' one batch.
    assert otlp.metric_exports == 0 and otlp.metric_export_failures == 4
    assert otlp.span_exports == 0 and otlp.span_export_failures == 1
    ours = [r for r in caplog.records if r.name == "meridian.telemetry.otlp" and r.levelname == "WARNING"]
    assert len(ours) == 2  # once per signal, not once per failure
    otlp.on_step(2)  # after shutdown: ignored, no error


def test_receiver_error_status_is_counted():
    with OtlpReceiver(fail_with=400) as receiver:
        cfg = meridian.parse_config(config_text(receiver.endpoint))
        otlp = OtlpTelemetry(cfg, meridian.MetricRegistry(), export_interval_s=3600, export_timeout_s=2)
        assert otlp.export_metrics() is False
        otlp.shutdown()
        assert otlp.metric_export_failures == 2
        assert [path for path, _ in receiver.requests] == ["/v1/metrics", "/v1/metrics"]


@pytest.mark.parametrize(
    "endpoint",
    ["localhost:4318", "ftp://collector:4318", "http://", "http://collector:99999", "http://c:4318/?x=1", " ", "http://c:4318/v1/traces"],
)
def test_bad_endpoint_is_a_value_error(endpoint):
    cfg = meridian.parse_config("")
    cfg.telemetry.otlp_endpoint = endpoint  # past the TOML validation, as code may set it
    with pytest.raises(ValueError, match=r"telemetry\.otlp_endpoint"):
        OtlpTelemetry(cfg, meridian.MetricRegistry(), start=False)


def test_endpoint_with_a_path_and_disabled_config():
    cfg = meridian.parse_config('[telemetry]\notlp_endpoint = "https://collector.example:4318/otlp/"\n')
    assert OtlpTelemetry.from_config(cfg, None) is None  # otlp_enabled defaults to false
    otlp = OtlpTelemetry(cfg.telemetry, None, start=False)
    assert otlp.metrics_url == "https://collector.example:4318/otlp/v1/metrics"
    assert otlp.traces_url == "https://collector.example:4318/otlp/v1/traces"
    assert otlp.export_metrics() is False  # no registry: spans only
    otlp.shutdown()


def test_receiver_answers_like_a_collector(otlp_receiver):  # noqa: F811
    def post(path, body=b"", content_type="application/x-protobuf"):
        req = urllib.request.Request(otlp_receiver.endpoint + path, data=body, headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status
        except urllib.error.HTTPError as err:
            return err.code

    assert post("/v1/metrics") == 200  # an empty request is a valid (empty) protobuf
    assert post("/v1/logs") == 404
    assert post("/v1/traces", b"{}", "application/json") == 415
    assert post("/v1/traces", b"\xff\xff\xff") == 400
    assert len(otlp_receiver.metric_requests()) == 1 and not otlp_receiver.trace_requests()
