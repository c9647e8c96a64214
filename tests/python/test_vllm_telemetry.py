"""meridian.vllm.Scheduler's metrics, on the real vLLM scheduler stepped by hand
(vllm_rig.py, no model): the registry the adapter records into, its
Prometheus port, the fail-safe and preemption counters, and a port in use."""
from __future__ import annotations

import socket
import urllib.request

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import END_THINK, EOS, THINK, WORD, build, prompt, request, script, step  # noqa: E402

from meridian.vllm import Scheduler  # noqa: E402


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    vllm_rig.isolate_config(tmp_path, monkeypatch)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)


def configure(tmp_path, monkeypatch, telemetry: str) -> None:
    path = tmp_path / "meridian-test.toml"
    path.write_text("[telemetry]\n" + telemetry)
    monkeypatch.setenv("MERIDIAN_CONFIG", str(path))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_to_completion(sched: Scheduler, tokens: dict[str, list[int]], steps: int = 40) -> None:
    for i, rid in enumerate(tokens):
        sched.add_request(request(rid, prompt(20, i)))
    choose = script(tokens)
    for _ in range(steps):
        if not sched.requests:
            break
        step(sched, choose)
    assert not sched.requests


def test_requests_phases_and_steps_are_counted(tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch, "prometheus_enabled = false\n")
    sched = build(Scheduler)
    m = sched.meridian
    assert m.telemetry.exporter is None and m.telemetry.port is None
    think, answer, chat = 6, 4, 5
    tokens = {"r0": [THINK] + [WORD] * think + [END_THINK] + [WORD] * answer + [EOS],
              "r1": [THINK] + [WORD] * think + [END_THINK] + [WORD] * answer + [EOS],
              "c0": [WORD] * chat + [EOS]}
    run_to_completion(sched, tokens)
    m.telemetry.maybe_sync(m, sched, force=True)
    reg = m.telemetry.registry
    assert reg.value("meridian_phase_transitions_total", ("enter_think",)) == 2
    assert reg.value("meridian_phase_transitions_total", ("exit_think",)) == 2
    assert reg.value("meridian_think_tokens_per_request") == 2
    for name in ("ttft", "ttfv", "e2e"):
        assert reg.value(f"meridian_request_{name}_seconds") == 3, name
    assert reg.value("meridian_request_ttot_seconds") == 2  # the chat request never thought
    # Visible tokens: the answer and EOS (reasoning), every token (chat); one gap less each.
    assert reg.value("meridian_output_itl_seconds") == 2 * answer + chat
    assert sum(reg.value("meridian_slo_requests_total", (o,)) for o in ("met", "missed")) == 3
    assert reg.value("meridian_scheduler_steps_total") == m.core.counters.steps > 0
    assert reg.value("meridian_schedule_batch_duration_seconds") == m.core.counters.steps
    assert reg.value("meridian_schedule_batch_duration_ns") == m.core.counters.steps
    assert reg.value("meridian_phase_router_tracked_requests") == 0
    assert reg.value("meridian_requests_completed_total", ("eos",)) + reg.value(
        "meridian_requests_completed_total", ("ended",)) == 3
    assert reg.value("meridian_failsafe_fallbacks_total", ("scheduler",)) == 0
    assert reg.misuse_count() == 0


def test_an_aborted_request_misses_its_slo_and_has_no_e2e(tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch, "prometheus_enabled = false\n")
    sched = build(Scheduler)
    sched.add_request(request("a", prompt(20)))
    choose = script({"a": [THINK] + [WORD] * 30})
    for _ in range(4):
        step(sched, choose)
    sched.finish_requests(["a"], vllm_rig.RequestStatus.FINISHED_ABORTED)
    reg = sched.meridian.telemetry.registry
    assert reg.value("meridian_slo_requests_total", ("missed",)) == 1
    assert reg.value("meridian_slo_requests_total", ("met",)) == 0
    assert reg.value("meridian_request_e2e_seconds") == 0
    assert reg.value("meridian_request_ttft_seconds") == 1


def test_preemptions_are_counted_by_phase(tmp_path, monkeypatch):
    from test_vllm_scheduler import run_pressure  # KV for ~2 of 12 requests: vLLM preempts

    configure(tmp_path, monkeypatch, "prometheus_enabled = false\n")
    sched, victims = run_pressure(Scheduler)
    stats = sched.meridian_stats()
    reg = sched.meridian.telemetry.registry
    assert victims and stats["preempted_think"] >= 1
    assert reg.value("meridian_preemptions_total", ("think", "recompute")) == stats["preempted_think"]
    assert reg.value("meridian_preemptions_total", ("output", "recompute")) == stats["preempted_answer"]
    assert reg.value("meridian_preemptions_total", ("think", "swap")) == 0


