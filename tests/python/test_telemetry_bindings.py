"""The metric catalog, MetricRegistry and EngineMetrics through Python: what
the vLLM plugin's exporters read and fill. Names and label values are strings;
anything not in the catalog is a ValueError naming it."""
import math
import threading

import pytest

import meridian
from meridian import EngineMetrics, MetricRegistry, metric_catalog

THINK, END_THINK, IM_END = 151667, 151668, 151645
WORD = 785


def series(registry, name):
    (family,) = [f for f in registry.snapshot() if f["name"] == name]
    return family


def test_catalog_lists_every_metric_with_its_shape():
    catalog = metric_catalog()
    names = [m["name"] for m in catalog]
    assert len(names) == len(set(names)) >= 40
    for m in catalog:
        assert m["name"].startswith("meridian_") and "vllm" not in m["name"]
        assert m["type"] in ("counter", "gauge", "histogram")
        assert (m["type"] == "counter") == m["name"].endswith("_total")
        assert (m["type"] == "histogram") == bool(m["buckets"])
        assert m["buckets"] == sorted(m["buckets"])
        assert m["help"] and m["source"] and m["action"] and m["unit"]
        for label, values in m["labels"]:
            assert label and values and all(isinstance(v, str) for v in values)
    preemptions = {m["name"]: m for m in catalog}["meridian_preemptions_total"]
    assert preemptions["labels"] == [("phase", ["output", "think"]), ("mode", ["recompute", "swap", "offload"])]


def test_snapshot_has_every_series_of_every_family():
    registry = MetricRegistry()
    snap = registry.snapshot()
    assert [f["name"] for f in snap] == [m["name"] for m in metric_catalog()]
    for family, spec in zip(snap, metric_catalog()):
        assert family["type"] == spec["type"]
        expected = math.prod(len(values) for _, values in spec["labels"])
        assert len(family["series"]) == expected
        combos = {tuple(s["labels"][name] for name, _ in spec["labels"]) for s in family["series"]}
        assert len(combos) == expected
        for s in family["series"]:
            assert s["value"] == 0 and s["count"] == 0
            if spec["type"] == "histogram":
                assert len(s["bucket_counts"]) == len(spec["buckets"]) + 1


def test_add_set_observe_value():
    r = MetricRegistry()
    r.add("meridian_preemptions_total", 2, ("think", "recompute"))
    r.add("meridian_preemptions_total", 1, labels=("think", "recompute"))
    assert r.value("meridian_preemptions_total", ("think", "recompute")) == 3
    assert r.value("meridian_preemptions_total", ("output", "recompute")) == 0
    r.set("meridian_scheduler_steps_total", 10)
    r.set("meridian_scheduler_steps_total", 4)  # a mirrored total never goes back
    assert r.value("meridian_scheduler_steps_total") == 10
    r.set("meridian_queue_depth", 7, ("think",))
    r.set("meridian_queue_depth", 2, ("think",))
    assert r.value("meridian_queue_depth", ("think",)) == 2
    r.observe("meridian_scheduler_batch_size", 3, ("output",))
    r.observe("meridian_scheduler_batch_size", 2000, ("output",))
    assert r.value("meridian_scheduler_batch_size", ("output",)) == 2
    (s,) = [s for s in series(r, "meridian_scheduler_batch_size")["series"] if s["labels"] == {"phase": "output"}]
    # Buckets 1, 2, 4, ...: 3 lands in le=4 (index 2), 2000 in +Inf (last); not cumulative.
    assert s["bucket_counts"][2] == 1 and s["bucket_counts"][-1] == 1 and sum(s["bucket_counts"]) == 2
    assert s["sum"] == 2003 and s["count"] == 2
    assert r.misuse_count() == 0


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda r: r.add("meridian_nope_total", 1), "meridian_nope_total"),
        (lambda r: r.add("meridian_preemptions_total", 1, ("think", "teleport")), "teleport"),
        (lambda r: r.add("meridian_preemptions_total", 1, ("think",)), "meridian_preemptions_total"),
        (lambda r: r.add("meridian_queue_depth", 1, ("think",)), "gauge"),
        (lambda r: r.add("meridian_scheduler_steps_total", -1), "delta"),
        (lambda r: r.set("meridian_request_ttft_seconds", 1), "histogram"),
        (lambda r: r.observe("meridian_scheduler_steps_total", 1), "counter"),
        (lambda r: r.value("meridian_queue_depth", ("nowhere",)), "nowhere"),
    ],
)
def test_bad_names_values_and_calls_are_value_errors(call, needle):
    r = MetricRegistry()
    with pytest.raises(ValueError, match=needle):
        call(r)
    assert all(s["value"] == 0 for f in r.snapshot() for s in f["series"])


