"""One engine-in-the-loop run: vLLM's own scheduler class, constructed as the
engine constructs it, stepped on the simulator's clock with the trace in the
model's place (docs/replay.md#engine-in-the-loop-replay).

Two ways of stepping, as vLLM 0.32 steps its engine core:

- lockstep (``EngineCore.step``, what ``--no-async-scheduling`` runs):
  schedule, run the step, update from its output, schedule the next;
- two in flight (``EngineCore.step_with_batch_queue``, the GPU default): a step
  is scheduled while the previous one still runs, so every request scheduled
  at step N still has an output placeholder when step N+1 is planned; the
  oldest step's output is applied only when the queue is full or nothing else
  can be scheduled.

The clock is the C++ roofline (meridian._meridian.sim.RooflineCostModel),
costed on what vLLM scheduled: each request's scheduled tokens and the context
they attend to. The model's tokens are a pure function of (request, output
index), so recompute after a preemption and stale in-flight outputs behave as
in the engine.
"""
from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from meridian._meridian import sim

from .build import MAX_MODEL_LEN
from .tokens import END_THINK, TokenPlan

_BLOCK = 16
# Steps in a row that schedule nothing while the clock stands still before a run is called a
# livelock (a legitimate run has a handful: two in flight, arrivals at one instant).
_STALL_STEPS = 1000
# As the simulator bounds a run (meridian::sim::kMaxWaitingRequests): an arrival that
# finds the engine holding max_num_seqs + this many requests is turned away.
_MAX_WAITING = 16384


@dataclass
class Arm:
    """A scheduler class and a way of stepping it."""

    name: str
    scheduler_cls: Any
    two_in_flight: bool


class _Times:
    """A request's times, kept in Python while it runs (a C++ RequestTimeline's attributes cost a
    call each, and this is touched for every token); sim() builds the RequestTimeline."""

    __slots__ = ("reasoning", "arrival_s", "conversation_arrival_s", "conversation_id", "first_token_s",
                 "first_visible_s", "think_end_s", "last_token_s", "finish_s", "think_tokens", "answer_tokens",
                 "natural_think_tokens", "natural_answer_tokens", "completed")

    def __init__(self, spec: Any, arrival_s: float, watch: Any) -> None:
        self.reasoning = bool(spec.reasoning)
        self.arrival_s = arrival_s
        self.conversation_arrival_s = watch.conversation_start(spec.id)
        self.conversation_id = watch.conversation_id(spec.id)
        self.natural_think_tokens = int(spec.think_tokens)
        self.natural_answer_tokens = int(spec.answer_tokens)
        self.first_token_s = self.first_visible_s = self.think_end_s = self.last_token_s = self.finish_s = -1.0
        self.think_tokens = self.answer_tokens = 0
        self.completed = False

    def sim(self) -> Any:
        tl = sim.RequestTimeline()
        tl.arrived = True
        for name in self.__slots__:
            setattr(tl, name, getattr(self, name))
        return tl


@dataclass
class _Live:
    spec: Any
    plan: TokenPlan
    timeline: _Times
    in_think: bool
    seen: bool = False  # scheduled at least once (its prefix lookup counted)
    sampled: bool = False  # scheduled to sample a token: its first may still be in flight (two steps)


@dataclass
class RunResult:
    metrics: dict[str, float]
    attainment: tuple[float, float, float]
    stopped_early: bool
    verdict: dict[str, Any]  # the run judged by the ruler (sim.judge_run's fields)
    think_tokens: list[int]  # per request (index i: request i + 1), what it emitted: the bound's work
    schedule_s: float  # wall time inside vLLM's schedule() + update_from_output()
    driver_s: float  # wall time of the rest of the loop (outputs, costing, bookkeeping)
    extra: dict[str, float] = field(default_factory=dict)


