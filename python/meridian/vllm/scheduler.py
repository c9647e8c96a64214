"""``meridian.vllm.Scheduler``: vLLM's ``AsyncScheduler`` driven by Meridian.

    vllm serve MODEL --reasoning-parser qwen3 --scheduler-cls meridian.vllm.Scheduler

vLLM keeps doing everything it does (admission, chunked prefill, prefix
caching, KV allocation, preemption, spec decode, structured output); the
adapter changes three inputs to vLLM's own ``schedule()`` each step, from the
decision of Meridian's C++ ``DualQueueScheduler`` (ADR-0017):

1. **Order of ``self.running``.** vLLM schedules running requests in list
   order and, when KV runs out, preempts ``running[-1]`` first. The list
   becomes: answer-phase requests (served first), then think-phase requests by
   progress, most first, so the least progress lost is the first victim, then
   requests still prefilling (chat, then reasoning). So while a think-phase
   request runs, vLLM never preempts an answer-phase one.
2. **Think decode throttling.** Think requests the plan leaves out this step
   (the answer SLO's step ceiling is full) sit the step out: they are held out
   of ``self.running`` during ``schedule()`` and put back afterwards (their KV
   stays; vLLM's model runner keeps their state, as for any running request it
   does not schedule). Only a request with no step in flight is held
   (``num_output_placeholders == 0``): with async scheduling, a request whose
   last token has not come back is always scheduled, so under async
   scheduling throttling applies only to requests that were not scheduled in
   the previous step, which in steady state is none (docs/deployment.md).
3. **Token budget.** While answers stream, the step's token budget is the
   running decodes plus the prefill tokens the plan allows (what fits the
   output TPOT ceiling, at least ``min_prefill_tokens_per_step``), so a long
   prompt is chunked instead of stalling every stream.

Phases come from the real ``PhaseRouter``, fed once per step with the tokens
vLLM appended. The C++ scheduler sees each request from its first generated
token on (a request is planned as a decode; prefill stays vLLM's), is told
when vLLM preempts it and when it finishes.

Fail-safe: an exception in Meridian's code during a step leaves that step to
vLLM's stock behaviour (the running list and budgets restored), is counted in
``meridian_stats()["fallbacks"]`` and logged once per place; the engine never
stops because of Meridian. Configuration errors at start-up are raised (the
engine does not start with a Meridian it cannot run).

Metrics: every step feeds the catalog's metrics (router, scheduler, per-request
TTFT/TTFV/TTOT/E2E/ITL/SLO, fallbacks), exported on Meridian's own port and, with
``PROMETHEUS_MULTIPROC_DIR``, on vLLM's ``/metrics``; see ``_telemetry.py`` and
docs/deployment.md#metrics-from-inside-vllm.

Thread-safety: like vLLM's scheduler, used from the engine core's one thread.
"""
from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

import meridian
from meridian._meridian import engine_step_boundaries
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.request import Request, RequestStatus

from ._setup import resolve_setup, validate_extra_args
from ._telemetry import EngineTelemetry

logger = logging.getLogger("meridian.vllm")

_OUTPUT = meridian.Phase.OUTPUT_DECODE
_THINK = meridian.Phase.THINK_DECODE
_EXIT_THINK = meridian.PhaseEventKind.EXIT_THINK
_ENTER_THINK = meridian.PhaseEventKind.ENTER_THINK
_RUNNING = RequestStatus.RUNNING
_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
_UNLIMITED_BLOCKS = (1 << 63) - 1
# The router needs the prompt only from its last think boundary on.
_PROMPT_TAIL = 256


