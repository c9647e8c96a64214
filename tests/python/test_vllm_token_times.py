"""meridian.vllm.Scheduler times each decode at the end of the step that runs
it, as the simulator's core sees it, not at the moment vLLM scheduled it: the
core's answer and think deadlines count from these times (ADR-0032). Against
the real vLLM 0.32 scheduler classes, stepped lockstep and two in flight on a
clock whose steps take exactly what the static cost model predicts."""
from __future__ import annotations

from collections import deque

import pytest

vllm_rig = pytest.importorskip("vllm_rig", reason="needs the vLLM package (make setup installs it)")

from vllm_rig import END_THINK, EOS, THINK, WORD, TwoInFlight, build, prompt, request, script  # noqa: E402

from meridian.vllm import Scheduler  # noqa: E402

BASE_MS, PER_TOKEN_MS = 4.0, 0.5


@pytest.fixture(autouse=True)
def static_cost_model(tmp_path, monkeypatch):
    vllm_rig.isolate_config(tmp_path, monkeypatch)
    vllm_rig.write_config(tmp_path, monkeypatch,
                          f"[scheduler]\nstep_cost_online = false\nstep_cost_base_ms = {BASE_MS}\n"
                          f"step_cost_per_token_ms = {PER_TOKEN_MS}\nstep_cost_per_kv_token_us = 0.0\n")


def step_ns(out) -> int:
    """What the step takes on this clock: what the static model predicts for it."""
    return int((BASE_MS + PER_TOKEN_MS * out.total_num_scheduled_tokens) * 1e6)


def workload(sched) -> dict[str, list[int]]:
    tokens = {}
    for i in range(6):
        sched.add_request(request(f"t{i}", prompt(16, i)))
        tokens[f"t{i}"] = [THINK] + [WORD + i % 5] * (20 + 7 * i) + [END_THINK] + [WORD] * 12 + [EOS]
    for i in range(2):
        sched.add_request(request(f"a{i}", prompt(24, 50 + i)))
        tokens[f"a{i}"] = [WORD + 3] * (30 + 11 * i) + [EOS]
    return tokens


def run(in_flight: int) -> tuple[int, list[tuple[int, int]]]:
    """Steps the workload with `in_flight` steps in flight on the clock of a
    GPU that never idles: a step starts when the one before it ends, and is
    scheduled when it may be (lockstep: then; two in flight: when the one
    before it starts). Returns the decodes checked and, for each, (the time
    the core gave the decode, when the step ran it ended)."""
    sched = build(Scheduler)
    m = sched.meridian
    clock = {"ns": 10**9}
    m.clock_ns = lambda: clock["ns"]
    stepper = TwoInFlight(sched, script(workload(sched)))
    ends: deque[int] = deque()  # the steps in flight, oldest first
    seen: list[tuple[int, int]] = []
    for _ in range(2000):
        if not sched.requests:
            break
        start = ends[-1] if ends else clock["ns"]
        out = stepper.schedule()
        end = start + step_ns(out)
        ends.append(end)
        for rid in out.num_scheduled_tokens:
            mid = m.mid_of.get(rid)
            if mid is not None and mid in m.in_core:
                seen.append((m.core.view(mid).last_token_ns, end))
        if len(ends) >= in_flight or not out.total_num_scheduled_tokens:
            clock["ns"] = max(clock["ns"], ends.popleft())
            stepper.apply()
    stepper.drain()
    assert not sched.requests, "every request finished"
    return len(seen), seen


@pytest.mark.parametrize("in_flight", [1, 2], ids=["lockstep", "two-in-flight"])
def test_each_decode_is_timed_at_the_end_of_its_step(in_flight):
    n, seen = run(in_flight)
    assert n > 200
    # The core's time for every decode it knows is the end of the step that ran it.
    off = [(given - end) / 1e6 for given, end in seen if abs(given - end) > 1]
    assert off == [], f"{len(off)} of {n} decodes timed off their step's end (ms): {off[:8]}"