def test_fallbacks_are_counted(tmp_path, monkeypatch):
    configure(tmp_path, monkeypatch, "prometheus_enabled = false\n")
    sched = build(Scheduler)
    for i in range(3):
        sched.add_request(request(f"r{i}", prompt(30, i)))
    choose = script({f"r{i}": [THINK] + [WORD] * 20 for i in range(3)})

    def boom(*_a, **_k):
        raise RuntimeError("injected")

    monkeypatch.setattr(type(sched.meridian), "before_schedule", boom)
    for _ in range(3):
        step(sched, choose)
    reg = sched.meridian.telemetry.registry
    assert reg.value("meridian_failsafe_fallbacks_total", ("scheduler",)) == 3 == sched.meridian_stats()["fallbacks"]
    assert reg.value("meridian_failsafe_fallbacks_total", ("logits_processor",)) == 0


def test_serves_its_port_and_survives_a_port_in_use(tmp_path, monkeypatch):
    port = free_port()
    configure(tmp_path, monkeypatch, f"prometheus_host = \"127.0.0.1\"\nprometheus_port = {port}\n")
    sched = build(Scheduler)
    try:
        assert sched.meridian_stats()["metrics_port"] == port
        run_to_completion(sched, {"c": [WORD] * 3 + [EOS]})  # idle at the end: exported at once
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        steps = sched.meridian.core.counters.steps
        assert steps > 0 and f"meridian_scheduler_steps_total {float(steps)}" in text
        assert "meridian_request_e2e_seconds_count 1.0" in text
    finally:
        sched.shutdown()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        configure(tmp_path, monkeypatch, f"prometheus_port = {taken.getsockname()[1]}\n")
        other = build(Scheduler)  # the engine starts; Meridian's port is logged and left out
        assert other.meridian_stats()["metrics_port"] is None
        assert other.meridian.telemetry.exporter.serve_errors == 1
        run_to_completion(other, {"c": [WORD] * 3 + [EOS]})


def test_otlp_gets_the_steps_spans_and_the_metrics(tmp_path, monkeypatch):
    from otlp_receiver import OtlpReceiver, attributes

    with OtlpReceiver() as rx:
        configure(tmp_path, monkeypatch,
                  f"prometheus_enabled = false\notlp_enabled = true\notlp_endpoint = \"{rx.endpoint}\"\n")
        sched = build(Scheduler)
        assert sched.meridian.telemetry.otlp is not None
        run_to_completion(sched, {"r": [THINK] + [WORD] * 3 + [END_THINK] + [WORD] * 2 + [EOS]})
        steps = sched.meridian.core.counters.steps
        sched.shutdown()  # flushes the spans and exports the metrics once more
        rx.wait_for(lambda: "meridian_request_e2e_seconds" in rx.metric_names())
        rx.wait_for(lambda: rx.spans())
        spans = [s for s in rx.spans() if s.name == "meridian.schedule_batch"]
        assert len(spans) >= steps - 1
        kinds = [attributes(e.attributes).get("meridian.event.kind") for s in spans for e in s.events
                 if e.name == "meridian.phase_event"]
        assert kinds.count("enter_think") == 1 and kinds.count("exit_think") == 1
        e2e = rx.metrics()["meridian_request_e2e_seconds"]
        assert sum(p.count for p in e2e.histogram.data_points) == 1


def test_logits_processor_forces_and_fallbacks_reach_the_engines_registry(tmp_path, monkeypatch):
    """ForceThinkEnd in the scheduler's process records into the newest engine's registry."""
    import test_vllm_logits_processor as lp

    configure(tmp_path, monkeypatch, "prometheus_enabled = false\n")
    sched = build(Scheduler)  # the newest engine of this process
    reg = sched.meridian.telemetry.registry
    (tmp_path / "cap.toml").write_text(lp.CAP4)
    monkeypatch.setenv("MERIDIAN_CONFIG", str(tmp_path / "cap.toml"))
    proc = lp.v1(lp.vllm_config.__wrapped__())
    run = lp.V1Runner(proc)
    out = run.add(0, lp.params())
    for _ in range(6):
        run.step()
    assert END_THINK in out  # forced at the cap of 4
    sched.meridian.telemetry.maybe_sync(sched.meridian, sched, force=True)
    assert reg.value("meridian_budget_force_reason_total", ("hard_cap",)) == 1
    assert reg.value("meridian_budget_force_triggered_total") == 1  # one series: every reason
    assert reg.value("meridian_budget_forced_exits_total") == 1

    class BrokenProbe:
        def compute_batch(self, *args, **kwargs):
            raise RuntimeError("probe kernel failed")

        def release(self, req_id: int) -> bool:
            return False

    run.add(1, lp.params())
    proc._core.probe = BrokenProbe()
    run.step()
    run.step()
    assert proc.counters.fallbacks == 2
    assert reg.value("meridian_failsafe_fallbacks_total", ("logits_processor",)) == 2  # pushed at once
