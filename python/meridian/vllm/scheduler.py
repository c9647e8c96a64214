"""``meridian.vllm.Scheduler``: vLLM's ``AsyncScheduler`` driven by Meridian.

    vllm serve MODEL --reasoning-parser qwen3 --scheduler-cls meridian.vllm.Scheduler

vLLM keeps doing everything it does (admission, chunked prefill, prefix
caching, KV allocation, preemption, spec decode, structured output); the
adapter changes inputs to vLLM's own ``schedule()`` each step, from the
decision of Meridian's C++ ``DualQueueScheduler`` (ADR-0017, ADR-0024):

1. **Order of ``self.running``.** vLLM schedules running requests in list
   order and, when KV runs out, preempts ``running[-1]`` first. The list
   becomes: answer-phase requests (served first), chat prompts still
   prefilling, think-phase requests by slack, least first (so the one with
   the most slack, which a wait costs least, is the first of them to go;
   ADR-0036), then reasoning prompts still prefilling. So while a think-phase
   request holds KV, vLLM never preempts an answer-phase one.
2. **Think decode throttling.** Think requests the plan leaves out this step
   (the answer SLO's step ceiling is full) sit the step out through vLLM's own
   per-request gate, ``Request.next_decode_eligible_step`` (what vLLM's
   ``DiffusionAsyncScheduler`` sets from a subclass, and what V2 model runner
   pipelining uses): they stay in ``self.running`` with their KV, so they
   remain preemption victims, and vLLM's model runners keep their state as
   for any running request a step does not schedule. This acts with two steps
   in flight (vLLM's GPU default) as in lockstep: a request whose last token
   has not come back yet can sit out a step too (ADR-0024). Under async
   scheduling with speculative decoding a held request's draft placeholders
   are dropped, as vLLM drops them at preemption, so it resumes with a plain
   decode.
3. **Token budget.** While answers stream, the step's token budget is the
   running decodes plus the prefill tokens the plan allows (what fits the
   output TPOT ceiling, at least ``min_prefill_tokens_per_step``), so a long
   prompt is chunked instead of stalling every stream; in such a step one
   chunk is capped at the plan's prefill budget (``long_prefill_token_threshold``).
   The floor is for prompts before their first token: when vLLM's prefill
   this step is only victims re-prefilling what they had generated, the
   budget holds only the room the ceiling leaves (ADR-0037).
4. **Admission.** A chat prompt that arrives starts ahead of waiting reasoning
   prompts (vLLM's FCFS queue re-ordered); the core's watermarks hold back
   preempted requests while the running think requests' growth does not fit,
   and, after a preemption until the pool recovers, everything but chat
   (``max_num_active_reqs`` for that step admits only the requests ahead of
   the first one held).
5. **Admission by pausing thinking** (ADR-0027). For each new prompt in
   vLLM's queue that has waited half of ``ttft_slo_ms`` (in queue order, as
   the core's lanes take them, until they hold the last plan's prefill
   budget) whose blocks do not fit, the core names running think requests
   that have the slack to wait (two TTFT budgets against their mean think
   TPOT and, when set, their TTFV; never preempted before; the most slack
   first; at most ``preempt_max_fraction`` of the running set in the step).
   They are preempted with vLLM's own ``_preempt_request`` before
   ``schedule()`` (their in-flight output dropped, as ``reset_prefix_cache``
   does, so nothing is delivered out of order with two steps in flight) and
   the prompts go ahead of them in the waiting queue, past the watermarks.
   Answers are never paused; ``preemption_enabled = false`` turns it off.
6. **Finished reasoning leaves the prefix cache first** (ADR-0031). When vLLM
   frees a finished request, its think blocks (still hashed) move ahead of
   every other cached block in vLLM's free queue, so the prompt blocks that
   conversations' next turns repeat outlive them (``_think_eviction.py``).

Phases come from the real ``PhaseRouter``, fed once per step with the tokens
vLLM kept (an output vLLM drops as stale is not fed). The C++ scheduler sees
each request from its first generated token on (a request is planned as a
decode; prefill stays vLLM's), is told what vLLM actually scheduled each step
(every decode, planned or not) and, when the step's output comes back, the
step's measured time with the step's real features (every scheduled token,
prefill chunks included, and their context), so its step-cost model learns
what vLLM ran, not what the plan asked for. It is told when vLLM preempts a
request, parks a resumable (streaming-input) session, and finishes one. A
think request vLLM resumes re-enters the core with its history (tokens since
its first, that token's time, its preemptions), as a victim the core preempted
itself keeps them, so its think deadlines count the time it spent preempted.

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

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import meridian
from meridian._meridian import EngineStepTokens, engine_replace_running, engine_requests_of, engine_step_ran
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.request import Request, RequestStatus

from ._setup import MeridianSetupError, resolve_setup, validate_extra_args
from ._telemetry import EngineTelemetry
from ._think_eviction import ThinkFirstEviction

logger = logging.getLogger("meridian.vllm")

_OUTPUT = meridian.Phase.OUTPUT_DECODE
_THINK = meridian.Phase.THINK_DECODE
_EXIT_THINK = meridian.PhaseEventKind.EXIT_THINK
_ENTER_THINK = meridian.PhaseEventKind.ENTER_THINK
_RUNNING = RequestStatus.RUNNING
# A waiting request vLLM may admit this step; any other waiting status (a grammar still
# compiling, remote KV loading, a parked streaming session) is skipped by vLLM's queue.
_ADMISSIBLE = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
_COMPLETED = (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH_CAPPED)
_UNLIMITED_BLOCKS = (1 << 63) - 1
# The router needs the prompt only from its last think boundary on.
_PROMPT_TAIL = 256
# The core's admission watermarks (src/scheduler/scheduler_impl.h): each running
# think request keeps this many tokens of growth free, and memory pressure (a
# preemption) lasts until 1/50 of the pool is free beyond that.
_GROWTH_HORIZON_TOKENS = 128
_HIGH_WATERMARK_DIVISOR = 50
# The core's kAdmitAfterTtftShare: a new prompt may pause thinking once it has
# waited this share of ttft_slo_ms (the core checks it again).
_ADMIT_AFTER_TTFT_SHARE = 0.5
# TTFT triage judges this many prompts from the head (TtftTriage::kWindow).
_TRIAGE_WINDOW = 256


def _prefill_chunk(sched: Any, r: Request, cap: int) -> int:
    """The prompt tokens vLLM schedules this step for waiting request ``r``,
    within ``cap`` tokens (its long-prefill threshold applied)."""
    left = max(0, r.num_tokens - r.num_computed_tokens)
    threshold = sched.scheduler_config.long_prefill_token_threshold
    return min(left, threshold, cap) if threshold > 0 else min(left, cap)


def _admission_blocks(sched: Any, r: Request, chunk: int) -> tuple[int, int]:
    """(the free blocks ``allocate_slots`` requires to admit ``r`` with
    ``chunk`` tokens: its whole prompt with ``scheduler_reserve_full_isl``,
    vLLM's watermark not included; the blocks the chunk takes)."""
    block = sched.block_size
    chunk_blocks = -(-(r.num_computed_tokens + chunk) // block)
    if getattr(sched, "scheduler_reserve_full_isl", False):
        return -(-min(r.num_tokens, sched.max_model_len) // block), chunk_blocks
    return chunk_blocks, chunk_blocks


def _refuse_prose_markers(setup: Any) -> None:
    """A preset that marks reasoning with prose (Granite 3.2: "Here is my
    thought process:") has no think ids, and the engine core sees only ids:
    every request would stay in the answer phase and Meridian would change
    nothing while looking active. Refused, with what to do instead."""
    model = setup.model
    if model.think_start_token_ids or model.think_end_token_ids:
        return
    raise MeridianSetupError(
        f"meridian: model preset {setup.model_name!r} marks reasoning with text, not token ids; "
        "meridian.vllm.Scheduler sees only token ids in vLLM's engine core, so it cannot tell thinking "
        "from answering for this model. Serve it without --scheduler-cls meridian.vllm.Scheduler "
        "(ForceThinkEnd and the replay simulator support text markers), or use a preset with think "
        "token ids (docs/deployment.md#compatibility).")


class _Adapter:
    """Meridian's state beside one vLLM scheduler."""

    def __init__(self, sched: Scheduler) -> None:
        setup = resolve_setup(sched.vllm_config)
        self.setup = setup
        _refuse_prose_markers(setup)
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
        self.ids = meridian.RequestIdMap()  # vLLM request id -> Meridian id (hands them out)
        self.mid_of: dict[str, int] = {}  # the same; the per-step C++ passes look ids up here
        self.requests: dict[int, Request] = {}
        self.phase: dict[int, Any] = {}
        self.no_throttle: set[int] = set()
        self.in_core: set[int] = set()
        # Requests vLLM started (or restarted) prefilling; they join the C++
        # scheduler with their first generated token, in the order vLLM scheduled
        # them (a dict: a set's order of str ids would change with PYTHONHASHSEED,
        # and with it the core's queues, from one process to the next).
        self.pending: dict[str, None] = {}
        # Scheduled steps whose output has not come back: [the SchedulerOutput,
        # when it was scheduled, its tokens, its context tokens, its predicted
        # end (ADR-0032)], oldest first.
        self.in_flight: deque[list[Any]] = deque()
        self.last_update_ns = 0
        # Requests whose in-flight output vLLM will drop (a preemption or a
        # parked session with a KV connector's drop mode): not fed to the router.
        self.dropping: set[str] = set()
        # Resumable sessions vLLM parked between two input chunks.
        self.parked: set[str] = set()
        # One step's sampled tokens, read once in C++: timed before vLLM's
        # update, their boundary tokens fed to the router after it.
        self.step_tokens = EngineStepTokens()
        # A chat prompt arrived behind waiting ones: the waiting queue is
        # re-ordered (chat ahead of reasoning) before the next schedule().
        self.waiting_dirty = False
        self.admit: int | None = None  # this step's admission_limit(), set by before_schedule
        self.pressure = False  # vLLM preempted and the pool has not recovered past the high watermark
        # Admission by pausing thinking (ADR-0027): on with the core's preemption setting.
        self.pause_thinking = cfg.scheduler.preemption_enabled
        self.admit_after_ns = int(_ADMIT_AFTER_TTFT_SHARE * cfg.scheduler.ttft_slo_ms * 1e6)
        self.arrived_ns: dict[int, int] = {}  # on the planning clock
        self.first_token_ns: dict[int, int] = {}  # when each entered the core first (its first token)
        # When vLLM preempted each victim not yet back in the core: its wait,
        # to its first token after, goes to the core, which reports the wait victims
        # see (meridian_scheduler_victim_wait_seconds; ADR-0035).
        self.preempted_ns: dict[int, int] = {}
        self.paused_for: set[str] = set()  # this step's prompts admitted past the watermarks
        # The prefill budget of the last plan: how many prompt tokens pausing takes per step.
        self.last_prefill_budget = sched.max_num_scheduled_tokens
        # TTFT triage (ADR-0028): new prompts that can no longer meet their
        # TTFT go behind the others in vLLM's waiting queue, every step.
        self.ttft_triage = cfg.scheduler.ttft_triage
        self.deferred: set[str] = set()  # this step's deferred waiting prompts
        self.deferred_running: set[str] = set()  # this step's deferred prompts vLLM is prefilling
        self.held_prefills: list[str] = []  # of those, the ones held out of this step
        self.ever_deferred: set[str] = set()  # counted once in the core's ttft_deferred
        self.total_blocks = sched.kv_cache_manager.block_pool.num_gpu_blocks
        self.growth_blocks = -(-_GROWTH_HORIZON_TOKENS // sched.block_size)
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
        # Finished reasoning's blocks go first from vLLM's prefix cache (ADR-0031).
        self.think_eviction = ThinkFirstEviction(sched)
        self.logged: set[str] = set()
        self.stats = {
            "steps": 0,
            "fallbacks": 0,
            "throttled_decodes": 0,
            "step_times_observed": 0,
            "sessions_parked": 0,
            "waiting_reorders": 0,
            "admission_held_steps": 0,
            "budget_capped_steps": 0,
            "preempted_answer": 0,
            "preempted_think": 0,
            "paused_for_admission": 0,
            "ttft_deferred_steps": 0,
            "ttft_deferred_held": 0,
            "phase_exits": 0,
            "invalid_extra_args": 0,
        }
        # Metrics: Prometheus (own port, vLLM's /metrics in multiprocess
        # mode) and OTLP; see _telemetry.py.
        self.telemetry = EngineTelemetry(cfg, sched.vllm_config, self.think_start_ids)
        self.step_start_ns = 0
        logger.info(
            "meridian: scheduler active (model preset %r, config %s)", setup.model_name, setup.config_source
        )

    # --- bookkeeping ------------------------------------------------------

    def add(self, request: Request) -> None:
        mid = self.ids.intern(request.request_id)
        self.mid_of[request.request_id] = mid
        self.requests[mid] = request
        self.arrived_ns[mid] = self.clock_ns()
        overrides: dict[str, Any] = {}
        try:
            overrides = validate_extra_args(getattr(request.sampling_params, "extra_args", None))
        except ValueError as e:
            self.stats["invalid_extra_args"] += 1
            self.log_once("extra_args", "meridian: ignoring request %s's overrides: %s", request.request_id, e)
        if overrides.get("throttle") is False:
            self.no_throttle.add(mid)
        prompt = request.prompt_token_ids or []
        self.phase[mid] = self.router.begin(mid, list(prompt[-_PROMPT_TAIL:]))
        self.telemetry.add(mid, request.arrival_time, self.phase[mid] == _THINK)
        if self.phase[mid] == _THINK:  # the prompt opened the think block
            self.think_start[mid] = 0
        else:
            self.waiting_dirty = True

    def forget(self, request_id: str) -> None:
        mid = self.ids.release(request_id)
        self.mid_of.pop(request_id, None)
        self.running_dirty = True
        if mid is None:
            return
        r = self.requests.get(mid)
        start = self.think_start.get(mid)
        think_tokens = 0
        if start is not None:
            # Released while still thinking (aborted, length-capped): the think tokens so far.
            end = self.think_end.get(mid, r.num_output_tokens if r is not None else start)
            think_tokens = max(0, end - start)
        self.telemetry.finished(mid, r is not None and r.status in _COMPLETED, think_tokens)
        self.requests.pop(mid, None)
        self.arrived_ns.pop(mid, None)
        self.first_token_ns.pop(mid, None)
        self.preempted_ns.pop(mid, None)
        self.phase.pop(mid, None)
        self.no_throttle.discard(mid)
        self.pending.pop(request_id, None)
        self.parked.discard(request_id)
        self.dropping.discard(request_id)
        self.ever_deferred.discard(request_id)
        self.think_start.pop(mid, None)
        self.think_end.pop(mid, None)
        if mid in self.in_core:
            self.in_core.discard(mid)
            self.core.finish(mid)
        self.router.end(mid)

    def finishing(self, sched: Scheduler, request: Request) -> None:
        """vLLM is about to free a finished request: its think blocks are
        collected, to be the prefix cache's first victims once freed."""
        mid = self.mid_of.get(request.request_id)
        span = self.think_span(mid, request) if mid is not None else None
        if span is not None:
            self.think_eviction.collect(sched, request, *span, self.stats["steps"])

    def evict_think_first(self) -> None:
        """Moves the collected think blocks vLLM has freed ahead of the other cached blocks."""
        self.think_eviction.apply(self.stats["steps"])

    def preempted(self, request: Request, prefilled: bool = False) -> None:
        """vLLM preempted it: it leaves the C++ scheduler until it decodes again.
        `prefilled`: its prompt was all computed (its first token sampled)."""
        rid = request.request_id
        mid = self.mid_of.get(rid)
        if mid is None:
            return
        self.running_dirty = True
        self.pressure = True
        if request.drop_stale_output and request.num_stale_output_tokens > 0:
            self.dropping.add(rid)
        # Answering, including a prompt that opened no think block once its first token is
        # sampled (still in flight, it has not entered the core's answer phase).
        phase = self.phase.get(mid)
        answer = phase == _OUTPUT or (phase != _THINK and prefilled)
        self.stats["preempted_answer" if answer else "preempted_think"] += 1
        self.telemetry.preempted(answer)
        self.preempted_ns.setdefault(mid, self.clock_ns())
        if mid in self.in_core:
            self.in_core.discard(mid)
            self.core.finish(mid)

    def parked_session(self, request: Request) -> None:
        """vLLM parked a resumable (streaming-input) session between two input
        chunks: it waits for its next chunk, out of the running list. It
        leaves the core and the router; it comes back, with its new prompt,
        when vLLM schedules it again (_resume_sessions)."""
        rid = request.request_id
        mid = self.mid_of.get(rid)
        if mid is None:
            return
        self.running_dirty = True
        self.stats["sessions_parked"] += 1
        self.parked.add(rid)
        self.pending.pop(rid, None)
        if request.drop_stale_output and request.num_stale_output_tokens > 0:
            self.dropping.add(rid)
        if mid in self.in_core:
            self.in_core.discard(mid)
            self.core.finish(mid)
        self.router.end(mid)

    def _resume_sessions(self, scheduled: Any) -> None:
        for rid in [rid for rid in self.parked if rid in scheduled]:
            self.parked.discard(rid)
            mid = self.mid_of.get(rid)
            r = self.requests.get(mid) if mid is not None else None
            if r is None:
                continue
            prompt = r.prompt_token_ids or []
            self.phase[mid] = self.router.begin(mid, list(prompt[-_PROMPT_TAIL:]))
            self.telemetry.clock.set_thinking(mid, self.phase[mid] == _THINK)
            if self.phase[mid] == _THINK:
                self.think_start[mid] = 0
            self.pending[rid] = None

    def think_span(self, mid: int, r: Request) -> tuple[int, int] | None:
        """The output-token positions [start, end) of `r`'s reasoning (to its
        last token while it still thinks); None if it opened no think block."""
        start = self.think_start.get(mid)
        return None if start is None else (start, self.think_end.get(mid, r.num_output_tokens))

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
            span = self.think_span(mid, r)
            if span is not None:
                think = min(-(-max(0, span[1] - span[0]) // block_size), blocks)
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

    def pause_for_admission(self, sched: Scheduler) -> int:
        """Admission by pausing thinking (ADR-0027), before the step is planned,
        as the core's lanes do it: every new prompt in vLLM's queue (victims,
        which vLLM puts at the front, are passed over as the core's lanes pass
        them; so are prompts TTFT triage deferred and those that have not
        waited half of ttft_slo_ms), in queue order, until the prompts taken
        hold the last step's prefill budget. Each one whose blocks (as
        ``allocate_slots`` checks them, plus vLLM's watermark, beyond what the
        prompts taken before it claim) do not fit preempts the think requests
        the core names, at most the core's per-step victim share over the
        step; the first for which the core names none ends the walk (FCFS: no
        later prompt overtakes it by pausing). The prompts taken go, in
        order, to the front of the queue and pass the watermarks this step
        (so a prompt does when its blocks fit but a victim ahead or a
        watermark holds it). Returns how many were paused. FCFS queue only
        (the priority policy's heap is vLLM's order). Prefix-cache hits are
        not looked up (as in _engine_prefill_tokens): a prompt that would hit
        counts all its blocks, which can only pause more than it needed.
        O(waiting) per step."""
        self.paused_for.clear()
        if self.waiting_dirty:
            self.waiting_dirty = False
            self._chat_prompts_first(sched.waiting)
        self._triage(sched)
        waiting = sched.waiting
        if not self.pause_thinking or not sched.running or not waiting or not isinstance(waiting, deque):
            return 0
        now = self.clock_ns()
        pool = sched.kv_cache_manager.block_pool
        watermark = getattr(sched.kv_cache_manager, "watermark_blocks", 0)
        budget = max(1, self.last_prefill_budget)
        victims_left = self.core.step_victim_share()
        # The at-risk prompts, in queue order, until they hold the budget (a
        # pass of its own: preempting puts victims into the queue being read).
        at_risk: list[tuple[Request, int, int]] = []
        tokens = 0
        for r in waiting:
            if tokens >= budget:
                break
            if r.num_preemptions or r.num_computed_tokens or r.status not in _ADMISSIBLE \
                    or r.request_id in self.deferred:
                continue  # a victim, a request vLLM skips this step, or a deferred prompt (a miss anyway)
            mid = self.mid_of.get(r.request_id)
            arrived = self.arrived_ns.get(mid) if mid is not None else None
            if arrived is None or now - arrived < self.admit_after_ns:
                continue  # not at risk yet: the watermarks hold it as before
            chunk = _prefill_chunk(sched, r, sched.max_num_scheduled_tokens)
            at_risk.append((r, arrived, chunk))
            tokens += chunk
        claimed = paused = 0
        taken: list[Request] = []
        timestamp = time.monotonic()
        for r, arrived, chunk in at_risk:
            need, chunk_blocks = _admission_blocks(sched, r, chunk)
            need += watermark + claimed
            free = pool.get_num_free_blocks()
            if free < need:
                victims = engine_requests_of(self.requests, self.core.admission_victims(
                    arrived, need, free, now, victims_left))
                if not victims:
                    break  # FCFS: no prompt behind it overtakes it by pausing
                for v in victims:
                    sched.running.remove(v)
                    sched._preempt_request(v, timestamp, drop_stale_output=True)
                paused += len(victims)
                victims_left -= len(victims)
            claimed += chunk_blocks
            taken.append(r)
        if not taken:
            return 0
        # vLLM puts victims at the front of the queue: the prompts taken go first.
        if any(a is not b for a, b in zip(taken, waiting)):
            ids = {id(r) for r in taken}
            rest = [r for r in waiting if id(r) not in ids]
            waiting.clear()
            waiting.extend(taken)
            waiting.extend(rest)
        self.paused_for.update(r.request_id for r in taken)
        self.stats["paused_for_admission"] += paused
        return paused

    def before_schedule(self, sched: Scheduler) -> tuple[int, int | None, int]:
        """Plans the step, reorders ``sched.running`` and gates the think
        decodes the plan leaves out; returns how many were held, the token
        budget to use (None: vLLM's) and the prefill chunk cap (0: vLLM's)."""
        now = self.clock_ns()
        self.step_start_ns = time.time_ns()
        # (The waiting queue was re-ordered, chat first, by pause_for_admission.)
        # The watermarks first: the prefill estimate counts only the prompts they let in.
        self.admit = self.admission_limit(sched)
        self.limits.engine_prefill_tokens, self.limits.engine_resume_tokens = \
            self._engine_prefill_tokens(sched, self.admit)
        unplanned, order, prefill_budget, answers_active, _ = self.core.plan_for_engine(
            self.limits, self.step_start_estimate(now))
        self.last_prefill_budget = prefill_budget
        reqs = self.requests
        running = sched.running
        no_throttle = self.no_throttle
        if unplanned and no_throttle:
            unplanned = [mid for mid in unplanned if mid not in no_throttle]
        hold = engine_requests_of(reqs, unplanned) if unplanned else []
        decodes = len(running) - len(hold)
        if not self.running_dirty and running is self.prev_running and len(running) == self.prev_len \
                and order == self.prev_order and not self.deferred_running:
            # Same requests, same plan order: vLLM's list is already in it.
            return self._hold(sched, hold), self._budget(sched, answers_active, decodes, prefill_budget), \
                prefill_budget
        ordered = engine_requests_of(reqs, order)
        if len(ordered) != len(running):
            # Requests the plan does not order yet: prefilling (vLLM's) or
            # decoding their first planned token. The tail is where vLLM takes
            # victims, so the list follows the C++ victim order from the back:
            # reasoning prefills first, then think requests (the most slack
            # first, ADR-0036), then chat prefills, answers last (ADR-0017). A
            # reasoning prefill is a prompt that opened a think block; any other
            # sits with the chat prefills, before its first token too (ADR-0024).
            known = set(ordered)
            phase, mid_of = self.phase, self.mid_of
            chat: list[Request] = []
            reasoning: list[Request] = []
            for r in running:
                if r not in known:
                    (reasoning if phase.get(mid_of.get(r.request_id)) == _THINK else chat).append(r)
            answers = 0
            for mid in order:
                if phase.get(mid) != _OUTPUT:
                    break
                answers += 1
            ordered[answers:answers] = chat
            ordered.extend(reasoning)
            if self.deferred_running:  # TTFT triage (ADR-0028): last for budget, first as victims
                late = self.deferred_running
                ordered = [r for r in ordered if r.request_id not in late] + \
                    [r for r in ordered if r.request_id in late]
        # The new list must hold exactly vLLM's running requests: as many, all
        # RUNNING (vLLM keeps every RUNNING request in its list, and the plan
        # names each request once). Otherwise: the fail-safe, not a guess.
        if not engine_replace_running(running, ordered, _RUNNING):
            raise RuntimeError(f"running list out of sync: {len(ordered)} ordered vs {len(running)} running")
        self.prev_order = order
        self.prev_running = running
        self.prev_len = len(ordered)
        self.running_dirty = False
        return self._hold(sched, hold), self._budget(sched, answers_active, decodes, prefill_budget), prefill_budget

    def _engine_prefill_tokens(self, sched: Scheduler, admit: int | None) -> tuple[int, int]:
        """Prompt tokens vLLM will prefill this step that the core does not
        plan itself (it knows a request from its first token on), and of them
        the re-prefill of victims that had their first token (the core holds
        those to the room the ceiling leaves, not the prefill floor:
        ADR-0037): what is left
        of the prompts being prefilled, then the waiting prompts vLLM will
        admit, up to the step's token budget and to what the free KV blocks
        hold. (Not only what they hold beyond the running think requests'
        growth: vLLM keeps no such reserve, the watermarks' ``admit`` count is
        how the core's lanes keep it, and pausing admits past them. With that
        reserve taken off, under KV pressure the estimate read 0 while vLLM
        prefilled hundreds of tokens, and steps planned within the answers'
        ceiling ran up to 1.8 times longer.) The core plans them as
        prefill, ahead of think decode the guarantee does not need (ADR-0025),
        so the estimate follows vLLM's own admission: the first ``admit``
        waiting requests (the watermarks), each only if its blocks fit as
        ``allocate_slots`` checks them (the whole prompt with
        ``scheduler_reserve_full_isl``, plus vLLM's watermark), the queue
        stopping at the first that does not. A prompt counted here that vLLM
        then does not run would hold think decodes back for nothing (with the
        clock frozen, forever): requests vLLM skips this step (a grammar still
        compiling, remote KV loading, stale output in flight) are passed
        over, as vLLM passes them. Prefix-cache hits are not looked up: a prompt
        that would hit is counted as needing all its blocks, which can only
        leave think decodes planned that vLLM then runs beside it."""
        if not self.pending and not sched.waiting:
            return 0, 0
        free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        cap = min(sched.max_num_scheduled_tokens, free * sched.block_size)
        if cap == 0:
            return 0, 0
        total = resume = 0
        if self.pending:
            reqs, mid_of = self.requests, self.mid_of
            for rid in self.pending:
                if rid in self.held_prefills:
                    continue  # sits this step out (TTFT triage)
                mid = mid_of.get(rid)
                r = reqs.get(mid) if mid is not None else None
                if r is not None and r.status == _RUNNING:
                    chunk = min(_prefill_chunk(sched, r, cap), cap - total)
                    total += chunk
                    if r.num_output_tokens:  # a victim re-prefilling what it had
                        resume += chunk
                    if total >= cap:
                        return total, resume
        if admit == 0:
            return total, resume
        watermark = getattr(sched.kv_cache_manager, "watermark_blocks", 0) if sched.running else 0
        slots = (getattr(sched, "max_num_active_reqs", sched.max_num_running_reqs) - len(sched.running)
                 - getattr(sched, "num_waiting_for_streaming_input", 0))
        admitted = 0
        for r in sched.waiting:
            if admitted >= slots:
                break  # vLLM's own limit on active requests
            if r.status not in _ADMISSIBLE or (getattr(r, "num_stale_output_tokens", 0)
                                               and not getattr(r, "drop_stale_output", True)):
                continue  # vLLM skips it this step and goes on down the queue
            chunk = _prefill_chunk(sched, r, cap - total)
            need, chunk_blocks = _admission_blocks(sched, r, chunk)
            if need + watermark > free:
                break  # vLLM's queue stops at a request it cannot allocate
            free -= chunk_blocks
            total += chunk
            if r.num_output_tokens:
                resume += chunk
            admitted += 1
            if total >= cap or admitted == admit:
                break
        return total, resume

    def _hold(self, sched: Scheduler, hold: list[Request]) -> int:
        """Gates this step's think decodes out (last, once nothing else can
        fail: a fallback step must run vLLM's stock schedule); returns how many."""
        if not hold:
            return 0
        # schedule() advances current_step before it checks eligibility, so
        # current_step + 2 skips this call only; max keeps a longer wait vLLM
        # set itself (V2 model runner with pipeline parallelism).
        skip_until = sched.current_step + 2
        for r in hold:
            eligible = getattr(r, "next_decode_eligible_step", None)
            if eligible is None:  # a vLLM without the gate: nothing can be held
                self.log_once("no_gate", "meridian: this vLLM's Request has no next_decode_eligible_step; "
                              "think decodes are not held (ordering and the prefill cap still act)")
                return 0
            if eligible < skip_until:
                r.next_decode_eligible_step = skip_until
            if r.num_output_placeholders and r.spec_token_ids:
                # Async draft placeholders: the runner fills them from the
                # previous step's drafts, which a request that sits a step out
                # does not have. vLLM drops them at preemption too.
                r.spec_token_ids = []
        self.stats["throttled_decodes"] += len(hold)
        return len(hold)

    def admission_limit(self, sched: Scheduler) -> int | None:
        """The core's admission watermarks, lane by lane, on vLLM's pool:
        how many of the waiting requests, from the head, may start this step
        (None: no limit). As the core's watermark(): outside memory pressure
        only a preempted request (the resume lane) keeps the growth the
        running think requests will need soon (128 tokens each) free; after a
        preemption, until the free blocks pass the high watermark (that growth
        plus 2 % of the pool), a chat prompt keeps the growth free and every
        other request waits for the high watermark, so victims are not
        re-admitted only to be preempted again. The soft think share is not
        modelled inside vLLM. FCFS queue only; O(requests admitted)."""
        waiting = sched.waiting
        if not sched.running or not waiting or not isinstance(waiting, deque):
            return None
        reserve = self.core.last_stats.think_queue_depth * self.growth_blocks
        free = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        high = reserve + self.total_blocks // _HIGH_WATERMARK_DIVISOR
        if self.pressure and free >= high:
            self.pressure = False
        if free >= (high if self.pressure else reserve):
            return None  # no lane is held
        phase, mid_of = self.phase, self.mid_of
        admitted = 0
        for r in waiting:
            if r.request_id in self.paused_for:  # admitted by pausing thinking (ADR-0027)
                admitted += 1
                continue
            victim = r.num_preemptions > 0
            if self.pressure:
                chat = not victim and phase.get(mid_of.get(r.request_id)) != _THINK
                need = reserve if chat else high
            else:
                need = reserve if victim else 0
            if free < need:
                self.stats["admission_held_steps"] += 1
                return admitted
            admitted += 1
            if admitted >= sched.max_num_running_reqs:
                break
        return None

    def _triage(self, sched: Scheduler) -> None:
        """TTFT triage (ADR-0028), before the step is planned. vLLM serves
        prompts being prefilled (in its running list, in list order) before
        the waiting queue (FCFS), so the core judges the new prompts in that
        order: those vLLM is prefilling, then the never-started waiting ones,
        256 in all. Those it names as unable to meet ttft_slo_ms
        while the others still can go last: a waiting one behind every other
        waiting request (here); one being prefilled to the tail of the running
        list (before_schedule), where it is vLLM's first victim and gets the
        token budget the other running requests leave, and, since vLLM gives
        running requests the budget before waiting ones, it sits the step out
        (next_decode_eligible_step) while a prompt that can still meet its
        TTFT waits. Victims keep their places. FCFS queue only;
        O(running + waiting)."""
        self.deferred.clear()
        self.deferred_running.clear()
        self.held_prefills = []
        waiting = sched.waiting
        if not self.ttft_triage or not isinstance(waiting, deque):
            return
        arrived, mid_of = self.arrived_ns, self.mid_of
        prompts: list[Request] = []
        arrival: list[int] = []
        remaining: list[int] = []
        before: list[bool] = []

        def judge(r: Request, left: int) -> None:
            mid = mid_of.get(r.request_id)
            at = arrived.get(mid) if mid is not None else None
            if at is None or r.num_preemptions:
                return
            prompts.append(r)
            arrival.append(at)
            remaining.append(left)
            before.append(r.request_id in self.ever_deferred)

        if self.pending:  # vLLM is prefilling something (a prompt vLLM scheduled before its first token)
            for r in sched.running:
                if not r.num_output_tokens and r.num_computed_tokens < r.num_prompt_tokens:
                    judge(r, r.num_prompt_tokens - r.num_computed_tokens)
        started = len(prompts)
        for r in waiting:
            if len(prompts) >= _TRIAGE_WINDOW:
                break  # the core judges no more than these
            if not r.num_computed_tokens:
                judge(r, r.num_tokens)
        if not prompts:
            return
        late = self.core.ttft_deferrals(arrival, remaining, before, self.clock_ns())
        if not late:
            return
        self.stats["ttft_deferred_steps"] += 1
        moved = [prompts[i] for i in late if i >= started]
        self.deferred_running.update(prompts[i].request_id for i in late if i < started)
        self.deferred.update(r.request_id for r in moved)
        self.ever_deferred.update(self.deferred)
        self.ever_deferred.update(self.deferred_running)
        if self.deferred_running and any(r.request_id not in self.deferred for r in prompts[started:]):
            # vLLM gives running requests the budget before any waiting one:
            # a deferred prefill sits this step out while a prompt that can
            # still meet its TTFT waits (next_decode_eligible_step, as _hold).
            skip_until = sched.current_step + 2
            for r in prompts[:started]:
                eligible = getattr(r, "next_decode_eligible_step", None)  # None: a vLLM without the gate
                if r.request_id in self.deferred_running and eligible is not None and eligible < skip_until:
                    r.next_decode_eligible_step = skip_until
                    self.held_prefills.append(r.request_id)
            self.stats["ttft_deferred_held"] += len(self.held_prefills)
        if not moved:
            return
        tail = list(waiting)[-len(moved):]
        if all(a is b for a, b in zip(tail, moved)):
            return  # already at the back, in order
        kept = [r for r in waiting if r.request_id not in self.deferred]
        waiting.clear()
        waiting.extend(kept)
        waiting.extend(moved)

    def _chat_prompts_first(self, waiting: Any) -> None:
        """vLLM's FCFS waiting queue, re-ordered as Meridian's admission lanes
        serve it: a reasoning prompt that has not started (the prompt opened
        a think block; never scheduled, never preempted) waits behind chat
        prompts; everything else keeps its place and order (victims and
        resumed requests stay at the front, where vLLM put them). Run only
        when a chat prompt arrived; O(waiting). The priority policy's heap
        is left as vLLM orders it."""
        if not isinstance(waiting, deque) or len(waiting) < 2:
            return
        phase, mid_of = self.phase, self.mid_of
        ahead: list[Request] = []
        behind: list[Request] = []
        for r in waiting:
            fresh_reasoning = (phase.get(mid_of.get(r.request_id)) == _THINK and r.num_computed_tokens == 0
                               and r.num_preemptions == 0)
            (behind if fresh_reasoning else ahead).append(r)
        if not behind or not ahead:
            return
        first_behind = next(i for i, r in enumerate(waiting) if r is behind[0])
        if first_behind >= len(ahead):
            return  # already in this order
        waiting.clear()
        waiting.extend(ahead)
        waiting.extend(behind)
        self.stats["waiting_reorders"] += 1

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
        """Tells the core what vLLM scheduled: every decode of a request it
        knows ran (planned or not), the rest did not; the step's features
        wait with it for its output (after_update)."""
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
        if self.parked:
            self._resume_sessions(scheduled)
        # The step's context tokens (a step-cost feature): each scheduled
        # request's context after the step, from the output's own lists
        # (computed before the step, plus what it scheduled), without
        # touching the request objects.
        tokens = out.total_num_scheduled_tokens
        kv = tokens + sum(out.scheduled_cached_reqs.num_computed_tokens)
        for new in out.scheduled_new_reqs:
            kv += new.num_computed_tokens
        # One C++ pass: the core learns which requests it knows ran, timed
        # when their tokens come: the step's predicted end (ADR-0032). An
        # empty step runs nothing and takes no time.
        end = self.step_start_estimate(now)
        if tokens:
            end += int(self.core.cost_model.predict_ms(tokens, kv) * 1e6)
        engine_step_ran(self.core, self.mid_of, end, scheduled)
        self.in_flight.append([out, now, tokens, kv, end])
        self.telemetry.step(self.core)

    def _decodes_in_flight(self, rid: str) -> int:
        """How many of the steps in flight run request `rid`."""
        return sum(rid in step[0].num_scheduled_tokens for step in self.in_flight)

    def step_start_estimate(self, now: int) -> int:
        """When the step being scheduled now starts: now, or with a step still
        in flight, when that one is predicted to end."""
        return max(now, self.in_flight[-1][4]) if self.in_flight else now

    def observe_step(self, scheduler_output: Any) -> None:
        """The step's output is back: its time is from when it could start
        (scheduled, and the previous step done) to now. Lockstep, that is
        schedule-to-output; with two steps in flight, output-to-output."""
        now = self.clock_ns()
        q = self.in_flight
        while q and q[0][0] is not scheduler_output:
            q.popleft()  # a step whose output never came (an engine reset)
        if not q:
            return
        _, scheduled_ns, tokens, kv, end = q.popleft()
        if tokens and now != end:
            # Its decodes were timed at its predicted end, and the steps in
            # flight after it planned from there: they all move to the truth
            # (prefill-heavy steps are where the linear model errs most). An
            # empty step timed nothing (it may wait for an arrival).
            delta = now - end
            self.core.retime_tokens(end, delta)
            for step in q:
                step[4] += delta
        start = max(scheduled_ns, self.last_update_ns)
        self.last_update_ns = now
        if tokens and now > start:
            self.core.observe_step(tokens, kv, (now - start) / 1e6)
            self.stats["step_times_observed"] += 1

    def before_update(self, sched: Scheduler, scheduler_output: Any, model_runner_output: Any) -> None:
        """Before vLLM's update (which frees finished requests): times the
        step, picks the outputs vLLM will keep, times their tokens for
        TTFT/TTFV/ITL (a token is visible when its request was answering
        before this step and it is not a think start) and stages their
        boundary tokens for after_update, in one C++ pass."""
        self.observe_step(scheduler_output)
        req_ids, sampled = model_runner_output.req_ids, model_runner_output.sampled_token_ids
        if self.dropping and sampled:
            # vLLM drops the in-flight output of a request preempted (or a
            # session parked) in drop mode while its share is not drained.
            requests = sched.requests
            drop = set()
            for rid in list(self.dropping):
                r = requests.get(rid)
                if r is not None and r.drop_stale_output and r.num_stale_output_tokens > 0:
                    drop.add(rid)
                else:
                    self.dropping.discard(rid)
            if drop:
                kept = [i for i, rid in enumerate(req_ids) if rid not in drop]
                req_ids = [req_ids[i] for i in kept]
                sampled = [sampled[i] for i in kept]
        if sampled:
            self.step_tokens.take(self.telemetry.clock, self.mid_of, req_ids, sampled, self.boundary_ids, time.time())

    def after_update(self) -> None:
        """Feeds the step's kept boundary tokens to the router (one batch
        call), applies phase changes, and lets requests that produced their
        first token join the C++ scheduler."""
        reqs = self.requests
        events = self.step_tokens.feed(self.router)
        if events:
            for event in events:
                mid = event.request_id
                r = reqs.get(mid)
                if event.kind == _EXIT_THINK:
                    self.phase[mid] = _OUTPUT
                    self.telemetry.clock.set_thinking(mid, False)
                    self.stats["phase_exits"] += 1
                    if r is not None:  # the think tokens end before </think>
                        self.think_end[mid] = r.num_output_tokens - 1
                    if mid in self.in_core:
                        # Two in flight, the step after the one that sampled
                        # </think> may already have run it: that decode is
                        # its first answer token (ADR-0032).
                        in_flight = self._decodes_in_flight(r.request_id) if r is not None else 0
                        self.core.set_phase(mid, _OUTPUT, in_flight)
                    self.telemetry.think_ended(mid, time.time())
                elif event.kind == _ENTER_THINK:
                    self.phase[mid] = _THINK
                    self.telemetry.clock.set_thinking(mid, True)
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
            self.telemetry.clock.set_thinking(mid, phase == _THINK)
        context = max(1, r.num_computed_tokens)
        # Known from its first token on, planned as a one-token step. Its
        # context is its own KV (not a shared prefix): a pause frees all of it.
        # A resumed victim carries its preemptions (never paused again) and,
        # in think, its history (tokens since its first and that token's
        # time), so its think deadlines count the time it spent preempted,
        # and how long it waited, which the core learns victims' waits from.
        now = self.clock_ns()
        first = self.first_token_ns.setdefault(mid, now)
        history = max(0, r.num_output_tokens - 1) if phase == _THINK and r.num_preemptions else 0
        preempted = self.preempted_ns.pop(mid, None)
        self.core.add(mid, context, phase, 0, int(r.arrival_time * 1e9), r.num_preemptions, context - 1,
                      history, first if history else 0, max(0, now - preempted) if preempted is not None else 0)
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
        out["think_blocks_evicted_first"] = m.think_eviction.moved
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
        config = self.scheduler_config
        saved = (self.max_num_scheduled_tokens, config.long_prefill_token_threshold, self.max_num_active_reqs)
        # Think blocks vLLM freed since the last step (deferred frees included) move
        # once, here, before this step allocates anything.
        self._guarded("think-first eviction", "evict_think_first")
        # Its preemptions are vLLM's own and complete: the fail-safe below
        # restores the running list as they left it.
        self._guarded("admission by pausing thinking", "pause_for_admission", self)
        before = list(self.running)
        start = time.perf_counter_ns()
        try:
            _, budget, prefill_cap = m.before_schedule(self)
            if budget is not None:
                self.max_num_scheduled_tokens = budget
                # Chat prefills sit ahead of think decodes (victim order): one
                # chunk must not take the think decodes' share of a capped step.
                if prefill_cap > 0 and not 0 < saved[1] <= prefill_cap:
                    config.long_prefill_token_threshold = prefill_cap
            admit = m.admit
            if admit is not None:
                # vLLM admits while running + parked sessions < max_num_active_reqs.
                self.max_num_active_reqs = min(
                    saved[2], len(self.running) + self.num_waiting_for_streaming_input + admit)
        except Exception as e:  # noqa: BLE001 - the fail-safe
            m.failed("schedule (planning)", e)
            self.running[:] = before
            self.max_num_scheduled_tokens, config.long_prefill_token_threshold, self.max_num_active_reqs = saved
        m.telemetry.meridian_ns += time.perf_counter_ns() - start
        try:
            out = super().schedule(throttle_prefills)
        finally:
            self.max_num_scheduled_tokens, config.long_prefill_token_threshold, self.max_num_active_reqs = saved
        self._guarded("schedule (bookkeeping)", "after_schedule", self, out)
        return out

    def update_from_output(self, scheduler_output: Any, model_runner_output: Any) -> Any:
        self._guarded("update_from_output (metrics)", "before_update", self, scheduler_output, model_runner_output)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self._guarded("update_from_output", "after_update")
        self._guarded("metrics export", "sync_metrics", self)
        return outputs

    def _preempt_request(self, request: Request, timestamp: float, drop_stale_output: bool = False) -> None:
        prefilled = request.num_computed_tokens >= request.num_prompt_tokens  # vLLM resets it
        super()._preempt_request(request, timestamp, drop_stale_output)
        self._guarded("preemption bookkeeping", "preempted", request, prefilled)

    def _handle_stopped_request(self, request: Request) -> bool:
        finished = super()._handle_stopped_request(request)
        if not finished:  # a resumable session waits for its next input chunk
            self._guarded("session bookkeeping", "parked_session", request)
        return finished

    def _free_request(self, request: Request, delay_free_blocks: bool = False) -> Any:
        self._guarded("think-first eviction", "finishing", self, request)
        result = super()._free_request(request, delay_free_blocks)
        self._guarded("request reaping", "forget", request.request_id)
        return result