def test_engine_metrics_feeds_from_the_real_router_scheduler_and_block_manager():
    cfg = meridian.parse_config("[scheduler]\nmin_think_tokens = 1\nmax_think_tokens = 4\n")
    router = meridian.PhaseRouter(cfg, "qwen3")
    registry = MetricRegistry()
    metrics = EngineMetrics(registry)
    router.begin(1)
    for token in (THINK, WORD, WORD, WORD, WORD, WORD, END_THINK, WORD, IM_END):
        event = router.on_token(1, token)
        if event is not None:
            metrics.record_event(event)
    metrics.sync_router(router)
    assert registry.value("meridian_phase_transitions_total", ("enter_think",)) == 1
    assert registry.value("meridian_phase_transitions_total", ("exit_think",)) == 1
    assert registry.value("meridian_budget_force_reason_total", ("hard_cap",)) == 1
    assert registry.value("meridian_budget_force_triggered_total") == 1
    assert registry.value("meridian_requests_completed_total", ("eos",)) == 1
    assert registry.value("meridian_think_tokens_per_request") == 1

    num_blocks = 64
    kv = meridian.KvBlockManager(
        meridian.KvBlockManagerOptions.from_config(cfg, num_blocks * cfg.kv_memory.block_size_bytes)
    )
    sched = meridian.DualQueueScheduler(
        meridian.SchedulerOptions.from_config(cfg, num_blocks), meridian.StepCostModel.from_config(cfg.scheduler)
    )
    sched.add(7, 32)
    driver = meridian.StepDriver(sched, kv)
    plan = driver.plan(meridian.StepLimits(), 0)
    metrics.record_step(plan.stats, 2e-5)
    sched.complete_step(10.0, 10_000_000)
    metrics.sync_scheduler(sched)
    metrics.sync_kv(kv)
    assert registry.value("meridian_scheduler_steps_total") == 1
    assert registry.value("meridian_scheduler_scheduled_tokens_total") == 32
    assert registry.value("meridian_scheduler_batch_size", ("prefill",)) == 1
    assert sched.counters.preemptions_by_phase == [[0, 0, 0], [0, 0, 0]]
    assert registry.value("meridian_schedule_batch_duration_seconds") == 1
    assert registry.value("meridian_schedule_batch_duration_ns") == 1
    assert registry.value("meridian_block_manager_used_bytes") > 0
    assert registry.value("meridian_block_manager_capacity_bytes") == num_blocks * cfg.kv_memory.block_size_bytes
    with pytest.raises(ValueError, match="carrier-pigeon"):
        metrics.sync_kv(kv, "carrier-pigeon")
    metrics.sync_kv(kv, "nixl")

    metrics.record_output_itl(0.02)
    metrics.record_request(ttft_s=0.1, ttfv_s=0.5, ttot_s=0.01, e2e_s=2.0, completed=True, slo_met=True)
    metrics.record_request(ttft_s=0.2)  # given up on: a miss
    assert registry.value("meridian_output_itl_seconds") == 1
    assert registry.value("meridian_request_ttft_seconds") == 2
    assert registry.value("meridian_request_e2e_seconds") == 1
    assert registry.value("meridian_slo_requests_total", ("met",)) == 1
    assert registry.value("meridian_slo_requests_total", ("missed",)) == 1
    metrics.record_request(ttft_s=3.0, ttfv_s=90.0, completed=True, missed=["ttft", "ttfv"])
    assert registry.value("meridian_slo_bound_misses_total", ("ttft",)) == 1
    assert registry.value("meridian_slo_bound_misses_total", ("ttfv",)) == 1
    assert registry.value("meridian_slo_bound_misses_total", ("output_tpot",)) == 0
    with pytest.raises(ValueError, match="unknown SLO bound 'tpot'"):
        metrics.record_request(completed=True, missed=["tpot"])
    with pytest.raises(ValueError, match="slo_met=True with bounds missed"):
        metrics.record_request(completed=True, slo_met=True, missed=["ttft"])
    assert registry.misuse_count() == 0


def test_engine_metrics_keeps_its_registry_alive():
    metrics = EngineMetrics(MetricRegistry())
    metrics.record_request(ttft_s=0.1, completed=True, slo_met=True)  # no crash: the registry lives on


def test_concurrent_adds_from_python_threads_lose_nothing():
    r = MetricRegistry()

    def work():
        for _ in range(2000):
            r.add("meridian_vocab_fallback_total", 1)
            r.observe("meridian_output_itl_seconds", 0.01)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.value("meridian_vocab_fallback_total") == 8000
    assert r.value("meridian_output_itl_seconds") == 8000


def _clock(registry):
    return meridian.RequestClock(EngineMetrics(registry), ttft_s=1.0, output_tpot_s=0.02, think_tpot_s=0.08,
                                 think_start_ids=[THINK])


def test_request_clock_times_a_reasoning_request_into_the_registry():
    registry = MetricRegistry()
    clock = _clock(registry)
    clock.add(1, 0.0, True)
    clock.sampled(1, WORD, 0.1)  # TTFT; thinking: not visible
    clock.think_ended(1, 0.2)
    clock.set_thinking(1, False)
    clock.sampled(1, WORD, 0.21)
    clock.sampled(1, WORD, 0.22)
    clock.finish(1, True, 3, 0.3)
    assert len(clock) == 0
    assert series(registry, "meridian_request_ttft_seconds")["series"][0]["sum"] == pytest.approx(0.1)
    assert series(registry, "meridian_request_ttot_seconds")["series"][0]["sum"] == pytest.approx(0.01)
    assert series(registry, "meridian_output_itl_seconds")["series"][0]["count"] == 1
    met = [s["value"] for s in series(registry, "meridian_slo_requests_total")["series"]]
    assert met == [1, 0]