class EngineRun:
    """One arm over one workload. ``scheduler_cpu_ms`` (lockstep arms only) is
    added to every step: the CPU time of planning a step that a lockstep engine
    does not overlap with the GPU (0: the roofline's overhead_ms stands for it)."""

    def __init__(self, arm: Arm, scheduler: Any, params: Any, requests: list[Any], *, clock: Any,
                 scheduler_cpu_ms: float = 0.0, ruler: str = "sustainable", stop_when_decided: bool = False) -> None:
        self.arm = arm
        self.sched = scheduler
        self.params = params
        self.slo = params.slo
        self.cost = sim.RooflineCostModel(params.cost_model)
        self.requests = requests
        self.clock = clock
        self.scheduler_cpu_s = scheduler_cpu_ms / 1000.0 if not arm.two_in_flight else 0.0
        # The goodput search needs only the verdict: a run stops once it cannot meet the ruler (the
        # C++ VerdictWatch the simulator's engine uses: a class past its allowed misses, a request turned
        # away, or a backlog that grew by the time the first turns stop arriving).
        self.ruler = ruler
        self.stop_when_decided = stop_when_decided
        self.watch = sim.VerdictWatch(requests, params.slo, ruler)
        self.missed_ids: set[int] = set()
        self.first_turns_left = sum(1 for r in requests if not r.after)
        self.backlog_checked = False
        self.stop_reason = ""
        self.live: dict[str, _Live] = {}
        self.by_id = {r.id: r for r in requests}
        self.children: dict[int, list[Any]] = {}
        for r in requests:
            if r.after:
                self.children.setdefault(r.after, []).append(r)
        self.arrivals: list[tuple[float, int]] = [(r.arrival_s, r.id) for r in requests if not r.after]
        heapq.heapify(self.arrivals)
        self.prompts: dict[int, list[int]] = {}
        self.totals = sim.RunTotals()
        self.output_itl: list[float] = []
        self.think_itl: list[float] = []
        self.rejected = 0
        self.window_end = max((r.arrival_s for r in requests if not r.after), default=0.0)
        self.window_tokens = 0
        self.busy = 0.0
        self.last_finish = 0.0
        self.schedule_s = 0.0

    # --- requests ---------------------------------------------------------

    def _admit(self, now: float) -> None:
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        while self.arrivals and self.arrivals[0][0] <= now:
            at, rid = heapq.heappop(self.arrivals)
            spec = self.by_id[rid]
            if not spec.after:
                self.first_turns_left -= 1
            timeline = _Times(spec, at, self.watch)
            parent = self.prompts.get(spec.after) if spec.after else None
            plan = TokenPlan(spec, parent)
            key = str(rid)
            self.live[key] = _Live(spec, plan, timeline, in_think=spec.reasoning)
            self.prompts[rid] = plan.transcript()
            held = len(self.sched.waiting) + len(self.sched.running)
            if held >= self.params.engine.max_num_seqs + _MAX_WAITING:
                self.rejected += 1
                self.watch.dropped()
                self._missed(rid)
                continue
            # EOS ends the request, as in serving (max_tokens is the room left, not the natural
            # length): with two steps in flight vLLM then schedules it once more after its EOS.
            room = MAX_MODEL_LEN - len(plan.prompt)
            params = SamplingParams(max_tokens=max(plan.max_tokens, room), stop_token_ids=[plan.eos],
                                    ignore_eos=False, temperature=0.0)
            req = Request(request_id=key, prompt_token_ids=plan.prompt, sampling_params=params, pooling_params=None,
                          arrival_time=at, block_hasher=self.block_hasher, priority=int(spec.priority))
            self.sched.add_request(req)

    def _missed(self, rid: int) -> None:
        if rid not in self.missed_ids:  # each request counts once
            self.missed_ids.add(rid)
            self.watch.missed(rid)

    def _decided(self) -> bool:
        """Whether the run can no longer meet the ruler (stop_when_decided); self.stop_reason says why."""
        reason = self.watch.decided()
        if reason is None and not self.backlog_checked and self.first_turns_left == 0:
            self.backlog_checked = True  # the window's arrivals are all in: the backlog rule is final
            if self.watch.backlog_grew(self._timelines(), self.window_end):
                reason = "backlog growing"
        if reason is not None:
            self.stop_reason = reason
        return reason is not None

    def _finish(self, key: str, live: _Live, t: float) -> None:
        tl = live.timeline
        tl.finish_s = t
        tl.completed = tl.answer_tokens >= live.spec.answer_tokens
        self.last_finish = max(self.last_finish, t)
        if not sim_meets(tl.sim(), self.slo):
            self._missed(live.spec.id)
        for child in self.children.get(live.spec.id, ()):
            heapq.heappush(self.arrivals, (t + child.delay_s, child.id))

    # --- one step ---------------------------------------------------------

    def _cost(self, out: Any) -> tuple[float, dict[str, bool]]:
        """The step's simulated seconds, and which scheduled requests sample a token."""
        reqs = self.sched.requests
        tokens = kv = 0
        pairs = 0.0
        samples: dict[str, bool] = {}
        for rid, n in out.num_scheduled_tokens.items():
            r = reqs[rid]
            c = r.num_computed_tokens - n  # vLLM advanced it in schedule()
            tokens += n
            kv += c + n
            pairs += n * c + n * (n + 1) / 2
            samples[rid] = not r.is_prefill_chunk
            if n > 1 or c < r.num_prompt_tokens:
                self.totals.prefill_tokens += n
            live = self.live[rid]
            live.sampled = live.sampled or samples[rid]
            if not live.seen:
                live.seen = True
                full = (r.num_prompt_tokens - 1) // _BLOCK
                self.totals.prefix_lookup_blocks += full
                self.totals.prefix_hit_blocks += min(full, c // _BLOCK)
        for rid in out.preempted_req_ids or ():
            self.totals.preemptions += 1
            live = self.live.get(rid)
            # Answering: past its think block (or with none), its first token recorded or in
            # flight (a victim taken right after its prefill has no recorded token yet).
            if live is not None and not live.in_think and (live.sampled or live.timeline.first_token_s >= 0):
                self.totals.preempted_answer_phase += 1
        self.totals.simulated_tokens += tokens
        if tokens == 0:
            return 0.0, samples
        return self.cost.step_ms(tokens, kv, pairs) / 1000.0, samples

    def _model_output(self, out: Any, samples: dict[str, bool]) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        reqs = self.sched.requests
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            r = reqs.get(rid)
            if r is None or not samples[rid]:
                sampled.append([])
            else:
                sampled.append([self.live[rid].plan.token(r.num_output_tokens)])
        return ModelRunnerOutput(req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)},
                                 sampled_token_ids=sampled)

    def _record(self, outputs: Any, t: float) -> None:
        for eco in outputs.values():
            for o in eco.outputs:
                live = self.live.get(o.request_id)
                if live is None:
                    continue
                tl = live.timeline
                for tok in o.new_token_ids:
                    if tl.first_token_s < 0:
                        tl.first_token_s = t
                        if (t - tl.arrival_s) * 1000.0 > self.slo.ttft_ms:
                            self._missed(live.spec.id)
                    if live.in_think:
                        if tok == END_THINK:
                            live.in_think = False
                            tl.think_end_s = t
                        else:
                            if tl.think_tokens > 0:
                                self.think_itl.append((t - tl.last_token_s) * 1000.0)
                            tl.think_tokens += 1
                            self.window_tokens += t <= self.window_end
                    else:
                        tl.answer_tokens += 1
                        self.window_tokens += t <= self.window_end
                        if tl.first_visible_s < 0:
                            tl.first_visible_s = t
                        else:
                            self.output_itl.append((t - tl.last_token_s) * 1000.0)
                    tl.last_token_s = t
                if o.finish_reason is not None:
                    self._finish(o.request_id, live, t)

    def _schedule(self) -> Any:
        started = time.perf_counter()
        out = self.sched.schedule()
        self.schedule_s += time.perf_counter() - started
        return out

    def _update(self, out: Any, mro: Any) -> Any:
        started = time.perf_counter()
        result = self.sched.update_from_output(out, mro)
        self.schedule_s += time.perf_counter() - started
        return result

    # --- the loop ---------------------------------------------------------

    def run(self) -> RunResult:
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

        hash_fn = get_hash_fn_by_name(self.sched.vllm_config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.block_hasher = get_request_block_hasher(_BLOCK, hash_fn)
        wall_start = time.perf_counter()
        max_t = self.params.engine.max_sim_time_s
        now = 0.0
        gpu_free = 0.0
        queue: deque = deque()
        stopped = False
        sched = self.sched
        stalled, stalled_at = 0, -1.0  # steps in a row that scheduled nothing, at one clock reading
        while True:
            self.clock.now_s = now
            self._admit(now)
            if self.stop_when_decided and self._decided():
                stopped = True
                break
            if now > max_t:
                break
            if sched.has_requests():
                out = self._schedule()
                if out.total_num_scheduled_tokens == 0 and now == stalled_at:
                    stalled += 1
                    if stalled > _STALL_STEPS:
                        self._stalled(now, stalled)
                else:
                    stalled, stalled_at = 0, now
                cost, samples = self._cost(out)
                start = max(now, gpu_free) + self.scheduler_cpu_s
                end = start + cost
                self.busy += cost
                gpu_free = end
                self.totals.steps += 1 if cost > 0 else 0
                if not self.arm.two_in_flight:
                    now = end
                    self.clock.now_s = now
                    self._record(self._update(out, self._model_output(out, samples)), now)
                    if cost == 0 and not self._progress_possible():
                        now = self._idle_until(now)
                        if now is None:
                            break
                    continue
                queue.appendleft((out, samples, end))
                if len(queue) < 2 and (cost > 0 or sched.has_requests()):
                    continue
            elif not queue:
                nxt = self._idle_until(now)
                if nxt is None:
                    break
                now = nxt
                continue
            out, samples, end = queue.pop()
            now = max(now, end)
            self.clock.now_s = now
            self._record(self._update(out, self._model_output(out, samples)), now)
            if not queue and out.total_num_scheduled_tokens == 0 and not self._progress_possible():
                nxt = self._idle_until(now)
                if nxt is None:
                    break
                now = nxt
        wall = time.perf_counter() - wall_start
        return self._result(stopped, wall)

    def _stalled(self, now: float, steps: int) -> None:
        """The scheduler keeps scheduling nothing while requests wait or run and
        the simulated clock cannot move: a livelock in the arm's scheduler (on a
        real engine, a stall until wall time moves it). An error, not a hang."""
        sched = self.sched
        raise RuntimeError(
            f"engine-replay: {self.arm.name}: the scheduler scheduled nothing in {steps} steps in a row "
            f"at t={now:.3f} s with {len(sched.running)} requests running, {len(sched.waiting)} waiting and "
            f"{sched.kv_cache_manager.block_pool.get_num_free_blocks()} KV blocks free (a scheduler livelock)")

    def _progress_possible(self) -> bool:
        """Whether a request is running (so the next step computes something)."""
        return bool(self.sched.running)

    def _idle_until(self, now: float) -> float | None:
        """The engine has nothing to run: the clock jumps to the next arrival (None: the run is over)."""
        if not self.arrivals:
            if self.sched.has_requests():
                raise RuntimeError(
                    f"engine-replay: {self.arm.name}: {len(self.sched.waiting)} requests wait and none can be "
                    f"scheduled (KV too small for one request?)")
            return None
        return max(now, self.arrivals[0][0])

    def _timelines(self) -> list[Any]:
        """Every request's timeline so far (a request that has not arrived: an empty one)."""
        out = []
        for r in self.requests:
            live = self.live.get(str(r.id))
            if live is None:  # not sent yet: its conversation and its natural work still count
                tl = sim.RequestTimeline()
                tl.reasoning = bool(r.reasoning)
                tl.conversation_arrival_s = self.watch.conversation_start(r.id)
                tl.conversation_id = self.watch.conversation_id(r.id)
                tl.natural_think_tokens = int(r.think_tokens)
                tl.natural_answer_tokens = int(r.answer_tokens)
                out.append(tl)
            else:
                out.append(live.timeline.sim())
        return out

    def _result(self, stopped: bool, wall: float) -> RunResult:
        timelines = self._timelines()
        unfinished = sum(1 for r in self.requests
                         if (live := self.live.get(str(r.id))) is not None and live.timeline.finish_s < 0)
        t = self.totals
        t.rejected = self.rejected
        t.unfinished = unfinished - self.rejected
        t.busy_s = self.busy
        t.makespan_s = self.last_finish
        t.arrival_window_end_s = self.window_end
        t.arrival_window_tokens = self.window_tokens
        t.wall_s = wall
        t.stopped_early = stopped
        pairs, verdict = sim.summarize_timelines(timelines, self.output_itl, self.think_itl, t, self.slo, self.ruler)
        metrics = dict(pairs)
        if stopped:  # judged on the rule it broke, not on the requests the stop left open
            verdict = dict(verdict, meets=False, reason=self.stop_reason)
            metrics["meets_ruler"] = 0.0
        attainment = (metrics["slo_attainment_pct"], metrics["slo_attainment_chat_pct"],
                      metrics["slo_attainment_reasoning_pct"])
        think = [tl.think_tokens for tl in timelines]
        return RunResult(metrics, attainment, stopped, verdict, think, self.schedule_s,
                         max(0.0, wall - self.schedule_s))


def sim_meets(tl: Any, slo: Any) -> bool:
    """Whether a finished timeline meets the SLO (the simulator's rule)."""
    return sim.timeline_meets_slo(tl, slo)
