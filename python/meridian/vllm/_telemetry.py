"""Meridian's metrics from inside vLLM (the adapter's and the logits processor's).

One ``EngineTelemetry`` per ``meridian.vllm.Scheduler`` (so per engine core):
a C++ ``MetricRegistry`` the engine loop records into (relaxed atomics; a
step's tokens are timed by a C++ ``RequestClock`` in one native pass),
fed by ``EngineMetrics`` from the real router and scheduler, and mirrored at
most every ``SYNC_INTERVAL_S`` into prometheus_client objects
(``meridian.telemetry.prometheus``) that reach the operator two ways:

* Meridian's own ``/metrics`` on ``[telemetry] prometheus_host:prometheus_port``
  (default 127.0.0.1:9464) when ``prometheus_enabled``; with several engine
  cores (data parallel) each serves on ``prometheus_port + data_parallel_index``.
* vLLM's own ``/metrics`` when ``PROMETHEUS_MULTIPROC_DIR`` is set for
  ``vllm serve`` (prometheus_client's multiprocess mode; see
  meridian.telemetry.prometheus).

With ``[telemetry] otlp_enabled`` the same registry goes out over OTLP/HTTP and
each step becomes a span (``meridian.telemetry.otlp``).

Per-request times come from the adapter (wall clock, ``time.time()``, the clock
of vLLM's ``Request.arrival_time``): TTFT = arrival to the first generated
token; TTFV = arrival to the first visible (answer-phase) token; TTOT = the
step that closed the think block to the first visible token; E2E = arrival to
the request's release, for requests that finished by stop or length. A token
counts as visible when its request was in the answer phase before the step's
phase events (so ``</think>`` itself is not). SLO (as the replay's
``meets_slo``, with the bounds the operator configured, derived once in C++ by
``RequestClock::slo_of``): completed, TTFT <= ``[scheduler] ttft_slo_ms``, mean
answer TPOT <= ``output_tpot_budget_ms``, mean think TPOT <=
``think_tpot_budget_ms`` and, for reasoning requests when ``ttfv_slo_ms`` > 0,
TTFV <= ``ttfv_slo_ms``.

KV: vLLM owns the KV cache. Capacity bytes = the size of vLLM's KV tensors,
used bytes = vLLM's block-pool usage times that (cached free blocks count as
free, as in vLLM); live blocks by tier = the adapter's ``kv_tiers()``; cached
think_complete blocks = finished requests' think blocks the adapter moved
ahead in vLLM's free queue and vLLM has not reused yet (ADR-0031); the other
cached tiers, evictions and prefix-cache counters stay 0 (vLLM's own metrics
have them). Preemptions are vLLM's, always recompute: ``{phase, mode="recompute"}``.

The logits processor (``ForceThinkEnd``) counts forced ends by reason,
forced exits and its fail-safe fallbacks into the registry of the newest
engine of its process (``lp_registry()``); where it runs in another process
than the scheduler (TP > 1 worker processes), into a registry of its own whose
values reach Prometheus only through ``PROMETHEUS_MULTIPROC_DIR``.

Thread-safety: the engine core's one thread (like vLLM's scheduler).
"""
from __future__ import annotations

import os
import time
import weakref
from typing import Any

import meridian

SYNC_INTERVAL_S = 0.25

_current: weakref.ref[EngineTelemetry] | None = None