class _Adapter:
    """Meridian's state beside one vLLM scheduler."""

    def __init__(self, sched: Scheduler) -> None:
        setup = resolve_setup(sched.vllm_config)
        self.setup = setup
        # The planning clock (ns). The engine-in-the-loop replay (meridian.engine_replay)
        # points it at the simulated clock, so deadlines and step times are the simulator's.
        self.clock_ns: Callable[[], int] = time.monotonic_ns
        cfg = setup.config
        self.router = meridian.PhaseRouter(cfg, setup.model_name)
        options = meridian.SchedulerOptions.from_config(cfg, _UNLIMITED_BLOCKS)
        # KV is vLLM's: it allocates and preempts; Meridian orders victims.
        options.preemption_enabled = False
        options.block_tokens = sched.block_size
        self.core = meridian.DualQueueScheduler(options, meridian.StepCostModel.from_config(cfg.scheduler))
        self.limits = meridian.StepLimits(
            token_budget=sched.max_num_scheduled_tokens,
            max_sequences=sched.max_num_running_reqs,
            free_kv_blocks=_UNLIMITED_BLOCKS,
            free_think_kv_blocks=_UNLIMITED_BLOCKS,
        )
        self.decode_tokens = 1 + sched.num_spec_tokens
        model = setup.model
        self.boundary_ids = sorted(set(model.think_start_token_ids) | set(model.think_end_token_ids)
                                   | set(model.eos_token_ids) | set(model.tool_call_start_token_ids)
                                   | set(model.tool_call_end_token_ids))
        self.think_start_ids = frozenset(model.think_start_token_ids)
        self.ids = meridian.RequestIdMap()  # vLLM request id -> Meridian id (C++, used in batch calls)
        self.mid_of: dict[str, int] = {}  # the same, for Python-side lookups
        self.requests: dict[int, Request] = {}
        self.phase: dict[int, Any] = {}
        self.no_throttle: set[int] = set()
        self.in_core: set[int] = set()
        # Requests vLLM started (or restarted) prefilling; they join the C++
        # scheduler with their first generated token, in the order vLLM scheduled
        # them (a dict: a set's order of str ids would change with PYTHONHASHSEED,
        # and with it the core's queues, from one process to the next).
        self.pending: dict[str, None] = {}
        self.last_ordered: list[Request] = []
        # The running list as the last step left it, to skip rewriting an
        # unchanged order (rebuilding it touches every request object, which
        # at 1,024 running costs more than the plan itself).
        self.prev_order: list[int] | None = None
        self.prev_running: list[Request] | None = None
        self.prev_len = -1
        self.running_dirty = True
        # Output-token positions where thinking started / ended (KV tiers).
        self.think_start: dict[int, int] = {}
        self.think_end: dict[int, int] = {}
        self.last_schedule_ns = 0
        self.predicted_ms = 0.0
        self.logged: set[str] = set()
        self.stats = {
            "steps": 0,
            "fallbacks": 0,
            "throttled_decodes": 0,
            "budget_capped_steps": 0,
            "preempted_answer": 0,
            "preempted_think": 0,
            "phase_exits": 0,
            "invalid_extra_args": 0,
        }
        # Metrics: Prometheus (own port, vLLM's /metrics in multiprocess
        # mode) and OTLP; see _telemetry.py.
        self.telemetry = EngineTelemetry(cfg, sched.vllm_config)
        self.step_start_ns = 0
        logger.info(
            "meridian: scheduler active (model preset %r, config %s)", setup.model_name, setup.config_source
        )

    # --- bookkeeping ------------------------------------------------------

    def add(self, request: Request) -> None:
        mid = self.ids.intern(request.request_id)
        self.mid_of[request.request_id] = mid
        self.requests[mid] = request
        overrides: dict[str, Any] = {}
        try:
            overrides = validate_extra_args(getattr(request.sampling_params, "extra_args", None))
        except ValueError as e:
            self.stats["invalid_extra_args"] += 1
            self.log_once("extra_args", "meridian: ignoring request %s's overrides: %s", request.request_id, e)
        if overrides.get("throttle") is False:
            self.no_throttle.add(mid)
        self.telemetry.add(mid, request.arrival_time)
        prompt = request.prompt_token_ids or []
        self.phase[mid] = self.router.begin(mid, list(prompt[-_PROMPT_TAIL:]))
        if self.phase[mid] == _THINK:  # the prompt opened the think block
            self.think_start[mid] = 0

    def forget(self, request_id: str) -> None:
        mid = self.ids.release(request_id)
        self.mid_of.pop(request_id, None)
        self.running_dirty = True
        if mid is None:
            return
        r = self.requests.get(mid)
        start = self.think_start.get(mid)
        think_tokens = self.think_end.get(mid, -1) - start if start is not None else 0
        self.telemetry.finished(mid, r is not None and r.status in _COMPLETED, think_tokens)
        self.requests.pop(mid, None)
        self.phase.pop(mid, None)
        self.no_throttle.discard(mid)
        self.pending.pop(request_id, None)
        self.think_start.pop(mid, None)
        self.think_end.pop(mid, None)
        if mid in self.in_core:
            self.in_core.discard(mid)
            self.core.finish(mid)
        self.router.end(mid)

    def preempted(self, request_id: str) -> None:
        """vLLM preempted it: it leaves the C++ scheduler until it decodes again."""
        mid = self.mid_of.get(request_id)
        if mid is None:
            return
        self.running_dirty = True
        answer = self.phase.get(mid) == _OUTPUT
        self.stats["preempted_answer" if answer else "preempted_think"] += 1
        self.telemetry.preempted(answer)
        if mid in self.in_core:
            self.in_core.discard(mid)
            self.core.finish(mid)

    def kv_tiers(self, block_size: int) -> dict[str, int]:
        """vLLM's running KV mirrored into Meridian's tiers (docs/architecture.md
        KV tiers): blocks written while thinking are think_active (the request
        still thinks) or think_complete (it answers now); prompt and answer
        blocks are output_critical. Computed on demand, O(running)."""
        tiers = {"think_active": 0, "think_complete": 0, "output_critical": 0}
        for mid, r in self.requests.items():
            if r.status != _RUNNING:
                continue
            blocks = -(-r.num_computed_tokens // block_size)
            think = 0
            start = self.think_start.get(mid)
            if start is not None:
                end = self.think_end.get(mid, r.num_output_tokens)
                think = min(-(-max(0, end - start) // block_size), blocks)
            key = "think_active" if self.phase.get(mid) == _THINK else "think_complete"
            tiers[key] += think
            tiers["output_critical"] += blocks - think
        return tiers

    def log_once(self, where: str, msg: str, *args: Any) -> None:
        if where not in self.logged:
            self.logged.add(where)
            logger.warning(msg, *args)

    def failed(self, where: str, error: BaseException) -> None:
        self.stats["fallbacks"] += 1
        self.telemetry.fallback("scheduler")
        if where not in self.logged:
            self.logged.add(where)
            logger.error(
                "meridian: %s raised %s: %s; this step runs vLLM's stock scheduling (counted in "
                "meridian_stats()['fallbacks']; logged once)", where, type(error).__name__, error,
                exc_info=error)

    # --- the step ---------------------------------------------------------

    def before_schedule(self, sched: Scheduler) -> tuple[list[Request], int | None]:
        """Plans the step and reorders ``sched.running``; returns the held
        requests and the token budget to use (None: vLLM's)."""
        now = self.clock_ns()
        self.step_start_ns = time.time_ns()
        unplanned, order, prefill_budget, answers_active, predicted = self.core.plan_for_engine(
            self.limits, now)
        self.predicted_ms = predicted
        reqs = self.requests
        running = sched.running
        held: list[Request] = []
        hold: set[int] = set()
        if unplanned:
            no_throttle = self.no_throttle
            for mid in unplanned:
                if mid in no_throttle:
                    continue
                r = reqs[mid]
                if r.num_output_placeholders == 0:
                    hold.add(mid)
                    held.append(r)
            self.stats["throttled_decodes"] += len(held)
        if (not hold and not self.running_dirty and running is self.prev_running and len(running) == self.prev_len
                and order == self.prev_order):
            # Same requests, same plan order, nothing held now or last step:
            # vLLM's list is already in this order.
            self.last_ordered = running
            self.prev_order = order
            return held, self._budget(sched, answers_active, len(running), prefill_budget)
        ordered = [reqs[i] for i in order if i not in hold] if hold else [reqs[i] for i in order]
        if len(ordered) + len(held) != len(running):
            # Requests the plan does not order yet: prefilling (vLLM's) or
            # decoding their first planned token. Answer-phase before think,
            # so the tail (the first victims) is reasoning still prefilling.
            known = set(ordered)
            known.update(held)
            phase, mid_of = self.phase, self.mid_of
            rest = [r for r in running if r not in known]
            rest.sort(key=lambda r: phase.get(mid_of.get(r.request_id)) != _OUTPUT)
            ordered.extend(rest)
        # The new list must hold exactly vLLM's running requests: as many, all
        # RUNNING (vLLM keeps every RUNNING request in its list, and the plan
        # names each request once). Otherwise: the fail-safe, not a guess.
        if len(ordered) + len(held) != len(running) or not all(
                r.status == _RUNNING for r in itertools.chain(ordered, held)):
            raise RuntimeError(
                f"running list out of sync: {len(ordered)} ordered + {len(held)} held vs {len(running)} running")
        running[:] = ordered
        self.last_ordered = ordered
        self.prev_order = order if not hold else None
        self.prev_running = running
        self.prev_len = len(ordered) + len(held)
        self.running_dirty = bool(held)  # held requests come back at the end
        return held, self._budget(sched, answers_active, len(ordered), prefill_budget)

    def _budget(self, sched: Scheduler, answers_active: bool, decodes: int, prefill_budget: int) -> int | None:
        """The step's token budget while answers stream (None: vLLM's own)."""
        if not answers_active:
            return None
        budget = decodes * self.decode_tokens + prefill_budget
        if budget >= sched.max_num_scheduled_tokens:
            return None
        self.stats["budget_capped_steps"] += 1
        return budget

    def after_schedule(self, sched: Scheduler, out: Any) -> None:
        now = self.clock_ns()
        self.stats["steps"] += 1
        scheduled = out.num_scheduled_tokens
        for new in out.scheduled_new_reqs:
            self.pending[new.req_id] = None
        resumed = getattr(out.scheduled_cached_reqs, "resumed_req_ids", None)
        if resumed:  # a set: taken in the step's scheduling order
            for rid in scheduled:
                if rid in resumed:
                    self.pending[rid] = None
        # What the plan ordered but vLLM did not schedule (budget, KV, limits)
        # made no progress. A str's hash is cached and vLLM's keys are the
        # requests' own id objects, so this is cheap.
        mid_of = self.mid_of
        not_run = [mid_of[r.request_id] for r in self.last_ordered
                   if r.request_id not in scheduled and r.request_id in mid_of]
        # The step's wall time is the gap between two schedule() calls in
        # steady state; anything far off (idle engine) is not a sample.
        gap_ms = (now - self.last_schedule_ns) / 1e6 if self.last_schedule_ns else float("nan")
        self.last_schedule_ns = now
        bound = 5 * max(self.predicted_ms, 1.0)
        observed = gap_ms if 0 < gap_ms < bound else float("nan")
        self.core.complete_step(observed, now, not_run)
        self.telemetry.step(self.core)

    def before_update(self, model_runner_output: Any) -> None:
        """Times the step's tokens for TTFT/TTFV/ITL, before vLLM's update
        (which frees finished requests): a token is visible when its request
        was answering before this step and it is not a think start."""
        if model_runner_output.sampled_token_ids:
            self.telemetry.tokens(model_runner_output.req_ids, model_runner_output.sampled_token_ids, self.mid_of,
                                  self.phase, _THINK, self.think_start_ids)

    def after_update(self, model_runner_output: Any) -> None:
        """Feeds the step's boundary tokens to the router (one batch call),
        applies phase changes, and lets requests that produced their first
        token join the C++ scheduler."""
        reqs = self.requests
        events = []
        if model_runner_output.sampled_token_ids:
            events = engine_step_boundaries(self.router, self.ids, model_runner_output.req_ids,
                                            model_runner_output.sampled_token_ids, self.boundary_ids)
            for event in events:
                mid = event.request_id
                r = reqs.get(mid)
                if event.kind == _EXIT_THINK:
                    self.phase[mid] = _OUTPUT
                    self.stats["phase_exits"] += 1
                    if r is not None:  # the think tokens end before </think>
                        self.think_end[mid] = r.num_output_tokens - 1
                    if mid in self.in_core:
                        self.core.set_phase(mid, _OUTPUT)
                    self.telemetry.think_ended(mid, time.time())
                elif event.kind == _ENTER_THINK:
                    self.phase[mid] = _THINK
                    if r is not None:  # they start after <think>
                        self.think_start[mid] = r.num_output_tokens
        if self.pending:
            mid_of = self.mid_of
            for rid in list(self.pending):
                mid = mid_of.get(rid)
                r = reqs.get(mid) if mid is not None else None
                if r is None:
                    del self.pending[rid]
                    continue
                if r.status != _RUNNING:
                    continue
                if r.is_prefill_chunk or r.num_computed_tokens < r.num_prompt_tokens:
                    continue
                del self.pending[rid]
                if mid not in self.in_core:
                    self._enter_core(mid, r)
        self.telemetry.events(events, self.core, self.step_start_ns)

    def sync_metrics(self, sched: Scheduler) -> None:
        """Mirrors the components into the metric exporters (time-gated)."""
        self.telemetry.maybe_sync(self, sched)

    def _enter_core(self, mid: int, r: Request) -> None:
        phase = self.phase.get(mid)
        if phase not in (_THINK, _OUTPUT):
            snap = self.router.snapshot(mid)
            phase = snap.phase if snap is not None else _OUTPUT
            if phase not in (_THINK, _OUTPUT):
                phase = _OUTPUT
            self.phase[mid] = phase
        context = max(1, r.num_computed_tokens)
        # Known from its first token on: planned as a one-token step.
        self.core.add(mid, context, phase, context - 1, int(r.arrival_time * 1e9))
        self.in_core.add(mid)


class Scheduler(AsyncScheduler):
    """vLLM's ``AsyncScheduler`` with Meridian's phase-aware decisions (module
    docstring). Constructed by vLLM with the same arguments as its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Raises MeridianSetupError (a ValueError) when Meridian cannot run
        # with this model or configuration: better no engine than a wrong one.
        self.meridian: _Adapter | None = _Adapter(self)

    def meridian_stats(self) -> dict[str, Any]:
        """Meridian's counters for this engine (steps, fallbacks, throttled
        decodes, preemptions by phase, ...) and the C++ scheduler's."""
        m = self.meridian
        if m is None:
            return {}
        out = dict(m.stats)
        out["tracked_requests"] = len(m.requests)
        out["model_preset"] = m.setup.model_name
        out["kv_blocks"] = m.kv_tiers(self.block_size)
        out["metrics_port"] = m.telemetry.port
        return out

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            m = self.meridian
            if m is not None:  # closes Meridian's /metrics port, flushes OTLP
                try:
                    m.telemetry.shutdown()
                except Exception as e:  # noqa: BLE001 - the fail-safe
                    m.failed("telemetry shutdown", e)

    # --- vLLM's hooks -------------------------------------------------------

    def _guarded(self, where: str, hook: str, *args: Any) -> None:
        """Runs one of the adapter's hooks under the fail-safe."""
        m = self.meridian
        if m is None:
            return
        start = time.perf_counter_ns()
        try:
            getattr(m, hook)(*args)
        except Exception as e:  # noqa: BLE001 - the fail-safe
            m.failed(where, e)
        m.telemetry.meridian_ns += time.perf_counter_ns() - start

    def add_request(self, request: Request) -> None:
        is_new = request.request_id not in self.requests
        super().add_request(request)
        if is_new:
            self._guarded("add_request", "add", request)

    def schedule(self, throttle_prefills: bool = False) -> Any:
        m = self.meridian
        if m is None:
            return super().schedule(throttle_prefills)
        saved = (self.max_num_scheduled_tokens, self.max_num_running_reqs, self.max_num_active_reqs)
        before = list(self.running)
        held: list[Request] = []
        start = time.perf_counter_ns()
        try:
            held, budget = m.before_schedule(self)
            if held:
                self.max_num_running_reqs -= len(held)
                self.max_num_active_reqs -= len(held)
            if budget is not None:
                self.max_num_scheduled_tokens = budget
        except Exception as e:  # noqa: BLE001 - the fail-safe
            m.failed("schedule (planning)", e)
            self.running[:] = before
            held = []
            self.max_num_scheduled_tokens, self.max_num_running_reqs, self.max_num_active_reqs = saved
        m.telemetry.meridian_ns += time.perf_counter_ns() - start
        try:
            out = super().schedule(throttle_prefills)
        finally:
            if held:
                self.running.extend(held)
            self.max_num_scheduled_tokens, self.max_num_running_reqs, self.max_num_active_reqs = saved
        self._guarded("schedule (bookkeeping)", "after_schedule", self, out)
        return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        self._guarded("update_from_output (metrics)", "before_update", model_runner_output)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self._guarded("update_from_output", "after_update", model_runner_output)
        self._guarded("metrics export", "sync_metrics", self)
        return outputs

    def _preempt_request(self, request: Request, timestamp: float, drop_stale_output: bool = False) -> None:
        super()._preempt_request(request, timestamp, drop_stale_output)
        self._guarded("preemption bookkeeping", "preempted", request.request_id)

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        result = super()._free_request(request, delay_free_blocks)
        self._guarded("request reaping", "forget", request.request_id)
        return result
