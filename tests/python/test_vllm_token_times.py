"""meridian.vllm.Scheduler times each decode at the end of the step that runs
it, as the simulator's core sees it, not at the moment vLLM scheduled it: the
core's answer and think deadlines count from these times (ADR-0032). Against
the real vLLM 0.32 scheduler classes, stepped lockstep and two in flight on a
clock whose steps take what the static cost model predicts, or longer (then
the times move to the truth when each output comes back)."""
from __future__ import annotations

from collections import deque

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import END_THINK, EOS, THINK, WORD, TwoInFlight, build, prompt, request, script  # noqa: E402

from meridian.vllm import Scheduler  # noqa: E402

import meridian  # noqa: E402

BASE_MS, PER_TOKEN_MS = 4.0, 0.5


@pytest.fixture(autouse=True)
def static_cost_model(tmp_path, monkeypatch):
    vllm_rig.isolate_config(tmp_path, monkeypatch)
    vllm_rig.write_config(tmp_path, monkeypatch,
                          f"[scheduler]\nstep_cost_online = false\nstep_cost_base_ms = {BASE_MS}\n"
                          f"step_cost_per_token_ms = {PER_TOKEN_MS}\nstep_cost_per_kv_token_us = 0.0\n")


def step_ns(out, slower: float = 1.0) -> int:
    """What the step takes on this clock: what the static model predicts for
    it, times `slower`."""
    return int((BASE_MS + PER_TOKEN_MS * out.total_num_scheduled_tokens) * 1e6 * slower)


def workload(sched) -> dict[str, list[int]]:
    tokens = {}
    for i in range(6):
        sched.add_request(request(f"t{i}", prompt(16, i)))
        tokens[f"t{i}"] = [THINK] + [WORD + i % 5] * (20 + 7 * i) + [END_THINK] + [WORD] * 12 + [EOS]
    for i in range(2):
        sched.add_request(request(f"a{i}", prompt(24, 50 + i)))
        tokens[f"a{i}"] = [WORD + 3] * (30 + 11 * i) + [EOS]
    return tokens


def run(in_flight: int, slower: float = 1.0) -> tuple[int, list[tuple[int, int]]]:
    """Steps the workload with `in_flight` steps in flight on the clock of a
    GPU that never idles: a step starts when the one before it ends, and is
    scheduled when it may be (lockstep: then; two in flight: when the one
    before it starts). Returns the decodes checked and, for each, (the time
    the core gives the request's last decode once a step's output is back,
    when that decode comes)."""
    sched = build(Scheduler)
    m = sched.meridian
    clock = {"ns": 10**9}
    m.clock_ns = lambda: clock["ns"]
    stepper = TwoInFlight(sched, script(workload(sched)))
    # The steps in flight, oldest first: (when it ends, the requests the core
    # knows that it runs, what the model predicts it takes).
    ends: deque[tuple[int, set[int], int]] = deque()
    seen: list[tuple[int, int]] = []
    for _ in range(2000):
        if not sched.requests:
            break
        start = ends[-1][0] if ends else clock["ns"]
        out = stepper.schedule()
        ran = {mid for mid in map(m.mid_of.get, out.num_scheduled_tokens) if mid is not None and mid in m.in_core}
        ends.append((start + step_ns(out, slower), ran, step_ns(out)))
        if len(ends) >= in_flight or not out.total_num_scheduled_tokens:
            end, ran, _ = ends.popleft()
            clock["ns"] = max(clock["ns"], end)
            stepper.apply()
            # Its decodes came now; a request the step in flight also runs is
            # timed at that step's predicted end, from now.
            for mid in ran:
                view = m.core.view(mid)
                if view is not None:
                    later = [predicted for _, step, predicted in ends if mid in step]
                    seen.append((view.last_token_ns, end + sum(later)))
    stepper.drain()
    assert not sched.requests, "every request finished"
    return len(seen), seen


@pytest.mark.parametrize("slower", [1.0, 1.7], ids=["as-predicted", "slower-than-predicted"])
@pytest.mark.parametrize("in_flight", [1, 2], ids=["lockstep", "two-in-flight"])
def test_each_decode_is_timed_at_the_end_of_its_step(in_flight, slower):
    n, seen = run(in_flight, slower)
    assert n > 150
    # The core's time for every decode it knows is the end of the step that ran it.
    off = [(given - end) / 1e6 for given, end in seen if abs(given - end) > 1]
    assert off == [], f"{len(off)} of {n} decodes timed off their step's end (ms): {off[:8]}"


def test_a_first_answer_token_in_flight_sets_the_answer_pace():
    """Two in flight, </think> comes back after the next step was scheduled
    with the request in it: that decode is the first answer token, so the
    step planned next is bounded by the answer's pace from it (0.9 x one
    budget of slack), not by the ceiling of an answer that has no pace yet
    (0.9 x 1.5 budgets)."""
    sched = build(Scheduler)
    m = sched.meridian
    clock = {"ns": 10**9}
    m.clock_ns = lambda: clock["ns"]
    sched.add_request(request("r", prompt(16, 1)))
    stepper = TwoInFlight(sched, script({"r": [THINK] + [WORD] * 6 + [END_THINK] + [WORD] * 30 + [EOS]}))
    ends: deque[int] = deque()
    ceilings = []
    answering = False
    for _ in range(100):
        if not sched.requests:
            break
        start = ends[-1] if ends else clock["ns"]
        out = stepper.schedule()
        if answering:
            ceilings.append(m.core.last_stats.step_ceiling_ms)
        ends.append(start + step_ns(out))
        if len(ends) >= 2 or not out.total_num_scheduled_tokens:
            clock["ns"] = max(clock["ns"], ends.popleft())
            in_flight = "r" in stepper.queue[-1][0].num_scheduled_tokens if stepper.queue else False
            stepper.apply()
            if not answering and m.phase.get(m.mid_of.get("r")) == meridian.Phase.OUTPUT_DECODE:
                answering = True
                assert in_flight, "the step after </think> runs the request"
    stepper.drain()
    budget = 20.0  # output_tpot_budget_ms's default
    assert ceilings and ceilings[0] == pytest.approx(0.9 * budget)