class EngineTelemetry:
    """The registry, feeds and exporters of one engine core (module docstring)."""

    def __init__(self, config: Any, vllm_config: Any, think_start_ids: Any = ()) -> None:
        global _current
        self.registry = meridian.MetricRegistry()
        self.feed = meridian.EngineMetrics(self.registry)
        tel = config.telemetry
        # Per-request times, in C++: a step's tokens are timed in one native
        # pass (meridian.EngineStepTokens.take), not a Python loop.
        self.clock = meridian.RequestClock(self.feed, config=config, think_start_ids=list(think_start_ids))
        self.next_sync = 0.0
        self.meridian_ns = 0  # time in Meridian's code since the last recorded step
        self.exporter: Any = None
        self.port: int | None = None
        self.otlp: Any = None
        self.kv_capacity_bytes = 0.0
        if tel.prometheus_enabled or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from meridian.telemetry.prometheus import PrometheusExporter

            self.exporter = PrometheusExporter(self.registry)
            if tel.prometheus_enabled:
                parallel = getattr(vllm_config, "parallel_config", None)
                index = int(getattr(parallel, "data_parallel_index", 0) or 0)
                self.port = self.exporter.serve(tel.prometheus_host, int(tel.prometheus_port) + index)
        if tel.otlp_enabled:
            from meridian.telemetry.otlp import OtlpTelemetry

            self.otlp = OtlpTelemetry.from_config(config, self.registry)
        _current = weakref.ref(self)

    # --- per request / per token ---------------------------------------------

    def add(self, mid: int, arrival: float | None, thinking: bool) -> None:
        self.clock.add(mid, arrival if arrival else time.time(), thinking)

    def think_ended(self, mid: int, now: float) -> None:
        self.clock.think_ended(mid, now)

    def finished(self, mid: int, completed: bool, think_tokens: int) -> None:
        self.clock.finish(mid, completed, think_tokens, time.time())

    # --- per step --------------------------------------------------------------

    def step(self, core: Any) -> None:
        """After a planned step's bookkeeping: the plan's stats and the time
        spent in Meridian's code since the last step."""
        self.feed.record_step(core.last_stats, self.meridian_ns / 1e9)
        self.meridian_ns = 0

    def events(self, events: list[Any], core: Any, start_ns: int) -> None:
        """After a step's output: its phase events, and OTLP's span of the step."""
        record = self.feed.record_event
        for event in events:
            record(event)
        if self.otlp is not None:
            self.otlp.on_step(core.counters.steps, core.last_stats, events, start_ns or None, time.time_ns())

    def preempted(self, answer: bool) -> None:
        self.registry.add("meridian_preemptions_total", 1, ("output" if answer else "think", "recompute"))

    def fallback(self, component: str) -> None:
        self.registry.add("meridian_failsafe_fallbacks_total", 1, (component,))

    def maybe_sync(self, adapter: Any, sched: Any, force: bool = False) -> None:
        """Mirrors the components and the registry into the exporters, at most
        every SYNC_INTERVAL_S."""
        now = time.monotonic()
        # An idle engine (nothing left to run) steps no more: export its final values now.
        if now < self.next_sync and not force and sched.has_unfinished_requests():
            return
        self.next_sync = now + SYNC_INTERVAL_S
        report_logits_processors()
        self.feed.sync_router(adapter.router)
        self.feed.sync_scheduler(adapter.core)
        self._sync_kv(adapter, sched)
        if self.exporter is not None:
            self.exporter.sync()

    def _sync_kv(self, adapter: Any, sched: Any) -> None:
        if not self.kv_capacity_bytes:
            tensors = getattr(getattr(sched, "kv_cache_config", None), "kv_cache_tensors", None) or []
            self.kv_capacity_bytes = float(sum(getattr(t, "size", 0) for t in tensors))
        reg = self.registry
        usage = getattr(getattr(sched, "kv_cache_manager", None), "usage", 0.0) or 0.0
        reg.set("meridian_block_manager_capacity_bytes", self.kv_capacity_bytes)
        reg.set("meridian_block_manager_used_bytes", usage * self.kv_capacity_bytes)
        for tier, blocks in adapter.kv_tiers(sched.block_size).items():
            reg.set("meridian_block_manager_live_blocks", blocks, (tier,))
        # Finished reasoning kept for prefix hits, first to go (ADR-0031).
        reg.set("meridian_block_manager_cached_blocks", adapter.think_eviction.cached_blocks(), ("think_complete",))

    def shutdown(self) -> None:
        if self.exporter is not None:
            self.exporter.sync()
            self.exporter.close()
            directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
            if directory:  # this process's live gauges leave vLLM's /metrics with it
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(os.getpid(), directory)
        if self.otlp is not None:
            self.otlp.shutdown()
            self.otlp = None


# --- the logits processor's counters ---------------------------------------------

_lp_fallback: Any = None


def lp_registry() -> tuple[Any, Any]:
    """(registry, exporter to sync or None) the logits processor records into:
    the newest engine's of this process, else one of its own (module docstring)."""
    global _lp_fallback
    engine = _current() if _current is not None else None
    if engine is not None:
        return engine.registry, None
    if _lp_fallback is None:
        registry = meridian.MetricRegistry()
        exporter = None
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from meridian.telemetry.prometheus import PrometheusExporter

            exporter = PrometheusExporter(registry)
        _lp_fallback = (registry, exporter)
    return _lp_fallback


_reporters: weakref.WeakSet[LpReporter] = weakref.WeakSet()


def report_logits_processors() -> None:
    """Pushes every logits processor of this process's counters now."""
    for reporter in list(_reporters):
        reporter.report()


class LpReporter:
    """Pushes a ForcingCounters' increases into ``lp_registry()``. Called by
    the processor every step: a few integer comparisons, and a push (plus,
    in a process without an engine, an export) only when a count moved,
    which is once per force or fallback, so the last ones are never held
    back by a timer."""

    def __init__(self, counters: Any) -> None:
        self.counters = counters
        _reporters.add(self)
        self.sent_forced: dict[str, int] = {}
        self.sent_landed = 0
        self.sent_fallbacks = 0

    def report(self) -> None:
        counters = self.counters
        moved = counters.forced_landed != self.sent_landed or counters.fallbacks != self.sent_fallbacks or any(
            n != self.sent_forced.get(reason, 0) for reason, n in counters.forced.items())
        if not moved:
            return
        registry, exporter = lp_registry()
        for reason, n in counters.forced.items():
            delta = n - self.sent_forced.get(reason, 0)
            if delta > 0:
                registry.add("meridian_budget_force_reason_total", delta, (reason,))
                registry.add("meridian_budget_force_triggered_total", delta)  # all reasons: one series
            self.sent_forced[reason] = n
        if counters.forced_landed > self.sent_landed:
            registry.add("meridian_budget_forced_exits_total", counters.forced_landed - self.sent_landed)
        self.sent_landed = counters.forced_landed
        if counters.fallbacks > self.sent_fallbacks:
            registry.add("meridian_failsafe_fallbacks_total", counters.fallbacks - self.sent_fallbacks,
                         ("logits_processor",))
        self.sent_fallbacks = counters.fallbacks
        if exporter is not None:
            exporter.sync()