def test_request_clock_bounds_ttfv_of_reasoning_requests_when_asked():
    registry = MetricRegistry()
    clock = meridian.RequestClock(EngineMetrics(registry), ttft_s=1.0, output_tpot_s=0.02, think_tpot_s=0.08,
                                  think_start_ids=[THINK], ttfv_s=0.5)
    clock.add(1, 0.0, True)
    clock.sampled(1, WORD, 0.1)
    clock.think_ended(1, 0.6)
    clock.set_thinking(1, False)
    clock.sampled(1, WORD, 0.61)  # first answer token after 0.61 s > 0.5 s
    clock.finish(1, True, 7, 0.7)
    assert registry.value("meridian_slo_requests_total", ("missed",)) == 1
    assert registry.value("meridian_slo_bound_misses_total", ("ttfv",)) == 1
    with pytest.raises(ValueError, match="slo.ttfv_s"):
        meridian.RequestClock(EngineMetrics(MetricRegistry()), ttft_s=1.0, output_tpot_s=0.02, think_tpot_s=0.08,
                              think_start_ids=[THINK], ttfv_s=-1.0)


def test_request_clock_refuses_a_bound_that_is_not_positive():
    with pytest.raises(ValueError, match="slo.output_tpot_s"):
        meridian.RequestClock(EngineMetrics(MetricRegistry()), ttft_s=1.0, output_tpot_s=0.0, think_tpot_s=0.08,
                              think_start_ids=[THINK])


def test_engine_step_tokens_times_every_request_and_feeds_only_boundaries():
    from meridian._meridian import EngineStepTokens

    registry = MetricRegistry()
    clock = _clock(registry)
    router = meridian.PhaseRouter(meridian.MeridianConfig.defaults(), "qwen3")
    ids = meridian.RequestIdMap()
    a, b = ids.intern("a"), ids.intern("b")
    mid_of = {"a": a, "b": b}
    assert router.begin(a, [THINK]) == meridian.Phase.THINK_DECODE
    assert router.begin(b, [WORD]) != meridian.Phase.THINK_DECODE
    clock.add(a, 0.0, True)
    clock.add(b, 0.0, False)
    step = EngineStepTokens()
    # "zz" is unknown; b's empty list sampled nothing; a's tuple ends its think block.
    step.take(clock, mid_of, ["a", "b", "zz"], [(WORD, END_THINK), [WORD], [WORD]], [THINK, END_THINK, IM_END], 0.5)
    assert step.staged == 2  # a's two tokens, b's ordinary one is not staged
    events = step.feed(router)
    assert [(e.request_id, e.kind) for e in events] == [(a, meridian.PhaseEventKind.EXIT_THINK)]
    assert step.staged == 0 and step.feed(router) == []
    step.take(clock, mid_of, ["b"], [[]], [THINK, END_THINK, IM_END], 0.6)  # nothing sampled: not timed
    step.take(clock, mid_of, ["b"], [[WORD]], [THINK, END_THINK, IM_END], 0.7)
    clock.finish(b, True, 0, 0.8)
    assert series(registry, "meridian_request_ttft_seconds")["series"][0]["sum"] == pytest.approx(0.5)
    assert series(registry, "meridian_output_itl_seconds")["series"][0]["sum"] == pytest.approx(0.2)
    with pytest.raises(TypeError, match="sampled must be a sequence"):
        step.take(clock, mid_of, ["a"], 5, [THINK], 0.9)


def test_request_clock_from_the_configuration_uses_its_bounds_and_refuses_a_negative_count():
    """What the vLLM adapter builds (issue 48: it hard-coded TTFT at 1 s and ignored TTFV)."""
    cfg = meridian.parse_config("[scheduler]\nttft_slo_ms = 2000\nttfv_slo_ms = 500\n")
    registry = MetricRegistry()
    clock = meridian.RequestClock(EngineMetrics(registry), config=cfg, think_start_ids=[THINK])
    clock.add(1, 0.0, False)
    clock.sampled(1, WORD, 1.5)  # TTFT 1.5 s <= 2 s
    clock.finish(1, True, 0, 1.6)
    assert registry.value("meridian_slo_requests_total", ("met",)) == 1
    clock.add(2, 0.0, True)
    clock.sampled(2, WORD, 0.1)
    clock.think_ended(2, 0.6)
    clock.set_thinking(2, False)
    clock.sampled(2, WORD, 0.61)  # TTFV 0.61 s > 0.5 s
    with pytest.raises(ValueError, match="think_tokens must be >= 0, got -1"):
        clock.finish(2, True, -1, 0.7)
    clock.finish(2, True, 7, 0.7)
    assert registry.value("meridian_slo_bound_misses_total", ("ttfv",)) == 1
